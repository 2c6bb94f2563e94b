// sgemm.cu - a tiled SGEMM launched in a loop, the GEMM application of
// scripts/gpu/examples.sh (bpftime's cutlass and per-thread-timing-dist
// examples probe a GEMM kernel of a library or of their own).
//
//   sgemm [ITERS [N]]   (defaults 10 and 256; N a multiple of 16, ≤ 2048)
//
// Launches sgemm (extern "C", so its PTX name is "sgemm") ITERS times over
// an N x N matrix in 16 x 16 blocks: every launch computes C = A * B
// again, so the result does not depend on ITERS. The inputs are small integers (entries of A in 0..3, of B in
// 0..7), so every float sum is exact (N * 3 * 7 < 2^24) and the result is
// checked against the CPU. Prints the geometry, the launch count and a
// checksum of C; the output must be identical with and without gpuprobe.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "common.h"

enum { TILE = 16 };

extern "C" __global__ void __launch_bounds__(TILE * TILE)
sgemm(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int n)
{
	__shared__ float as[TILE][TILE];
	__shared__ float bs[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y;
	int col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.0f;
	for (int t = 0; t < n / TILE; t++) {
		as[threadIdx.y][threadIdx.x] = a[row * n + t * TILE + threadIdx.x];
		bs[threadIdx.y][threadIdx.x] = b[(t * TILE + threadIdx.y) * n + col];
		__syncthreads();
		for (int k = 0; k < TILE; k++)
			acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
		__syncthreads();
	}
	c[row * n + col] = acc;
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

int main(int argc, char **argv)
{
	long iters = arg(argc, argv, 1, 10, 1, 100000, "ITERS");
	long n = arg(argc, argv, 2, 256, TILE, 2048, "N");
	if (n % TILE != 0) {
		fprintf(stderr, "%s: N %ld: want a multiple of %d\n", argv[0], n, TILE);
		return 2;
	}
	size_t nn = (size_t)n * n, bytes = nn * sizeof(float);
	std::vector<float> a(nn), b(nn), c(nn);
	for (size_t i = 0; i < nn; i++) {
		a[i] = (float)(gp_mix((uint32_t)i) % 4);
		b[i] = (float)(gp_mix((uint32_t)i + 0x9e3779b9u) % 8);
	}
	float *da, *db, *dc;
	CHECK(cudaMalloc(&da, bytes));
	CHECK(cudaMalloc(&db, bytes));
	CHECK(cudaMalloc(&dc, bytes));
	CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
	dim3 grid((unsigned)(n / TILE), (unsigned)(n / TILE)), block(TILE, TILE);
	for (long it = 0; it < iters; it++) {
		sgemm<<<grid, block>>>(da, db, dc, (int)n);
		CHECK(cudaGetLastError());
	}
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
	long bad = 0;
	for (long r = 0; r < n; r++)
		for (long col = 0; col < n; col++) {
			float want = 0;
			for (long k = 0; k < n; k++)
				want += a[r * n + k] * b[k * n + col];
			if (c[r * n + col] != want && bad++ < 5)
				fprintf(stderr, "c[%ld][%ld] = %.1f, want %.1f\n", r, col, c[r * n + col], want);
		}
	std::vector<uint32_t> w(nn);
	memcpy(w.data(), c.data(), bytes);
	uint64_t h = gp_fnv(GP_FNV_INIT, w.data(), nn);
	printf("geometry grid=%ux%u block=%dx%d n=%ld iters=%ld\n", grid.x, grid.y, TILE, TILE, n, iters);
	printf("launches sgemm %ld\n", iters);
	printf("checksum %016llx%s\n", (unsigned long long)h, bad ? " MISMATCH" : "");
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	return bad ? 1 : 0;
}
