// multistream.cu - gpuprobe end-to-end sample 3: several kernels on several
// streams with async copies (scripts/gpu/samples.sh).
//
//   multistream [ITERS]            (default 3)
//   multistream ITERS blocking     the same on 3 blocking streams
//                                  (cudaStreamCreate) with no events: the
//                                  legacy default stream's implicit
//                                  synchronisation orders the digest after
//                                  them (scripts/gpu/hostprobes.sh)
//
// Each iteration, on each of 3 non-blocking streams: an H2D copy from pinned
// memory, three kernels (1D with 100-thread blocks, 2D with 16x8 blocks, 3D
// grid with 7x5x3 = 105-thread blocks), a D2H copy into pinned memory and an
// event; the legacy default stream waits for the three events and runs a
// fourth kernel (integer atomics) that digests the three results. The next
// iteration's inputs depend on the digest. Every result is checked against
// a CPU reference (integer arithmetic: exact). Prints the launches of each
// kernel (its symbol, as cuFuncGetName gives it) and a checksum of every
// result; the output must be identical with and without gpuprobe.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "common.h"

enum { NSTREAMS = 3, W = 160, H = 120, N = W * H, VX = 40, VY = 24, VZ = 20 };
static_assert(VX * VY * VZ == N, "the volume is the image");

extern "C" __global__ void ms_mix1d(const uint32_t *in, uint32_t *out, int n, uint32_t salt)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	out[i] = gp_mix(in[i] ^ salt) + (uint32_t)i;
}

GP_HD inline uint32_t stencil_at(const uint32_t *in, int x, int y, int w, int h)
{
	int l = x > 0 ? x - 1 : x, r = x < w - 1 ? x + 1 : x;
	int u = y > 0 ? y - 1 : y, d = y < h - 1 ? y + 1 : y;
	return in[y * w + x] + gp_rotl(in[y * w + l], 1) + gp_rotl(in[y * w + r], 3) +
	       gp_rotl(in[u * w + x], 5) + gp_rotl(in[d * w + x], 7);
}

// _Z9stencil2dPKjPjii
__global__ void stencil2d(const uint32_t *in, uint32_t *out, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x;
	int y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x >= w || y >= h)
		return;
	out[y * w + x] = stencil_at(in, x, y, w, h);
}

namespace gp {
// _ZN2gp6cube3dILi3EEEvPjiii
template <int R> __global__ void cube3d(uint32_t *vol, int nx, int ny, int nz)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x;
	int y = blockIdx.y * blockDim.y + threadIdx.y;
	int z = blockIdx.z * blockDim.z + threadIdx.z;
	if (x >= nx || y >= ny || z >= nz)
		return;
	int i = (z * ny + y) * nx + x;
	vol[i] = gp_mix(vol[i] + (uint32_t)(R * i)) ^ (uint32_t)(x | y << 8 | z << 16);
}
} // namespace gp

GP_HD inline uint32_t digest_word(uint32_t a, uint32_t b, uint32_t c)
{
	return gp_mix(a) ^ gp_rotl(gp_mix(b), 7) ^ gp_rotl(gp_mix(c), 13);
}

extern "C" __global__ void ms_digest(const uint32_t *a, const uint32_t *b, const uint32_t *c, int n,
				     uint32_t *digest)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	uint32_t v = digest_word(a[i], b[i], c[i]);
	atomicAdd(&digest[0], v);
	atomicXor(&digest[1], gp_rotl(v, i & 31));
}

static const char *const kMix = "ms_mix1d", *const kStencil = "_Z9stencil2dPKjPjii",
			 *const kCube = "_ZN2gp6cube3dILi3EEEvPjiii", *const kDigest = "ms_digest";

// The CPU reference of one stream's chain.
static void reference(const uint32_t *in, uint32_t salt, uint32_t *out)
{
	std::vector<uint32_t> a(N);
	for (int i = 0; i < N; i++)
		a[i] = gp_mix(in[i] ^ salt) + (uint32_t)i;
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			out[y * W + x] = stencil_at(a.data(), x, y, W, H);
	for (int z = 0; z < VZ; z++)
		for (int y = 0; y < VY; y++)
			for (int x = 0; x < VX; x++) {
				int i = (z * VY + y) * VX + x;
				out[i] = gp_mix(out[i] + (uint32_t)(3 * i)) ^ (uint32_t)(x | y << 8 | z << 16);
			}
}

