// The test-kernel frame that ptx.TestKernel generates around a program:
// thread t of a 1-D launch gets its own copy of the memory at
// mem + t*align8(len) and stores its result at result[t].
#include <stdint.h>

#define GPUPROBE_TEST_KERNEL(name)                                                     \
	__device__ uint64_t name##_body(const unsigned char *m, uint64_t len);             \
	extern "C" __global__ void name##_test(unsigned char *mem, uint64_t len,           \
					       uint64_t *result)                           \
	{                                                                              \
		uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;              \
		unsigned char *m = len ? mem + t * ((len + 7) & ~7ull) : 0;                \
		result[t] = name##_body(m, len);                                           \
	}
