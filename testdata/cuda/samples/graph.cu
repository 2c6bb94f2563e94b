// graph.cu - gpuprobe end-to-end sample 4: a CUDA Graph captured from a
// stream (scripts/gpu/samples.sh).
//
//   graph [ITERS]   (default 5): the graph is launched ITERS times
//
// The captured graph: an H2D copy from pinned memory, g_scale (1D, 128-thread
// blocks), blur2d (2D, 32x4 blocks), g_scale again (a second kernel node of
// the same kernel), g_fold (1D, 192-thread blocks, folds into a state
// buffer that persists across graph launches) and a D2H copy of the state.
// After each launch the state is checked against a CPU reference (integer
// arithmetic: exact). Prints the launches of each kernel (graph kernel nodes
// x ITERS) and a checksum; the output must be identical with and without
// gpuprobe.
//
// Before that, g_never is captured into a graph that is instantiated and
// destroyed without a launch: it never runs, so gpuprobe must report no
// launch of it (a captured launch writes no launch record).
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "common.h"

enum { W = 256, H = 96, N = W * H };

extern "C" __global__ void g_scale(uint32_t *v, int n, uint32_t k)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		v[i] = v[i] * k + (uint32_t)i;
}

GP_HD inline uint32_t blur_at(const uint32_t *in, int x, int y, int w, int h)
{
	uint32_t s = 0;
	for (int dy = -1; dy <= 1; dy++)
		for (int dx = -1; dx <= 1; dx++) {
			int xx = x + dx, yy = y + dy;
			if (xx >= 0 && xx < w && yy >= 0 && yy < h)
				s += gp_rotl(in[yy * w + xx], (dx + 1) * 3 + dy + 2);
		}
	return s;
}

// _Z6blur2dPKjPjii
__global__ void blur2d(const uint32_t *in, uint32_t *out, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x;
	int y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x < w && y < h)
		out[y * w + x] = blur_at(in, x, y, w, h);
}

extern "C" __global__ void g_fold(uint32_t *acc, const uint32_t *v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		acc[i] = gp_mix(acc[i] ^ v[i]) + 1;
}

// g_never: captured, instantiated, never launched (it would zero v).
extern "C" __global__ void g_never(uint32_t *v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		v[i] = 0;
}

static const char *const kScale = "g_scale", *const kBlur = "_Z6blur2dPKjPjii", *const kFold = "g_fold";

int main(int argc, char **argv)
{
	long iters = gp_iters(argc, argv, 5);
	const size_t bytes = N * sizeof(uint32_t);
	uint32_t *h_seed, *h_acc, *d_v, *d_w, *d_acc;
	CHECK(cudaMallocHost(&h_seed, bytes));
	CHECK(cudaMallocHost(&h_acc, bytes));
	CHECK(cudaMalloc(&d_v, bytes));
	CHECK(cudaMalloc(&d_w, bytes));
	CHECK(cudaMalloc(&d_acc, bytes));
	for (int i = 0; i < N; i++)
		h_seed[i] = gp_mix((uint32_t)i * 2654435761U);
	CHECK(cudaMemset(d_acc, 0, bytes));

	cudaStream_t st;
	CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	const dim3 b1(128), g1((N + 127) / 128);
	const dim3 b2(32, 4), g2((W + 31) / 32, (H + 3) / 4);
	const dim3 b3(192), g3((N + 191) / 192);
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	g_never<<<g1, b1, 0, st>>>(d_acc, N);
	CHECK(cudaStreamEndCapture(st, &graph));
	CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaGraphDestroy(graph));
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	CHECK(cudaMemcpyAsync(d_v, h_seed, bytes, cudaMemcpyHostToDevice, st));
	g_scale<<<g1, b1, 0, st>>>(d_v, N, 5u);
	blur2d<<<g2, b2, 0, st>>>(d_v, d_w, W, H);
	g_scale<<<g1, b1, 0, st>>>(d_w, N, 3u);
	g_fold<<<g3, b3, 0, st>>>(d_acc, d_w, N);
	CHECK(cudaMemcpyAsync(h_acc, d_acc, bytes, cudaMemcpyDeviceToHost, st));
	CHECK(cudaStreamEndCapture(st, &graph));
	CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
	const int kScaleNodes = 2, kBlurNodes = 1, kFoldNodes = 1;

	// The CPU reference: the seed's chain is the same every launch; the
	// state folds it in once per launch.
	std::vector<uint32_t> v(N), w(N), acc(N, 0);
	for (int i = 0; i < N; i++)
		v[i] = h_seed[i] * 5u + (uint32_t)i;
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			w[y * W + x] = blur_at(v.data(), x, y, W, H);
	for (int i = 0; i < N; i++)
		w[i] = w[i] * 3u + (uint32_t)i;

	uint64_t sum = GP_FNV_INIT;
	for (long it = 0; it < iters; it++) {
		CHECK(cudaGraphLaunch(exec, st));
		CHECK(cudaStreamSynchronize(st));
		for (int i = 0; i < N; i++)
			acc[i] = gp_mix(acc[i] ^ w[i]) + 1;
		if (memcmp(acc.data(), h_acc, bytes) != 0) {
			for (int i = 0; i < N; i++)
				if (acc[i] != h_acc[i]) {
					fprintf(stderr, "graph: launch %ld: element %d is %#x, want %#x\n", it, i, h_acc[i], acc[i]);
					break;
				}
			return 1;
		}
		sum = gp_fnv(sum, h_acc, N);
	}
	printf("graph: n=%d graph launches=%ld kernel nodes=%d results checked on the CPU\n", N, iters,
	       kScaleNodes + kBlurNodes + kFoldNodes);
	printf("launches %s %ld\n", kScale, kScaleNodes * iters);
	printf("launches %s %ld\n", kBlur, kBlurNodes * iters);
	printf("launches %s %ld\n", kFold, kFoldNodes * iters);
	printf("checksum %016llx\n", (unsigned long long)sum);
	cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
	cudaFreeHost(h_seed), cudaFreeHost(h_acc), cudaFree(d_v), cudaFree(d_w), cudaFree(d_acc);
	return 0;
}
