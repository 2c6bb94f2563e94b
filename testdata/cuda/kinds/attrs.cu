// attrs.cu: launches with launch attributes through cudaLaunchKernelExC
// (the runtime's cuLaunchKernelEx path): 2 with a priority attribute,
// 2 with the cooperative attribute, and on sm_90 2 thread-block cluster
// launches (cluster dimension 2). Prints the host launch count.
#include <cstdio>

__global__ void scale(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= 2.0f;
}

__global__ void cluster_scale(float *x, int n)
{
#if __CUDA_ARCH__ >= 900
	unsigned r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	(void)r;
#endif
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] += 1.0f;
}

static cudaError_t launch(const void *fn, cudaLaunchAttribute *a, int na, float *x, int n)
{
	cudaLaunchConfig_t c = {};
	c.gridDim = dim3(8), c.blockDim = dim3(128), c.attrs = a, c.numAttrs = na;
	void *args[] = {&x, &n};
	return cudaLaunchKernelExC(&c, fn, args);
}

int main()
{
	int n = 1024, major = 0, launches = 0;
	float *x;
	cudaMalloc(&x, n * sizeof(float));
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
	cudaLaunchAttribute a[1];
	cudaError_t e = cudaSuccess;
	for (int i = 0; i < 2 && e == cudaSuccess; i++, launches++) {
		a[0].id = cudaLaunchAttributePriority, a[0].val.priority = 0;
		e = launch((const void *)scale, a, 1, x, n);
	}
	for (int i = 0; i < 2 && e == cudaSuccess; i++, launches++) {
		a[0].id = cudaLaunchAttributeCooperative, a[0].val.cooperative = 1;
		e = launch((const void *)scale, a, 1, x, n);
	}
	int clusters = 0;
	if (major >= 9)
		for (int i = 0; i < 2 && e == cudaSuccess; i++, launches++, clusters++) {
			a[0].id = cudaLaunchAttributeClusterDimension;
			a[0].val.clusterDim.x = 2, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
			e = launch((const void *)cluster_scale, a, 1, x, n);
		}
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	printf("kinds attrs: host_launches=%d clusters=%d ok=%d (%s)\n", launches, clusters, e == cudaSuccess,
	       cudaGetErrorString(e));
	return e == cudaSuccess ? 0 : 1;
}
