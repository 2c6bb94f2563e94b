// phases.cu: the workload of scripts/gpu/counters.sh. Four kernels with
// different hardware signatures, no library beyond cudart:
//   sgemm   tiled FP32 GEMM (shared-memory tiles): SM busy, L2 hits
//   hgemm   FP16 GEMM on the tensor cores (WMMA 16x16x16): tensor pipe
//   copy    float4 copy of 1 GiB: DRAM read and write bandwidth
//   fmaloop a register-only FMA loop: SM throughput, no memory
//
//   phases phases MS   each kernel back to back for MS ms, one kernel per
//                      phase, 300 ms idle before each phase; one JSON line
//                      per phase with its CLOCK_REALTIME bounds (after a
//                      device synchronise at each end) and launch count
//   phases each N      each kernel N times, synchronised (for ncu)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                              \
	do {                                                                               \
		cudaError_t e_ = (x);                                                      \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "phases: %s: %s\n", #x, cudaGetErrorString(e_));   \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

enum { N = 4096, T = 32, COPY_ELEMS = 1 << 26 /* float4s: 1 GiB */ };

__global__ void sgemm(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c)
{
	__shared__ float sa[T][T + 1], sb[T][T + 1];
	int tx = threadIdx.x, ty = threadIdx.y; // 32 x 8 threads, 4 rows each
	int row = blockIdx.y * T, col = blockIdx.x * T + tx;
	float acc[4] = {0, 0, 0, 0};
	for (int k0 = 0; k0 < N; k0 += T) {
		for (int r = ty; r < T; r += 8) {
			sa[r][tx] = a[(row + r) * N + k0 + tx];
			sb[r][tx] = b[(k0 + r) * N + col];
		}
		__syncthreads();
		for (int k = 0; k < T; k++) {
			float bv = sb[k][tx];
			for (int i = 0; i < 4; i++)
				acc[i] += sa[ty + 8 * i][k] * bv;
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++)
		c[(row + ty + 8 * i) * N + col] = acc[i];
}

// hgemm: one warp per 16x16 tile of C, A row-major, B column-major.
__global__ void hgemm(const half *__restrict__ a, const half *__restrict__ b, float *__restrict__ c)
{
	using namespace nvcuda;
	int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int tm = warp / (N / 16), tn = warp % (N / 16);
	if (tm >= N / 16)
		return;
	wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
	wmma::fill_fragment(fc, 0.0f);
	for (int k = 0; k < N; k += 16) {
		wmma::load_matrix_sync(fa, a + tm * 16 * N + k, N);
		wmma::load_matrix_sync(fb, b + tn * 16 * N + k, N);
		wmma::mma_sync(fc, fa, fb, fc);
	}
	wmma::store_matrix_sync(c + tm * 16 * N + tn * 16, fc, N, wmma::mem_row_major);
}

__global__ void copy(const float4 *__restrict__ in, float4 *__restrict__ out)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < COPY_ELEMS; i += gridDim.x * blockDim.x)
		out[i] = in[i];
}

__global__ void fmaloop(float *out, int iters)
{
	float x = threadIdx.x * 1e-3f, y = 1.0001f, z = 0.9999f, w = blockIdx.x * 1e-3f;
	for (int i = 0; i < iters; i++) {
		x = fmaf(x, y, z);
		w = fmaf(w, z, y);
		y = fmaf(y, x, w);
		z = fmaf(z, w, x);
	}
	if (x + y + z + w == 12345.0f)
		out[0] = x; // keeps the loop
}

struct bufs {
	float *fa, *fb, *fc;
	half *ha, *hb;
	float4 *ci, *co;
	int sms;
};

static void launch(const struct bufs *b, int k)
{
	switch (k) {
	case 0: sgemm<<<dim3(N / T, N / T), dim3(T, 8)>>>(b->fa, b->fb, b->fc); break;
	case 1: hgemm<<<(N / 16) * (N / 16) / 8, 256>>>(b->ha, b->hb, b->fc); break;
	case 2: copy<<<b->sms * 8, 512>>>(b->ci, b->co); break;
	default: fmaloop<<<b->sms * 16, 256>>>(b->fc, 1 << 16); break;
	}
}

static const char *names[] = {"sgemm", "hgemm", "copy", "fmaloop"};

static unsigned long long now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "phases") && strcmp(argv[1], "each"))) {
		fprintf(stderr, "usage: phases phases MS | phases each N\n");
		return 2;
	}
	struct bufs b;
	CK(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaMalloc(&b.fa, sizeof(float) * N * N));
	CK(cudaMalloc(&b.fb, sizeof(float) * N * N));
	CK(cudaMalloc(&b.fc, sizeof(float) * N * N));
	CK(cudaMalloc(&b.ha, sizeof(half) * N * N));
	CK(cudaMalloc(&b.hb, sizeof(half) * N * N));
	CK(cudaMalloc(&b.ci, sizeof(float4) * COPY_ELEMS));
	CK(cudaMalloc(&b.co, sizeof(float4) * COPY_ELEMS));
	CK(cudaMemset(b.fa, 0, sizeof(float) * N * N));
	CK(cudaMemset(b.fb, 0, sizeof(float) * N * N));
	CK(cudaMemset(b.ha, 0, sizeof(half) * N * N));
	CK(cudaMemset(b.hb, 0, sizeof(half) * N * N));
	CK(cudaMemset(b.ci, 0, sizeof(float4) * COPY_ELEMS));
	for (int k = 0; k < 4; k++)
		launch(&b, k); // warm-up: modules loaded, clocks up
	CK(cudaDeviceSynchronize());

	int arg = atoi(argv[2]);
	for (int k = 0; k < 4; k++) {
		if (!strcmp(argv[1], "each")) {
			for (int i = 0; i < arg; i++) {
				launch(&b, k);
				CK(cudaDeviceSynchronize());
			}
			continue;
		}
		usleep(300000);
		unsigned long long t0 = now(CLOCK_REALTIME), m0 = now(CLOCK_MONOTONIC), end = m0 + arg * 1000000ull;
		long n = 0;
		while (now(CLOCK_MONOTONIC) < end) {
			for (int i = 0; i < 4; i++, n++)
				launch(&b, k);
			CK(cudaDeviceSynchronize());
		}
		unsigned long long t1 = now(CLOCK_REALTIME), m1 = now(CLOCK_MONOTONIC);
		printf("{\"kernel\":\"%s\",\"start_realtime_ns\":%llu,\"end_realtime_ns\":%llu,\"start_monotonic_ns\":%llu,"
		       "\"end_monotonic_ns\":%llu,\"launches\":%ld}\n",
		       names[k], t0, t1, m0, m1, n);
		fflush(stdout);
	}
	CK(cudaGetLastError());
	return 0;
}
