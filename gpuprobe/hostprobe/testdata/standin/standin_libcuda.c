/* STAND-IN for tests: exports the same symbols and signatures as NVIDIA's
 * libcuda; does no GPU work. Built by gpuprobe/hostprobe's tests as
 * libcuda.so.1. Every function notes that it ran (so that no two bodies are
 * identical and the compiler cannot fold one into another) and returns a
 * fixed CUresult, some of them errors on purpose; allocations return
 * STANDIN_ALLOC_BASE + size, stream creations a fixed STANDIN_STREAM_BASE
 * handle. Build with -DSTANDIN_OMIT_SOME to leave cuLaunchKernelEx and
 * cuMemcpyAsync out (a library really lacking them). */
#include "standin_cuda.h"

#include <string.h>

volatile int standin_driver_last;

#define NOTE(id) (standin_driver_last = (id))

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
{
	NOTE(5);
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
{
	NOTE(6);
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	return CUDA_SUCCESS;
}

#ifndef STANDIN_OMIT_SOME
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	NOTE(7);
	(void)config, (void)f, (void)params, (void)extra;
	return CUDA_SUCCESS;
}
#endif

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	NOTE(8);
	(void)config, (void)f, (void)params, (void)extra;
	return CUDA_SUCCESS;
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				   unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)
{
	NOTE(10);
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params;
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { NOTE(24); (void)dst, (void)src, (void)n; return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { NOTE(25); (void)dst, (void)src, (void)n; return CUDA_ERROR_ILLEGAL_ADDRESS; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { NOTE(26); (void)dst, (void)src, (void)n; return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { NOTE(27); (void)dst, (void)src, (void)n, (void)s; return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { NOTE(28); (void)dst, (void)src, (void)n, (void)s; return CUDA_SUCCESS; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { NOTE(29); (void)dst, (void)src, (void)n, (void)s; return CUDA_SUCCESS; }
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { NOTE(30); (void)dst, (void)src, (void)n; return CUDA_SUCCESS; }
#ifndef STANDIN_OMIT_SOME
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { NOTE(31); (void)dst, (void)src, (void)n, (void)s; return CUDA_SUCCESS; }
#endif

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { NOTE(41); *p = STANDIN_ALLOC_BASE + n; return CUDA_SUCCESS; }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { NOTE(43); (void)s; *p = STANDIN_ALLOC_BASE + n; return CUDA_SUCCESS; }
CUresult cuMemAllocHost_v2(void **p, size_t n) { NOTE(45); *p = (void *)(STANDIN_ALLOC_BASE + n); return CUDA_SUCCESS; }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) { NOTE(47); (void)flags; *p = STANDIN_ALLOC_BASE + n; return CUDA_SUCCESS; }

CUresult cuMemFree_v2(CUdeviceptr p) { NOTE(51); (void)p; return CUDA_SUCCESS; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { NOTE(53); (void)p, (void)s; return CUDA_SUCCESS; }
CUresult cuMemFreeHost(void *p) { NOTE(55); (void)p; return CUDA_SUCCESS; }

CUresult cuStreamSynchronize(CUstream s) { NOTE(64); (void)s; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize_ptsz(CUstream s) { NOTE(65); (void)s; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { NOTE(66); return CUDA_SUCCESS; }
/* An out-of-range value with bit 31 set: the decoder must sign-extend it. */
CUresult cuEventSynchronize(CUevent e) { NOTE(67); (void)e; return (CUresult)0xfffffffeu; }

CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { NOTE(72); (void)g, (void)s; return CUDA_SUCCESS; }
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { NOTE(73); (void)g, (void)s; return CUDA_SUCCESS; }

CUresult cuStreamBeginCapture(CUstream s) { NOTE(86); (void)s; return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_ptsz(CUstream s) { NOTE(87); (void)s; return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { NOTE(88); (void)s, (void)mode; return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { NOTE(89); (void)s, (void)mode; return CUDA_SUCCESS; }
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const void *edge, size_t n, int mode)
{
	NOTE(90);
	(void)s, (void)g, (void)deps, (void)edge, (void)n, (void)mode;
	return CUDA_SUCCESS;
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const void *edge, size_t n,
					  int mode)
{
	NOTE(91);
	(void)s, (void)g, (void)deps, (void)edge, (void)n, (void)mode;
	return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { NOTE(92); (void)s, (void)g; return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { NOTE(104); (void)e, (void)s; return CUDA_SUCCESS; }
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { NOTE(105); (void)e, (void)s; return CUDA_SUCCESS; }
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int f) { NOTE(106); (void)e, (void)s, (void)f; return CUDA_SUCCESS; }
CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f) { NOTE(107); (void)e, (void)s, (void)f; return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { NOTE(110); (void)s, (void)e, (void)f; return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) { NOTE(111); (void)s, (void)e, (void)f; return CUDA_SUCCESS; }
CUresult cuStreamCreate(CUstream *p, unsigned int f) { NOTE(123); (void)f; *p = (CUstream)(STANDIN_STREAM_BASE + 0x23); return CUDA_SUCCESS; }
CUresult cuStreamCreateWithPriority(CUstream *p, unsigned int f, int prio) { NOTE(124); (void)f, (void)prio; *p = (CUstream)(STANDIN_STREAM_BASE + 0x24); return CUDA_SUCCESS; }
CUresult cuStreamDestroy(CUstream s) { NOTE(126); (void)s; return CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream s) { NOTE(127); (void)s; return CUDA_SUCCESS; }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { NOTE(93); (void)s, (void)g; return (CUresult)900; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */ }

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	NOTE(1000);
	if (strcmp(name, "missing") == 0)
		return CUDA_ERROR_NOT_FOUND;
	*hfunc = (CUfunction)STANDIN_HANDLE(hmod, 0x01);
	return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	NOTE(1001);
	if (strcmp(name, "missing") == 0)
		return CUDA_ERROR_NOT_FOUND;
	*pKernel = (CUkernel)STANDIN_HANDLE(library, 0x02);
	return CUDA_SUCCESS;
}
