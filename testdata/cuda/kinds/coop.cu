// coop.cu: a cooperative launch (cudaLaunchCooperativeKernel) whose grid
// synchronises twice; 3 launches.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void grid_sum(int *v, int *out, int n)
{
	cg::grid_group g = cg::this_grid();
	for (int i = g.thread_rank(); i < n; i += g.size())
		v[i] = 1;
	g.sync();
	if (g.thread_rank() == 0) {
		int s = 0;
		for (int i = 0; i < n; i++)
			s += v[i];
		*out = s;
	}
	g.sync();
}

int main()
{
	int dev = 0, supported = 0, sms = 0, per = 0;
	cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, dev);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, grid_sum, 128, 0);
	if (!supported || per < 1)
		return 2;
	int n = 1 << 16, *v, *out, h = 0;
	cudaMalloc(&v, n * sizeof(int));
	cudaMalloc(&out, sizeof(int));
	void *args[] = {&v, &out, &n};
	const int launches = 3;
	cudaError_t e = cudaSuccess;
	for (int i = 0; i < launches && e == cudaSuccess; i++)
		e = cudaLaunchCooperativeKernel((void *)grid_sum, dim3(sms), dim3(128), args, 0, 0);
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost);
	printf("kinds coop: host_launches=%d sum=%d ok=%d\n", launches, h, e == cudaSuccess && h == n);
	return e == cudaSuccess && h == n ? 0 : 1;
}
