// Templated kernels (mangled names with template arguments), a generic
// pointer load through a __device__ function, and inline PTX assembly with
// braces, predicates and a local register block.
#include <cuda_runtime.h>
#include <cstdint>

template <typename T, int N>
__global__ void scale(T *v, T factor, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < N; k++) {
        size_t j = i * N + k;
        if (j < n) {
            v[j] = v[j] * factor;
        }
    }
}

template __global__ void scale<float, 1>(float *, float, size_t);
template __global__ void scale<double, 2>(double *, double, size_t);
template __global__ void scale<int8_t, 4>(int8_t *, int8_t, size_t);

// bump loads and stores through a generic pointer (ld.f32 / st.f32 with
// no state space): the pointer may be global or shared.
__device__ __noinline__ float bump(float *p)
{
    float v = *p + 1.0f;
    *p = v;
    return v;
}

__global__ void laneSum(float *in, float *out)
{
    __shared__ float buf[32];
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    buf[lane] = bump(in + threadIdx.x);
    __syncwarp();
    float s = bump(&buf[lane ^ 1]);
    unsigned r;
    asm("{\n\t"
        " .reg .pred p;\n\t"
        " .reg .u32 t;\n\t"
        " setp.eq.u32 p, %1, 0;\n\t"
        " @p mov.u32 t, 1;\n\t"
        " @!p mov.u32 t, 2;\n\t"
        " mov.u32 %0, t;\n\t"
        "}"
        : "=r"(r)
        : "r"(lane));
    out[threadIdx.x] = s * (float)r;
}

struct Pair {
    double x;
    long long y;
};

__global__ void pairs(const Pair *in, Pair *out, unsigned short *h, const char *msg)
{
    unsigned i = threadIdx.x;
    Pair p = in[i];
    p.x += 1.0;
    p.y ^= 0x55;
    out[i] = p;
    h[i] = (unsigned short)(h[i] + msg[i]);
}

int main(void)
{
    return 0;
}