int main(int argc, char **argv)
{
	long iters = gp_iters(argc, argv, 3);
	const bool blocking = argc > 2 && strcmp(argv[2], "blocking") == 0;
	cudaStream_t st[NSTREAMS];
	cudaEvent_t ev[NSTREAMS];
	uint32_t *h_in[NSTREAMS], *h_out[NSTREAMS], *h_digest;
	uint32_t *d_in[NSTREAMS], *d_a[NSTREAMS], *d_b[NSTREAMS], *d_digest;
	const size_t bytes = N * sizeof(uint32_t);
	for (int s = 0; s < NSTREAMS; s++) {
		if (blocking)
			CHECK(cudaStreamCreate(&st[s]));
		else
			CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
		CHECK(cudaEventCreateWithFlags(&ev[s], cudaEventDisableTiming));
		CHECK(cudaMallocHost(&h_in[s], bytes));
		CHECK(cudaMallocHost(&h_out[s], bytes));
		CHECK(cudaMalloc(&d_in[s], bytes));
		CHECK(cudaMalloc(&d_a[s], bytes));
		CHECK(cudaMalloc(&d_b[s], bytes));
	}
	CHECK(cudaMallocHost(&h_digest, 2 * sizeof(uint32_t)));
	CHECK(cudaMalloc(&d_digest, 2 * sizeof(uint32_t)));

	const dim3 b1(100), g1((N + 99) / 100);
	const dim3 b2(16, 8), g2((W + 15) / 16, (H + 7) / 8);
	const dim3 b3(7, 5, 3), g3((VX + 6) / 7, (VY + 4) / 5, (VZ + 2) / 3);
	const dim3 b4(256), g4((N + 255) / 256);
	std::vector<uint32_t> ref(N);
	uint64_t sum = GP_FNV_INIT;
	uint32_t prev = 0x9e3779b9U;
	long launches[4] = {0, 0, 0, 0};
	for (long it = 0; it < iters; it++) {
		for (int s = 0; s < NSTREAMS; s++) {
			for (int i = 0; i < N; i++)
				h_in[s][i] = gp_mix((uint32_t)(i + s * N) ^ prev);
			uint32_t salt = prev + (uint32_t)s;
			CHECK(cudaMemcpyAsync(d_in[s], h_in[s], bytes, cudaMemcpyHostToDevice, st[s]));
			ms_mix1d<<<g1, b1, 0, st[s]>>>(d_in[s], d_a[s], N, salt);
			stencil2d<<<g2, b2, 0, st[s]>>>(d_a[s], d_b[s], W, H);
			gp::cube3d<3><<<g3, b3, 0, st[s]>>>(d_b[s], VX, VY, VZ);
			launches[0]++, launches[1]++, launches[2]++;
			CHECK(cudaGetLastError());
			CHECK(cudaMemcpyAsync(h_out[s], d_b[s], bytes, cudaMemcpyDeviceToHost, st[s]));
			if (!blocking) {
				CHECK(cudaEventRecord(ev[s], st[s]));
				CHECK(cudaStreamWaitEvent(0, ev[s], 0));
			}
		}
		CHECK(cudaMemsetAsync(d_digest, 0, 2 * sizeof(uint32_t), 0));
		ms_digest<<<g4, b4>>>(d_b[0], d_b[1], d_b[2], N, d_digest);
		launches[3]++;
		CHECK(cudaGetLastError());
		CHECK(cudaMemcpyAsync(h_digest, d_digest, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, 0));
		CHECK(cudaStreamSynchronize(0));

		uint32_t want[2] = {0, 0};
		std::vector<uint32_t> outs[NSTREAMS];
		for (int s = 0; s < NSTREAMS; s++) {
			reference(h_in[s], prev + (uint32_t)s, ref.data());
			if (memcmp(ref.data(), h_out[s], bytes) != 0) {
				for (int i = 0; i < N; i++)
					if (ref[i] != h_out[s][i]) {
						fprintf(stderr, "multistream: iteration %ld stream %d: element %d is %#x, want %#x\n",
							it, s, i, h_out[s][i], ref[i]);
						break;
					}
				return 1;
			}
			outs[s] = ref;
			sum = gp_fnv(sum, h_out[s], N);
		}
		for (int i = 0; i < N; i++) {
			uint32_t v = digest_word(outs[0][i], outs[1][i], outs[2][i]);
			want[0] += v;
			want[1] ^= gp_rotl(v, i & 31);
		}
		if (h_digest[0] != want[0] || h_digest[1] != want[1]) {
			fprintf(stderr, "multistream: iteration %ld: digest %08x %08x, want %08x %08x\n", it,
				h_digest[0], h_digest[1], want[0], want[1]);
			return 1;
		}
		sum = gp_fnv(sum, h_digest, 2);
		prev = h_digest[0] ^ h_digest[1];
	}
	printf("multistream: streams=%d+default n=%d iters=%ld results checked on the CPU\n", NSTREAMS, N, iters);
	printf("launches %s %ld\n", kMix, launches[0]);
	printf("launches %s %ld\n", kStencil, launches[1]);
	printf("launches %s %ld\n", kCube, launches[2]);
	printf("launches %s %ld\n", kDigest, launches[3]);
	printf("checksum %016llx\n", (unsigned long long)sum);
	for (int s = 0; s < NSTREAMS; s++) {
		cudaFreeHost(h_in[s]), cudaFreeHost(h_out[s]);
		cudaFree(d_in[s]), cudaFree(d_a[s]), cudaFree(d_b[s]);
		cudaStreamDestroy(st[s]), cudaEventDestroy(ev[s]);
	}
	cudaFreeHost(h_digest), cudaFree(d_digest);
	return 0;
}
