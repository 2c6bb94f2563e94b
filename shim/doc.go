// Package shim holds the C sources of libgpuprobe.so, gpuprobe's
// in-application shim, and its tests. There is no Go API: the library is
// built by shim/shim.mk (`make bin/libgpuprobe.so`) with gcc, without any
// CUDA header or library, and is loaded into a CUDA application with
// LD_PRELOAD (`gpuprobe run -- APP ARGS...` does that).
//
// # What it does
//
// It interposes dlsym and cuGetProcAddress/cuGetProcAddress_v2, and exports
// the cu* entry points it wraps (for applications linked with -lcuda). A
// pointer the driver hands out for a wrapped entry point is replaced by a
// wrapper bound to that exact pointer, so per-thread-default-stream (_ptsz,
// _ptds) variants and versioned ABIs keep their semantics. Wrapped:
//
//   - loads: cuModuleLoad, cuModuleLoadData, cuModuleLoadDataEx,
//     cuModuleLoadFatBinary, cuLibraryLoadData, cuLibraryLoadFromFile (each
//     image is classified: fatbin wrapper, fatbin, ELF, PTX, file), and
//     cuLinkCreate/AddData/AddFile/Complete (logged only);
//   - names: cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction
//     (handle → kernel name; unknown handles are named once through
//     cuFuncGetName/cuKernelGetName at their first launch);
//   - launches: cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel
//     (all with _ptsz), cuGraphLaunch(_ptsz) (one record per kernel node,
//     learnt at cuGraphInstantiateWithFlags/WithParams/_v2);
//   - capture: cuStreamBeginCapture(_v2), cuStreamBeginCaptureToGraph,
//     cuStreamEndCapture (all with _ptsz): a launch captured into a graph
//     does not run, so it writes no launch record (asked of the driver
//     only while a capture is open; the graph's cuGraphLaunch records it);
//   - cuStreamSynchronize(_ptsz), cuCtxSynchronize, cuMemcpy(Async),
//     cuMemcpyHtoD/DtoH/DtoD(Async)_v2 (sync and memcpy records).
//
// It also exports the application API of include/gpuprobe_shim.h:
// gpuprobe_set_span_context and gpuprobe_clear_span_context, which put a
// thread's launches, copies and syncs under the application's own span
// (src/spanctx.c; TRACEPARENT does the same for every thread that set
// none).
//
// A launch writes a LAUNCH record (record/include/gpuprobe_record.h),
// preceded once per function handle and session by a KERNEL_NAME record,
// into the launch ring the collector handed over at the handshake
// (gpuprobe/agent wire format, shm/include/gpuprobe_shm.h producer). The
// launch path takes two vDSO clock reads, a lock-free table lookup and one
// ring reservation: no syscall, lock or allocation.
//
// # Fail open
//
// The handshake runs at the first CUDA load or launch of the process (and
// again, lazily, in a fork child), bounded by GPUPROBE_TIMEOUT_MS (default
// 200 ms). If the socket is missing, the collector refuses or does not
// answer in time, the server is not trusted (README.md, "Security"), or
// GPUPROBE_DISABLE is set, the shim forwards every call unchanged and
// records nothing. If the collector goes away later, a background thread
// counts what is lost and handshakes again with backoff (100 ms doubling to
// 30 s); sends use MSG_NOSIGNAL.
//
// # Environment
//
//	GPUPROBE_SOCKET      agent socket (default /run/gpuprobe/agent.sock)
//	GPUPROBE_SERVER_UID  a uid besides root whose collector is trusted
//	GPUPROBE_TIMEOUT_MS  handshake bound in ms, 1..60000 (default 200)
//	GPUPROBE_RECONNECT   "0": no reconnect after the collector goes away
//	GPUPROBE_DISABLE     non-empty and not "0": forward only
//	GPUPROBE_TRACE       "1": log to stderr; a path: append to that file
//	GPUPROBE_PATCH_WAIT_MS  nonzero: patch in place at load (default 0:
//	                     compile and swap on the shim's patch thread)
//
// # Not yet
//
// Patched modules' device-alloc memory is not freed at unload, graph
// launches of patched kernels are not rewritten, and file loads are not
// patched (README.md, "Patching"). dlsym(RTLD_NEXT, ...) lookups are passed through
// to glibc untouched (with the caller's return address, so other
// interposers keep working) and are not wrapped.
package shim
