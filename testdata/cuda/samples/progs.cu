// progs.cu - gpuprobe end-to-end sample for user programs through the real
// collector (scripts/gpu/programs.sh): bpftime's vectorAdd signature, so
// testdata/bpf/threadhist.o and kernelretsnoop.o attach unmodified
// (kretprobe/_Z9vectorAddPKfS0_Pf).
//
//   progs [ITERS [N [graph]]]   (defaults 10 and 1048576)
//
// Launches vectorAdd ITERS times on the default stream, one thread per
// element with 256-thread blocks over exactly N elements (N a multiple of
// 256, so the kernel needs no bounds check and has no length parameter):
// the first launch c = a + b, the others c = a + c, so c[i] = b[i] + ITERS *
// a[i]. The inputs are small integers, so every float is exact (ITERS ≤
// 60000 keeps them below 2^24) and the result is checked against the CPU.
// Prints the launch geometry, the launch count of the kernel and a checksum
// of c; the output must be identical with and without gpuprobe. With
// "graph" the launches are CUDA graph launches, as in bpftime's cudagraph
// example: a graph of the first launch, then one of the others' launched
// ITERS - 1 times, on a stream of the sample's own.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "common.h"

enum { BLOCK = 256 };

// _Z9vectorAddPKfS0_Pf, as in bpftime's example/gpu samples.
__global__ void vectorAdd(const float *a, const float *b, float *c)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	c[i] = a[i] + b[i];
}

// arg reads argv[i] as an integer in lo..hi (def when absent).
static long arg(int argc, char **argv, int i, long def, long lo, long hi, const char *what)
{
	if (argc <= i)
		return def;
	char *end;
	long v = strtol(argv[i], &end, 10);
	if (*end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "%s: %s %s: want an integer in %ld..%ld\n", argv[0], what, argv[i], lo, hi);
		exit(2);
	}
	return v;
}

// graph_launch captures one vectorAdd(a, b, c) on stream s into a graph
// and launches it times times.
static void graph_launch(cudaStream_t s, unsigned grid, const float *a, const float *b, float *c, long times)
{
	cudaGraph_t g;
	cudaGraphExec_t x;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	vectorAdd<<<grid, BLOCK, 0, s>>>(a, b, c);
	CHECK(cudaGetLastError());
	CHECK(cudaStreamEndCapture(s, &g));
	CHECK(cudaGraphInstantiateWithFlags(&x, g, 0));
	for (long i = 0; i < times; i++)
		CHECK(cudaGraphLaunch(x, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaGraphExecDestroy(x));
	CHECK(cudaGraphDestroy(g));
}

// graph_launches runs progs' ITERS launches as graph launches.
static void graph_launches(unsigned grid, const float *da, const float *db, float *dc, long iters)
{
	cudaStream_t s;
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	graph_launch(s, grid, da, db, dc, 1);
	if (iters > 1)
		graph_launch(s, grid, da, dc, dc, iters - 1);
	CHECK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
	long iters = arg(argc, argv, 1, 10, 1, 60000, "ITERS");
	long n = arg(argc, argv, 2, 1 << 20, BLOCK, 1L << 26, "N");
	if (n % BLOCK != 0) {
		fprintf(stderr, "%s: N %ld: want a multiple of %d\n", argv[0], n, BLOCK);
		return 2;
	}
	std::vector<float> a(n), b(n), c(n);
	for (long i = 0; i < n; i++) {
		a[i] = (float)(i % 251);
		b[i] = (float)(i % 997);
	}
	float *da, *db, *dc;
	size_t bytes = n * sizeof(float);
	CHECK(cudaMalloc(&da, bytes));
	CHECK(cudaMalloc(&db, bytes));
	CHECK(cudaMalloc(&dc, bytes));
	CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
	unsigned grid = (unsigned)(n / BLOCK);
	bool graph = argc > 3 && strcmp(argv[3], "graph") == 0;
	if (argc > 3 && !graph) {
		fprintf(stderr, "%s: mode %s: want graph\n", argv[0], argv[3]);
		return 2;
	}
	if (graph)
		graph_launches(grid, da, db, dc, iters);
	for (long it = 0; !graph && it < iters; it++) {
		vectorAdd<<<grid, BLOCK>>>(da, it == 0 ? db : dc, dc);
		CHECK(cudaGetLastError());
	}
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
	long bad = 0;
	for (long i = 0; i < n; i++)
		if (c[i] != b[i] + (float)iters * a[i] && bad++ < 5)
			fprintf(stderr, "c[%ld] = %.1f, want %.1f\n", i, c[i], b[i] + (float)iters * a[i]);
	uint64_t h = GP_FNV_INIT;
	std::vector<uint32_t> w(n);
	memcpy(w.data(), c.data(), bytes);
	h = gp_fnv(h, w.data(), n);
	printf("geometry grid=%u block=%d n=%ld iters=%ld%s\n", grid, BLOCK, n, iters, graph ? " graph" : "");
	printf("launches _Z9vectorAddPKfS0_Pf %ld\n", iters);
	printf("checksum %016llx%s\n", (unsigned long long)h, bad ? " MISMATCH" : "");
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	return bad ? 1 : 0;
}
