/* Stand-in for libcuda.so.1 (the CUDA driver) in discover's tests: one
 * function with the driver's launch entry point name. Not NVIDIA code. */
int cuLaunchKernel(void) { return 0; }
