// graphdev.cu: a graph instantiated for device launch
// (cudaGraphInstantiateFlagDeviceLaunch, CUDA 12.0+), uploaded and
// launched from the host twice, then fired once from a kernel (a device
// graph launch). A device graph may only be launched from a kernel that
// itself runs as a node of a graph (programming guide, "Device Launch"):
// the launching kernel is captured into a second, host-launched graph.
// Host launch calls: 3 graph launches of 1 kernel node each (2 of the
// device graph, 1 of the launching graph); device: 1 graph run, whose
// cudaGraphLaunch result the launcher stores for the host to print.
#include <cstdio>

__global__ void node_kernel(int *hits) { atomicAdd(hits, 1); }

__global__ void launcher(cudaGraphExec_t g, int *dev_err)
{
	if (threadIdx.x == 0)
		*dev_err = (int)cudaGraphLaunch(g, cudaStreamGraphFireAndForget);
}

int main()
{
	int *hits, *dev_err, h = 0, de = -1;
	cudaMalloc(&hits, sizeof(int));
	cudaMalloc(&dev_err, sizeof(int));
	cudaMemset(hits, 0, sizeof(int));
	cudaMemset(dev_err, 0xff, sizeof(int));
	cudaStream_t s;
	cudaStreamCreate(&s);
	cudaGraph_t g, gl;
	cudaGraphExec_t ge, gle;
	cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
	node_kernel<<<1, 32, 0, s>>>(hits);
	cudaError_t e = cudaStreamEndCapture(s, &g);
	if (e == cudaSuccess)
		e = cudaGraphInstantiate(&ge, g, cudaGraphInstantiateFlagDeviceLaunch);
	if (e == cudaSuccess)
		e = cudaGraphUpload(ge, s);
	if (e == cudaSuccess) {
		cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
		launcher<<<1, 1, 0, s>>>(ge, dev_err);
		e = cudaStreamEndCapture(s, &gl);
	}
	if (e == cudaSuccess)
		e = cudaGraphInstantiate(&gle, gl, 0);
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaGraphLaunch(ge, s);
	if (e == cudaSuccess)
		e = cudaGraphLaunch(gle, s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s);
	cudaMemcpy(&h, hits, sizeof h, cudaMemcpyDeviceToHost);
	cudaMemcpy(&de, dev_err, sizeof de, cudaMemcpyDeviceToHost);
	int ok = e == cudaSuccess && de == cudaSuccess && h == 96;
	printf("kinds graphdev: host_launches=%d device_graph_runs=1 hits=%d ok=%d (host: %s, device launch: %s)\n", 3,
	       h, ok, cudaGetErrorString(e), cudaGetErrorString((cudaError_t)de));
	return ok ? 0 : 1;
}
