// Kernels with several returns, loops, early exits and a __device__
// function that is not inlined, so the PTX has labelled and predicated
// ret instructions, a .func with a return parameter, and calls.
#include <cuda_runtime.h>

__device__ __noinline__ int collatzSteps(unsigned long long x, int limit)
{
    int steps = 0;
    while (x != 1 && steps < limit) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        steps++;
    }
    return steps;
}

__global__ void collatz(int *out, int n, int limit)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    if (i == 0) {
        out[0] = 0;
        return;
    }
    out[i] = collatzSteps((unsigned long long)i, limit);
}

__global__ void findFirst(const int *v, int n, int key, int *where)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (v[i] == key) {
            atomicMin(where, i);
            return;
        }
        if (v[i] < 0) {
            break;
        }
    }
    if (threadIdx.x == 0 && *where < 0) {
        asm volatile("exit;");
    }
}

__device__ int counter;
__constant__ int table[4] = {1, 2, 3, 4};

__global__ void globals(int *out)
{
    int t = threadIdx.x & 3;
    atomicAdd(&counter, table[t]);
    out[threadIdx.x] = counter;
}

int main(void)
{
    int *out;
    cudaMalloc(&out, 1024 * sizeof(int));
    collatz<<<4, 256>>>(out, 1024, 1000);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
