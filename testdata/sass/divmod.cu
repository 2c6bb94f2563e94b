// CUDA C twin of divmod.data: RFC 9669 division and modulo (x/0 = 0,
// x%0 = x, INT_MIN/-1 wraps), 64- and 32-bit.
#include "common.cuh"

GPUPROBE_TEST_KERNEL(divmod)

__device__ static uint64_t udiv(uint64_t a, uint64_t b) { return b ? a / b : 0; }
__device__ static uint64_t umod(uint64_t a, uint64_t b) { return b ? a % b : a; }
__device__ static int64_t sdiv(int64_t a, int64_t b) { return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b; }
__device__ static int64_t smod(int64_t a, int64_t b) { return b == 0 ? a : b == -1 ? 0 : a % b; }

__device__ uint64_t divmod_body(const unsigned char *m, uint64_t len)
{
	const uint64_t *w = (const uint64_t *)m;
	uint64_t a = w[0], b = w[1], c = w[2];
	uint64_t r = udiv(a, b);
	r += umod(a, c);
	r ^= (uint64_t)sdiv((int64_t)a, (int64_t)b);
	r -= (uint64_t)smod((int64_t)a, (int64_t)c);
	uint32_t a32 = (uint32_t)a, b32 = (uint32_t)b, c32 = (uint32_t)c;
	r += b32 ? a32 / b32 : 0;
	r ^= c32 ? a32 % c32 : a32;
	return r;
}
