// CUDA C twin of hash.data: FNV-1a-style mixing of four u64 words.
#include "common.cuh"

GPUPROBE_TEST_KERNEL(hash)

__device__ uint64_t hash_body(const unsigned char *m, uint64_t len)
{
	const uint64_t *w = (const uint64_t *)m;
	const uint64_t p = 0x100000001b3ull;
	uint64_t h = 0xcbf29ce484222325ull;
	h = (h ^ w[0]) * p;
	h = (h ^ w[1]) * p;
	h = (h ^ w[2]) * p;
	h = (h ^ w[3]) * p;
	return h ^ (h >> 29);
}
