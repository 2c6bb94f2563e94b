/* STAND-IN for tests: exports the same symbols and signatures as NVIDIA's
 * libcudart; does no GPU work. Built by gpuprobe/hostprobe's tests as
 * libcudart.so.13 (linked against the libcuda.so.1 stand-in), or linked
 * into an executable like a static cudart. Like the real runtime, its
 * launch functions launch through the driver: cudaLaunchKernel calls
 * cuLaunchKernel with the CUfunction func | STANDIN_FUNC_BIAS, the _ptsz,
 * Ex and cooperative variants the matching driver call. Every function
 * returns a fixed cudaError_t (some errors on purpose); allocations return
 * STANDIN_ALLOC_BASE + size, except cudaMallocManaged, which fails; stream
 * creations return a fixed STANDIN_STREAM_BASE handle. */
#include "standin_cuda.h"

#include <stdint.h>

volatile int standin_runtime_last;

#define NOTE(id) (standin_runtime_last = (id))
#define FUNC(f) ((CUfunction)((uintptr_t)(f) | STANDIN_FUNC_BIAS))

/* A CUresult as the runtime reports it (the stand-in driver's launches succeed). */
static cudaError_t rt(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : (cudaError_t)(r + 10000); }

cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
	NOTE(1);
	return rt(cuLaunchKernel(FUNC(func), g.x, g.y, g.z, b.x, b.y, b.z, (unsigned int)shmem, s, args, NULL));
}

cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
	NOTE(2);
	return rt(cuLaunchKernel_ptsz(FUNC(func), g.x, g.y, g.z, b.x, b.y, b.z, (unsigned int)shmem, s, args, NULL));
}

static CUlaunchConfig driver_config(const cudaLaunchConfig_t *c)
{
	CUlaunchConfig d = {c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y, c->blockDim.z,
			    (unsigned int)c->dynamicSmemBytes, c->stream, NULL, 0};
	return d;
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	CUlaunchConfig d = driver_config(config);
	NOTE(3);
	return rt(cuLaunchKernelEx(&d, FUNC(func), args, NULL));
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	CUlaunchConfig d = driver_config(config);
	NOTE(4);
	return rt(cuLaunchKernelEx_ptsz(&d, FUNC(func), args, NULL));
}

cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s)
{
	NOTE(9);
	return rt(cuLaunchCooperativeKernel(FUNC(func), g.x, g.y, g.z, b.x, b.y, b.z, (unsigned int)shmem, s, args));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) { NOTE(20); (void)dst, (void)src, (void)n, (void)k; return cudaSuccess; }
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) { NOTE(21); (void)dst, (void)src, (void)n, (void)k; return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) { NOTE(22); (void)dst, (void)src, (void)n, (void)k, (void)s; return cudaSuccess; }
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) { NOTE(23); (void)dst, (void)src, (void)n, (void)k, (void)s; return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t n) { NOTE(40); *p = (void *)(STANDIN_ALLOC_BASE + n); return cudaSuccess; }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { NOTE(42); (void)s; *p = (void *)(STANDIN_ALLOC_BASE + n); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { NOTE(44); *p = (void *)(STANDIN_ALLOC_BASE + n); return cudaSuccess; }
/* Fails, and leaves garbage in *p: the probe must report pointer 0. */
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags) { NOTE(46); (void)n, (void)flags; *p = (void *)0xbadbadULL; return cudaErrorMemoryAllocation; }

cudaError_t cudaFree(void *p) { NOTE(50); (void)p; return cudaSuccess; }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { NOTE(52); (void)p, (void)s; return cudaSuccess; }
cudaError_t cudaFreeHost(void *p) { NOTE(54); (void)p; return cudaSuccess; }

cudaError_t cudaStreamSynchronize(cudaStream_t s) { NOTE(60); (void)s; return cudaErrorNotReady; }
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { NOTE(61); (void)s; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { NOTE(62); return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { NOTE(63); (void)e; return cudaSuccess; }

cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { NOTE(70); (void)g, (void)s; return cudaSuccess; }
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) { NOTE(71); (void)g, (void)s; return cudaSuccess; }

cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) { NOTE(80); (void)s, (void)mode; return cudaSuccess; }
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, int mode) { NOTE(81); (void)s, (void)mode; return cudaSuccess; }
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps, const void *edge,
					  size_t n, int mode)
{
	NOTE(82);
	(void)s, (void)g, (void)deps, (void)edge, (void)n, (void)mode;
	return cudaSuccess;
}
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
					       const void *edge, size_t n, int mode)
{
	NOTE(83);
	(void)s, (void)g, (void)deps, (void)edge, (void)n, (void)mode;
	return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { NOTE(100); (void)e, (void)s; return cudaSuccess; }
cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { NOTE(101); (void)e, (void)s; return cudaSuccess; }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int f) { NOTE(102); (void)e, (void)s, (void)f; return cudaSuccess; }
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int f) { NOTE(103); (void)e, (void)s, (void)f; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) { NOTE(108); (void)s, (void)e, (void)f; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int f) { NOTE(109); (void)s, (void)e, (void)f; return cudaSuccess; }
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { NOTE(84); (void)s, (void)g; return cudaSuccess; }
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) { NOTE(85); (void)s, (void)g; return cudaSuccess; }

cudaError_t cudaStreamCreate(cudaStream_t *p) { NOTE(120); *p = (cudaStream_t)(STANDIN_STREAM_BASE + 0x20); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *p, unsigned int f) { NOTE(121); (void)f; *p = (cudaStream_t)(STANDIN_STREAM_BASE + 0x21); return cudaSuccess; }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *p, unsigned int f, int prio) { NOTE(122); (void)f, (void)prio; *p = (cudaStream_t)(STANDIN_STREAM_BASE + 0x22); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { NOTE(125); (void)s; return cudaSuccess; }
