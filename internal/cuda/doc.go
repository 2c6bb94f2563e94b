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
//
// # Why not gorgonia.org/cu
//
// gorgonia.org/cu (v0.9.6, read from its module source) is the usual Go
// binding, and this package replaces it for three reasons:
//
//   - Its cgoflags.go links with -lcuda, so every binary that imports it
//     has libcuda.so.1 as a DT_NEEDED entry: on a machine without the
//     driver the dynamic loader refuses to start the process (exit 127,
//     "error while loading shared libraries: libcuda.so.1") before any Go
//     code runs. Here the only link-time dependency is libdl.
//   - Its package init calls cuInit(0) and, on any error, prints a message
//     and calls os.Exit(1): with the driver installed but no usable GPU
//     (cuInit answers CUDA_ERROR_NO_DEVICE), the importing binary exits
//     before main. Here Init returns an error wrapping ErrNoDevice and the
//     caller decides.
//   - Building it needs cuda.h and libcuda.so (or the toolkit's stub) on
//     the build machine, for the target architecture: the linux/arm64
//     builds of `make cross` and a CPU-only build machine would both need a
//     CUDA installation of their own. Here cuda.h is not needed, and
//     cross-building needs only a C compiler for the target.
//
// Both bindings need cgo, so both are built only with CGO_ENABLED=1; the
// importers that must also build without cgo keep their GPU code behind a
// cgo build constraint (cmd/gpuprobe's gpu.go), which is why `make cross`
// (CGO_ENABLED=0) builds cmd/gpuprobe without this package.
//
// Where gorgonia.org/cu would fit is a component that only ever runs on a
// GPU node and needs a CUDA context, such as the GPU check harness
// cmd/gpuprobe-gpucheck: exiting without a driver costs nothing there. It
// is not used there either: gpucheck maps the shared-memory regions of
// GPU programs into the device with cuMemHostRegister and
// cuMemHostGetDevicePointer, which gorgonia.org/cu v0.9.6 does not wrap
// (its generator lists them among the functions left out), so gpucheck
// would need a cgo binding of its own beside it; it is built on the build
// machine into the GPU bundle, where the link against libcuda would again
// need a CUDA installation; and cmd/gpuprobe's `conformance -gpu`, which
// loads and launches PTX through the same binding, is in the user CLI that
// must start everywhere.
// One binding of 27 entry points, resolved by dlopen, serves both.
package cuda
