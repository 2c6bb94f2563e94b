package hostprobe

import "github.com/gpuprobe/gpuprobe/record"

// shimCovered are the entry points whose calls the shim records itself in
// a process where it runs (shim/src/gp.h's GP_APIS wraps the driver's and
// writes a launch, sync or memcpy record for each call): the driver's
// launches, graph launches, stream and context syncs and the copies the
// shim wraps, and the runtime calls that make one of those driver calls
// (cudaLaunchKernel calls cuLaunchKernel, cudaDeviceSynchronize
// cuCtxSynchronize). A uprobe on them in such a process only repeats
// what the shim wrote, at the cost of two traps per call.
//
// Not here, so probed in every process: what the shim does not record
// (allocations, frees, event records, waits and syncs, stream creation,
// captures: wrapped for its own bookkeeping, not recorded), the driver
// copy it does not wrap (cuMemcpyDtoDAsync_v2), and the runtime copies
// (cudaMemcpyAsync of device memory reaches cuMemcpyDtoDAsync_v2).
// TestShimCoveredMatchesShim checks the driver half against GP_APIS.
var shimCovered = map[record.HostAPI]bool{
	record.HostCudaLaunchKernel:        true,
	record.HostCudaLaunchKernelPtsz:    true,
	record.HostCudaLaunchKernelExC:     true,
	record.HostCudaLaunchKernelExCPtsz: true,
	record.HostCudaLaunchCooperative:   true,
	record.HostCuLaunchKernel:          true,
	record.HostCuLaunchKernelPtsz:      true,
	record.HostCuLaunchKernelEx:        true,
	record.HostCuLaunchKernelExPtsz:    true,
	record.HostCuLaunchCooperativeKern: true,

	record.HostCudaGraphLaunch:     true,
	record.HostCudaGraphLaunchPtsz: true,
	record.HostCuGraphLaunch:       true,
	record.HostCuGraphLaunchPtsz:   true,

	record.HostCudaStreamSynchronize:    true,
	record.HostCudaStreamSynchronizePts: true,
	record.HostCudaDeviceSynchronize:    true,
	record.HostCuStreamSynchronize:      true,
	record.HostCuStreamSynchronizePtsz:  true,
	record.HostCuCtxSynchronize:         true,

	record.HostCuMemcpy:          true,
	record.HostCuMemcpyAsync:     true,
	record.HostCuMemcpyHtoD:      true,
	record.HostCuMemcpyDtoH:      true,
	record.HostCuMemcpyDtoD:      true,
	record.HostCuMemcpyHtoDAsync: true,
	record.HostCuMemcpyDtoHAsync: true,
}

// ShimCovered reports whether the shim records the calls of sym itself
// (or of the driver call sym makes): with Options.ShimCoveredPerProcess
// such symbols are probed only in the processes given to AttachProcess.
func ShimCovered(sym string) bool { return shimCovered[apiOf(sym)] }
