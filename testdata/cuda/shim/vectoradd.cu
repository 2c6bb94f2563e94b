// vectoradd.cu - the shim's sample for the GPU checks (scripts/gpu/e2e.sh,
// sampling.sh, hostwait.sh), built by nvcc on the GPU machine with static
// cudart (nvcc's default) or -cudart shared.
//
//   vectoradd run [ITERS]    ITERS × (vectorAdd + scale) on 2^20 floats;
//                            prints a checksum and "app: launches=2*ITERS"
//   vectoradd sync [ITERS]   the same, synchronising after every kernel
//   vectoradd gap [ITERS]    ITERS × (spinA, spinB back to back, then 3 ms
//                            asleep): spinB is always queued while spinA
//                            runs (about 0.5 ms each); spinA finds its
//                            stream idle, waiting for the host (the
//                            stream-gap check, scripts/gpu/hostwait.sh);
//                            prints a checksum and "app: launches=2*ITERS"
//   vectoradd bench [N]      N launches of an empty kernel; prints the host
//                            time per launch (enqueue only) and
//                            "app: launches=N+1000" (1000 warm-up launches)
//
// The output depends only on the computation, so it must be identical with
// and without the shim.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
	do {                                                                              \
		cudaError_t e_ = (x);                                                     \
		if (e_ != cudaSuccess) {                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			return 1;                                                         \
		}                                                                         \
	} while (0)

__global__ void vectorAdd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

__global__ void scale(float *c, float s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] *= s;
}

__global__ void empty() {}

/* A dependent chain of multiply-adds: about half a millisecond on an H100
 * with its result the same on every run. */
__device__ float spin(float *out, int iters)
{
	float x = (float)threadIdx.x;
	for (int i = 0; i < iters; i++)
		x = x * 0.999999f + 1e-3f;
	out[blockIdx.x * blockDim.x + threadIdx.x] = x;
	return x;
}
__global__ void spinA(float *out, int iters) { spin(out, iters); }
__global__ void spinB(float *out, int iters) { spin(out, iters); }

static double now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "run";
	long iters = argc > 2 ? atol(argv[2]) : 10;
	if (strcmp(mode, "bench") == 0) {
		for (int i = 0; i < 1000; i++)
			empty<<<1, 32>>>();
		CHECK(cudaDeviceSynchronize());
		double t0 = now_ns();
		for (long i = 0; i < iters; i++)
			empty<<<1, 32>>>();
		double t1 = now_ns();
		CHECK(cudaDeviceSynchronize());
		CHECK(cudaGetLastError());
		double ns = t1 - t0;
		printf("bench: launches=%ld ns_per_launch=%.1f\n", iters, ns / (double)iters);
		printf("app: launches=%ld\n", iters + 1000);
		return 0;
	}
	if (strcmp(mode, "gap") == 0) {
		float *dout, out[64];
		const int spins = 200000;
		CHECK(cudaMalloc(&dout, sizeof out));
		for (long it = 0; it < iters; it++) {
			spinA<<<1, 32>>>(dout, spins);
			spinB<<<1, 32>>>(dout + 32, spins);
			struct timespec d = {0, 3000000};
			nanosleep(&d, NULL);
		}
		CHECK(cudaGetLastError());
		CHECK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
		double sum = 0;
		for (int i = 0; i < 64; i++)
			sum += out[i];
		printf("gap: iters=%ld checksum=%.6e\n", iters, sum);
		printf("app: launches=%ld\n", 2 * iters);
		cudaFree(dout);
		return 0;
	}
	const int n = 1 << 20;
	size_t bytes = n * sizeof(float);
	float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
	for (int i = 0; i < n; i++)
		a[i] = 0.5f * (float)(i % 1000), b[i] = 2.0f * (float)(i % 777);
	float *da, *db, *dc;
	CHECK(cudaMalloc(&da, bytes));
	CHECK(cudaMalloc(&db, bytes));
	CHECK(cudaMalloc(&dc, bytes));
	CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
	/* "sync": every kernel waits for the previous one to finish, so each
	 * launch's queueing is its own (host probes' launch latency checks). */
	int sync = strcmp(mode, "sync") == 0;
	for (long it = 0; it < iters; it++) {
		vectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
		if (sync)
			CHECK(cudaDeviceSynchronize());
		scale<<<(n + 255) / 256, 256>>>(dc, 1.5f, n);
		if (sync)
			CHECK(cudaDeviceSynchronize());
	}
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += c[i];
	printf("vectorAdd: n=%d iters=%ld checksum=%.6e c[12345]=%.3f\n", n, iters, sum, c[12345]);
	printf("app: launches=%ld\n", 2 * iters);
	cudaFree(da), cudaFree(db), cudaFree(dc);
	free(a), free(b), free(c);
	return 0;
}
