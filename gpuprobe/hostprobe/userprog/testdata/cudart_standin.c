// A STAND-IN for libcudart (not NVIDIA's library): it exports
// cudaLaunchKernel with cudart's signature and does nothing, so that a
// uprobe on libcudart.so:cudaLaunchKernel can be tested without CUDA.
// The tests build it as libcudart.so.13 in a temporary directory.
#include <stddef.h>

typedef struct { unsigned int x, y, z; } dim3;
typedef int cudaError_t;
typedef void *cudaStream_t;

__attribute__((noinline)) cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
	__asm__ volatile("");
	(void)func; (void)grid; (void)block; (void)args; (void)shmem; (void)stream;
	return 0;
}
