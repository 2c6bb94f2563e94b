// graphdev.cu: a graph instantiated for device launch
// (cudaGraphInstantiateFlagDeviceLaunch, CUDA 12.0+), uploaded and
// launched from the host twice, then fired from a kernel once (a device
// graph launch). Host launch calls: 2 graph launches of 1 kernel node and
// 1 kernel launch (the launcher); device: 1 graph run.
#include <cstdio>

__global__ void node_kernel(int *hits) { atomicAdd(hits, 1); }

__global__ void launcher(cudaGraphExec_t g)
{
	if (threadIdx.x == 0)
		cudaGraphLaunch(g, cudaStreamGraphFireAndForget);
}

int main()
{
	int *hits, h = 0;
	cudaMalloc(&hits, sizeof(int));
	cudaMemset(hits, 0, sizeof(int));
	cudaStream_t s;
	cudaStreamCreate(&s);
	cudaGraph_t g;
	cudaGraphExec_t ge;
	cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
	node_kernel<<<1, 32, 0, s>>>(hits);
	cudaStreamEndCapture(s, &g);
	cudaError_t e = cudaGraphInstantiate(&ge, g, cudaGraphInstantiateFlagDeviceLaunch);
	if (e == cudaSuccess)
		e = cudaGraphUpload(ge, s);
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaGraphLaunch(ge, s);
	if (e == cudaSuccess) {
		launcher<<<1, 1, 0, s>>>(ge);
		e = cudaStreamSynchronize(s);
	}
	cudaMemcpy(&h, hits, sizeof h, cudaMemcpyDeviceToHost);
	printf("kinds graphdev: host_launches=%d device_graph_runs=1 hits=%d ok=%d (%s)\n", 3, h,
	       e == cudaSuccess && h == 96, cudaGetErrorString(e));
	return e == cudaSuccess && h == 96 ? 0 : 1;
}
