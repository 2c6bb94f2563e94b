// Injector sample: a kernel that leaves through several returns and a
// predicated PTX exit inside an inline-assembly block, so that the lanes of
// one warp leave at different points.
namespace sample {

__global__ void multiExit(const int *in, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int v = in[i];
    if (v < 0) {
        out[i] = -1;
        return;
    }
    // v == 0: leave through a predicated exit (the output stays as it was).
    asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.s32 p, %0, 0;\n\t@p exit;\n\t}" ::"r"(v));
    int acc = 0;
    for (int k = 0; k < (v & 15); k++) {
        acc += k * v;
        if (acc > 1000) {
            out[i] = acc;
            return;
        }
    }
    out[i] = acc + 1;
}

} // namespace sample
