// launcher: calls cudaLaunchKernel of the stand-in libcudart.so.13 once.
#include <stddef.h>
typedef struct { unsigned int x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);

int main(void)
{
	dim3 g = {1, 1, 1}, b = {32, 1, 1};
	return cudaLaunchKernel((const void *)main, g, b, NULL, 0, NULL);
}
