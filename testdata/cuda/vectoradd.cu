// vectorAdd: c[i] = a[i] + b[i], the smallest kernel the parsers are tested on.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void vectorAdd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

int main(void)
{
    const int n = 1 << 16;
    float *a, *b, *c;
    cudaMallocManaged(&a, n * sizeof(float));
    cudaMallocManaged(&b, n * sizeof(float));
    cudaMallocManaged(&c, n * sizeof(float));
    for (int i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * i;
    }
    vectorAdd<<<(n + 255) / 256, 256>>>(a, b, c, n);
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) {
        if (c[i] != 3.0f * i) {
            printf("mismatch at %d\n", i);
            return 1;
        }
    }
    printf("ok\n");
    return 0;
}
