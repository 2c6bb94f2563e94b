/* Stand-in for libcudart.so.13 (the CUDA runtime) in discover's tests: one
 * function with the runtime's launch entry point name. Not NVIDIA code. */
int cudaLaunchKernel(void) { return 0; }
