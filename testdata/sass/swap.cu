// CUDA C twin of swap.data: byte swaps and a sign-extended byte.
#include "common.cuh"

GPUPROBE_TEST_KERNEL(swap)

__device__ uint64_t swap_body(const unsigned char *m, uint64_t len)
{
	uint64_t a = __byte_perm(*(const uint32_t *)m, 0, 0x0123);
	uint64_t b = (uint16_t)__byte_perm(*(const uint16_t *)(m + 4), 0, 0x4401);
	uint64_t c = *(const uint64_t *)(m + 8);
	c = ((uint64_t)__byte_perm((uint32_t)c, 0, 0x0123) << 32) | __byte_perm((uint32_t)(c >> 32), 0, 0x0123);
	int64_t d = (int8_t)m[6];
	a |= b << 32;
	c ^= a;
	return c + (uint64_t)d;
}
