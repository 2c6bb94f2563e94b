// common.h - shared by the gpuprobe end-to-end samples (multistream.cu,
// graph.cu, ptxload.cu): an integer mixer used on the GPU and on the CPU
// (integer arithmetic, so the CPU reference is exact and the output does
// not depend on how the PTX is compiled), a 64-bit FNV-1a checksum, and the
// CHECK macros.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifdef __CUDACC__
#define GP_HD __host__ __device__
#else
#define GP_HD
#endif

// gp_mix is a 32-bit integer finaliser (a bijection).
GP_HD inline uint32_t gp_mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

GP_HD inline uint32_t gp_rotl(uint32_t x, int r)
{
	r &= 31;
	return r ? (x << r) | (x >> (32 - r)) : x;
}

// gp_fnv folds n words into a running 64-bit FNV-1a checksum.
inline uint64_t gp_fnv(uint64_t h, const uint32_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 4; b++) {
			h ^= (v[i] >> (8 * b)) & 0xff;
			h *= 0x100000001b3ULL;
		}
	return h;
}
#define GP_FNV_INIT 0xcbf29ce484222325ULL

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

// gp_iters reads the iteration count argument (default def, 1..1000000).
inline long gp_iters(int argc, char **argv, long def)
{
	if (argc < 2)
		return def;
	char *end;
	long n = strtol(argv[1], &end, 10);
	if (*end != '\0' || n < 1 || n > 1000000) {
		fprintf(stderr, "%s: iteration count %s: want an integer in 1..1000000\n", argv[0], argv[1]);
		exit(2);
	}
	return n;
}
