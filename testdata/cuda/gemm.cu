// A tiled single-precision GEMM (C = A*B, row-major, n a multiple of TILE):
// shared-memory tiles, a loop over tiles, __syncthreads and vector loads.
#include <cuda_runtime.h>

#define TILE 16

__global__ void __launch_bounds__(TILE * TILE)
sgemmTiled(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int n)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; t++) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; k++) {
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        }
        __syncthreads();
    }
    C[row * n + col] = acc;
}

// copy4 moves float4 vectors: ld.global.v4.f32 / st.global.v4.f32.
__global__ void copy4(const float4 *in, float4 *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i];
    }
}

int main(void)
{
    const int n = 256;
    float *a, *b, *c;
    cudaMalloc(&a, n * n * sizeof(float));
    cudaMalloc(&b, n * n * sizeof(float));
    cudaMalloc(&c, n * n * sizeof(float));
    dim3 block(TILE, TILE), grid(n / TILE, n / TILE);
    sgemmTiled<<<grid, block>>>(a, b, c, n);
    copy4<<<n * n / 4 / 256, 256>>>((const float4 *)a, (float4 *)c, n * n / 4);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
