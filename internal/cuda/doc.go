// Package cuda is a minimal binding of the CUDA driver API through cgo. It
// loads libcuda.so.1 with dlopen at run time, so binaries that import it
// build and start on machines without a GPU; there every call returns an
// error wrapping ErrNoDriver ("no NVIDIA driver: libcuda.so.1 not found").
//
// It covers what gpuprobe needs to run generated PTX: devices and their
// attributes, primary contexts, module loading with the JIT error log,
// kernels and module globals, device memory, host memory registration and
// kernel launches. Types are declared locally, so cuda.h is not needed to
// build.
package cuda
