// Injector samples: vectorAdd with bpftime's signature (the grid covers the
// arrays exactly; it is what testdata/bpf's programs target), and vectorAddN
// with a bounds check (a predicated early exit).
extern "C" __global__ void vectorAddC(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

__global__ void vectorAdd(const float *a, const float *b, float *c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    c[i] = a[i] + b[i];
}

__global__ void vectorAddN(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// vectorAddGS: the same sum with a grid-stride loop, launched with a few
// blocks per SM (the usual production form; one warp record per resident
// warp instead of one per 32 elements).
__global__ void vectorAddGS(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}
