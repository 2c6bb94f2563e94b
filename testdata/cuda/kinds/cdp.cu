// cdp.cu: dynamic parallelism. Each of 4 host launches of tree_root
// launches 2 child grids from the device, each of which launches 1
// grandchild: 4 host launches, 12 device-launched grids. Prints the host
// launch count for scripts/gpu/kinds.sh. Build: nvcc -rdc=true -lcudadevrt.
#include <cstdio>

__global__ void leaf(int *hits) { atomicAdd(hits, 1); }

__global__ void branch(int *hits)
{
	atomicAdd(hits, 1);
	if (threadIdx.x == 0)
		leaf<<<1, 32>>>(hits);
}

__global__ void tree_root(int *hits)
{
	if (threadIdx.x < 2)
		branch<<<1, 32>>>(hits);
}

int main()
{
	int *hits, h = 0;
	if (cudaMalloc(&hits, sizeof(int)) != cudaSuccess)
		return 1;
	cudaMemset(hits, 0, sizeof(int));
	const int n = 4;
	for (int i = 0; i < n; i++)
		tree_root<<<1, 32>>>(hits);
	cudaError_t e = cudaDeviceSynchronize();
	cudaMemcpy(&h, hits, sizeof h, cudaMemcpyDeviceToHost);
	// per root: 2 branches x 32 threads + 2 leaves x 32 threads
	printf("kinds cdp: host_launches=%d device_grids=%d hits=%d ok=%d\n", n, 12, h, e == cudaSuccess && h == n * 128);
	return e == cudaSuccess && h == n * 128 ? 0 : 1;
}
