// graphnode: a kernel launched from an explicitly built CUDA graph
// (cudaGraphAddKernelNode), to check on the GPU machine that a patched
// kernel in a graph node gets its hidden launch-id parameter: with the shim
// patching (GPUPROBE_PATCH=1) the output must equal an uninstrumented run.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x)                                                                    \
	do {                                                                        \
		cudaError_t e_ = (x);                                               \
		if (e_ != cudaSuccess) {                                            \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

__global__ void axpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

int main()
{
	const int n = 1 << 20, launches = 3;
	float *x, *y;
	CHECK(cudaMalloc(&x, n * sizeof(float)));
	CHECK(cudaMalloc(&y, n * sizeof(float)));
	float *h = (float *)malloc(n * sizeof(float));
	for (int i = 0; i < n; i++)
		h[i] = (float)(i % 1000) * 0.5f;
	CHECK(cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice));

	cudaGraph_t g;
	cudaGraphExec_t ge;
	cudaGraphNode_t node;
	float a = 2.0f;
	int nn = n;
	void *args[] = {&a, &x, &y, &nn};
	cudaKernelNodeParams p = {};
	p.func = (void *)axpy;
	p.gridDim = dim3((n + 255) / 256);
	p.blockDim = dim3(256);
	p.kernelParams = args;
	CHECK(cudaGraphCreate(&g, 0));
	CHECK(cudaGraphAddKernelNode(&node, g, NULL, 0, &p));
	CHECK(cudaGraphInstantiateWithFlags(&ge, g, 0));
	for (int i = 0; i < launches; i++)
		CHECK(cudaGraphLaunch(ge, 0));
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost));
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += h[i];
	printf("graphnode: n=%d launches=%d checksum=%.6e y[777]=%.3f\n", n, launches, sum, h[777]);
	return 0;
}
