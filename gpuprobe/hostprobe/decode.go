package hostprobe

import (
	"encoding/binary"
	"fmt"

	"github.com/gpuprobe/gpuprobe/record"
)

// Layouts of the ring-buffer samples written by bpf/cudahost.bpf.c
// (struct call_event and struct name_event), little-endian:
//
//	call_event (136 bytes)              name_event (312 bytes)
//	 0 u16 kind = 1                      0 u16 kind = 2
//	 2 u16 api (record.HostAPI)          2 u16 api (1000 cuModuleGetFunction, 1001 cuLibraryGetKernel)
//	 4 u16 flags (2 = args faulted)      4 u16 flags
//	 8 u32 pid, 12 u32 tid               8 u32 pid, 12 u32 tid
//	16 u64 enter_ns, 24 u64 exit_ns     16 u64 enter_ns, 24 u64 exit_ns
//	32 u64 ret (rax)                    32 u64 ret
//	40 u64 out (*arg0 at return)        40 u64 function (*arg0 at return)
//	48 u64 regs[6] (rdi rsi rdx rcx     48 u64 module (arg 1)
//	   r8 r9 at entry)                  56 i32 name_len (with the NUL; < 0: unreadable)
//	96 u64 extra[5] (stack words or     64 char name[248]
//	   the launch config at arg 0)
const (
	callEventSize = 136
	nameEventSize = 312

	eventCall = 1
	eventName = 2

	apiModuleGetFunction = 1000
	apiLibraryGetKernel  = 1001

	nameCap = 240 // NAME_CAP: names longer than this are cut and flagged
)

// EventError says what is wrong with a sample read from the kernel's ring
// buffer: the field, its offset in the sample and why.
type EventError struct {
	Field  string
	Offset int
	Reason string
}

// Error reads like "hostprobe: event field api at offset 2: unknown API 99".
func (e *EventError) Error() string {
	return fmt.Sprintf("hostprobe: event field %s at offset %d: %s", e.Field, e.Offset, e.Reason)
}

func le16(b []byte, o int) uint16 { return binary.LittleEndian.Uint16(b[o:]) }
func le32(b []byte, o int) uint32 { return binary.LittleEndian.Uint32(b[o:]) }
func le64(b []byte, o int) uint64 { return binary.LittleEndian.Uint64(b[o:]) }

// decodeEvent appends the record (record.HostCall or record.KernelName)
// that the sample s encodes to dst.
func decodeEvent(dst, s []byte) ([]byte, error) {
	if len(s) < 2 {
		return dst, &EventError{Field: "kind", Offset: 0, Reason: fmt.Sprintf("sample of %d bytes is too short", len(s))}
	}
	switch k := le16(s, 0); k {
	case eventCall:
		if len(s) < callEventSize {
			return dst, &EventError{Field: "kind", Offset: 0, Reason: fmt.Sprintf("call event needs %d bytes, sample has %d", callEventSize, len(s))}
		}
		var h record.HostCall
		if err := decodeCall(&h, s); err != nil {
			return dst, err
		}
		return h.Append(dst), nil
	case eventName:
		if len(s) < nameEventSize {
			return dst, &EventError{Field: "kind", Offset: 0, Reason: fmt.Sprintf("name event needs %d bytes, sample has %d", nameEventSize, len(s))}
		}
		var kn record.KernelName
		if err := decodeName(&kn, s); err != nil {
			return dst, err
		}
		return kn.Append(dst), nil
	default:
		return dst, &EventError{Field: "kind", Offset: 0, Reason: fmt.Sprintf("unknown event kind %d", k)}
	}
}

// cudaMemcpyKinds maps cudaMemcpyKind 0..4 onto record.MemcpyKind
// (cudaMemcpyDefault, 4, is unified addressing: the direction is unknown).
var cudaMemcpyKinds = [...]record.MemcpyKind{
	0: record.MemcpyHostToHost,
	1: record.MemcpyHostToDevice,
	2: record.MemcpyDeviceToHost,
	3: record.MemcpyDeviceToDevice,
	4: record.MemcpyUnknown,
}

func memcpyKind(raw uint64) uint64 {
	if k := uint32(raw); k < uint32(len(cudaMemcpyKinds)) {
		return uint64(cudaMemcpyKinds[k])
	}
	return uint64(record.MemcpyUnknown)
}

func decodeCall(h *record.HostCall, s []byte) error {
	api := record.HostAPI(le16(s, 2))
	if api.Category() == record.HostCatUnknown {
		return &EventError{Field: "api", Offset: 2, Reason: fmt.Sprintf("unknown API %d", api)}
	}
	*h = record.HostCall{
		PID: le32(s, 8), TID: le32(s, 12), EnterNS: le64(s, 16), ExitNS: le64(s, 24),
		API:   api,
		Flags: record.HostCallReturned | le16(s, 4)&record.HostCallArgsFaulted,
		Ret:   int32(uint32(le64(s, 32))), // CUresult/cudaError_t: the low 32 bits of rax
	}
	if h.ExitNS < h.EnterNS {
		return &EventError{Field: "exit_ns", Offset: 24, Reason: fmt.Sprintf("%d is before enter_ns %d", h.ExitNS, h.EnterNS)}
	}
	out := le64(s, 40)
	var r [6]uint64
	var x [5]uint64
	for i := range r {
		r[i] = le64(s, 48+8*i)
	}
	for i := range x {
		x[i] = le64(s, 96+8*i)
	}
	u32 := func(v uint64) uint32 { return uint32(v) } // 32-bit arguments: the upper half is undefined
	a := &h.Args
	switch api {
	case record.HostCudaLaunchKernel, record.HostCudaLaunchKernelPtsz, record.HostCudaLaunchCooperative:
		// (func, dim3 grid = rsi: x|y<<32, rdx: z, dim3 block = rcx, r8, args = r9, shmem, stream on the stack)
		a[0] = r[0]
		h.SetDims([3]uint32{u32(r[1]), u32(r[1] >> 32), u32(r[2])}, [3]uint32{u32(r[3]), u32(r[3] >> 32), u32(r[4])})
		a[4], a[5] = x[0], x[1]
	case record.HostCudaLaunchKernelExC, record.HostCudaLaunchKernelExCPtsz:
		// (cudaLaunchConfig_t *cfg, func, args): cfg = {dim3 grid, dim3 block, size_t shmem @24, stream @32}
		a[0] = r[1]
		a[1], a[2], a[3] = x[0], x[1], x[2]
		a[4], a[5] = x[3], x[4]
	case record.HostCuLaunchKernel, record.HostCuLaunchKernelPtsz, record.HostCuLaunchCooperativeKern:
		// (f, gx, gy, gz, bx, by | bz, shmem, stream, ... on the stack)
		a[0] = r[0]
		h.SetDims([3]uint32{u32(r[1]), u32(r[2]), u32(r[3])}, [3]uint32{u32(r[4]), u32(r[5]), u32(x[0])})
		a[4], a[5] = uint64(u32(x[1])), x[2]
	case record.HostCuLaunchKernelEx, record.HostCuLaunchKernelExPtsz:
		// (CUlaunchConfig *cfg, f, params, extra): cfg = {u32 grid[3], block[3], shmem @24, stream @32}
		a[0] = r[1]
		a[1], a[2], a[3] = x[0], x[1], x[2]
		a[4], a[5] = uint64(u32(x[3])), x[4]
	case record.HostCudaMemcpy, record.HostCudaMemcpyPtds:
		a[0], a[1], a[2], a[3] = r[0], r[1], r[2], memcpyKind(r[3])
	case record.HostCudaMemcpyAsync, record.HostCudaMemcpyAsyncPtsz:
		a[0], a[1], a[2], a[3], a[4] = r[0], r[1], r[2], memcpyKind(r[3]), r[4]
	case record.HostCuMemcpyHtoD, record.HostCuMemcpyDtoH, record.HostCuMemcpyDtoD, record.HostCuMemcpy:
		a[0], a[1], a[2], a[3] = r[0], r[1], r[2], uint64(driverCopyKind(api))
	case record.HostCuMemcpyHtoDAsync, record.HostCuMemcpyDtoHAsync, record.HostCuMemcpyDtoDAsync, record.HostCuMemcpyAsync:
		a[0], a[1], a[2], a[3], a[4] = r[0], r[1], r[2], uint64(driverCopyKind(api)), r[3]
	case record.HostCudaMalloc, record.HostCuMemAlloc, record.HostCudaMallocHost, record.HostCuMemAllocHost,
		record.HostCudaMallocManaged, record.HostCuMemAllocManaged:
		a[0], a[1] = r[1], allocated(h, out)
	case record.HostCudaMallocAsync, record.HostCuMemAllocAsync:
		a[0], a[1], a[4] = r[1], allocated(h, out), r[2]
	case record.HostCudaFree, record.HostCuMemFree, record.HostCudaFreeHost, record.HostCuMemFreeHost:
		a[0] = r[0]
	case record.HostCudaFreeAsync, record.HostCuMemFreeAsync:
		a[0], a[4] = r[0], r[1]
	case record.HostCudaDeviceSynchronize, record.HostCuCtxSynchronize:
		// no arguments
	case record.HostCudaStreamSynchronize, record.HostCudaStreamSynchronizePts, record.HostCudaEventSynchronize,
		record.HostCuStreamSynchronize, record.HostCuStreamSynchronizePtsz, record.HostCuEventSynchronize:
		a[0] = r[0]
	case record.HostCudaGraphLaunch, record.HostCudaGraphLaunchPtsz, record.HostCuGraphLaunch, record.HostCuGraphLaunchPtsz:
		a[0], a[5] = r[0], r[1]
	case record.HostCuStreamBeginCapture, record.HostCuStreamBeginCapturePtsz,
		record.HostCudaStreamEndCapture, record.HostCudaStreamEndCapturePtsz,
		record.HostCuStreamEndCapture, record.HostCuStreamEndCapturePtsz:
		// (stream), (stream, graph out-pointer: not followed)
		a[0] = r[0]
	case record.HostCudaStreamBeginCapture, record.HostCudaStreamBeginCapturePtsz,
		record.HostCuStreamBeginCaptureV2, record.HostCuStreamBeginCaptureV2Ptsz:
		// (stream, mode)
		a[0], a[1] = r[0], uint64(u32(r[1]))
	case record.HostCudaEventRecord, record.HostCudaEventRecordPtsz, record.HostCuEventRecord, record.HostCuEventRecordPtsz:
		// (event, stream)
		a[0], a[1] = r[0], r[1]
	case record.HostCudaEventRecordWithFlags, record.HostCudaEventRecordWithFlagsPtsz,
		record.HostCuEventRecordWithFlags, record.HostCuEventRecordWithFlagsPtsz,
		record.HostCudaStreamWaitEvent, record.HostCudaStreamWaitEventPtsz,
		record.HostCuStreamWaitEvent, record.HostCuStreamWaitEventPtsz:
		// (event, stream, flags), (stream, event, flags)
		a[0], a[1], a[2] = r[0], r[1], uint64(u32(r[2]))
	case record.HostCudaStreamBeginCaptureToGraph, record.HostCudaStreamBeginCaptureToGraphPtsz,
		record.HostCuStreamBeginCaptureToGraph, record.HostCuStreamBeginCaptureToGraphPtsz:
		// (stream, graph, dependencies, edge data, count, mode)
		a[0], a[1] = r[0], r[1]
	case record.HostCudaStreamCreate:
		// (stream out-pointer): no flags, the stream is blocking (0)
		a[0] = allocated(h, out)
	case record.HostCudaStreamCreateWithFlags, record.HostCuStreamCreate:
		// (stream out-pointer, flags)
		a[0], a[1] = allocated(h, out), uint64(u32(r[1]))
	case record.HostCudaStreamCreateWithPriority, record.HostCuStreamCreateWithPriority:
		// (stream out-pointer, flags, int priority): the priority's 32 bits,
		// zero-extended like every 32-bit argument (int32(Args[2]) gives it
		// back; CUDA's priorities are 0 or negative)
		a[0], a[1], a[2] = allocated(h, out), uint64(u32(r[1])), uint64(u32(r[2]))
	case record.HostCudaStreamDestroy, record.HostCuStreamDestroy, record.HostCuStreamDestroyV2:
		// (stream)
		a[0] = r[0]
	default:
		return &EventError{Field: "api", Offset: 2, Reason: fmt.Sprintf("API %s has no argument decoder", api)}
	}
	return nil
}

// allocated is what a call returned through its out-parameter (an
// allocation's pointer, a created stream's handle): 0 when it failed.
func allocated(h *record.HostCall, out uint64) uint64 {
	if h.Ret != 0 {
		return 0
	}
	return out
}

// driverCopyKind is the fixed direction of a driver copy, by name.
func driverCopyKind(api record.HostAPI) record.MemcpyKind {
	switch api {
	case record.HostCuMemcpyHtoD, record.HostCuMemcpyHtoDAsync:
		return record.MemcpyHostToDevice
	case record.HostCuMemcpyDtoH, record.HostCuMemcpyDtoHAsync:
		return record.MemcpyDeviceToHost
	case record.HostCuMemcpyDtoD, record.HostCuMemcpyDtoDAsync:
		return record.MemcpyDeviceToDevice
	}
	return record.MemcpyUnknown // cuMemcpy, cuMemcpyAsync: unified addressing
}

func decodeName(k *record.KernelName, s []byte) error {
	if api := le16(s, 2); api != apiModuleGetFunction && api != apiLibraryGetKernel {
		return &EventError{Field: "api", Offset: 2, Reason: fmt.Sprintf("unknown name function %d", api)}
	}
	if le16(s, 4)&record.HostCallArgsFaulted != 0 {
		return &EventError{Field: "function", Offset: 40, Reason: "the returned handle could not be read"}
	}
	n := int32(le32(s, 56))
	if n <= 1 {
		return &EventError{Field: "name_len", Offset: 56, Reason: fmt.Sprintf("name unreadable or empty (%d)", n)}
	}
	l, cut := int(n-1), false
	if l > nameCap {
		l, cut = nameCap, true
	}
	*k = record.KernelName{
		Function: le64(s, 40), Module: le64(s, 48), PID: le32(s, 8),
		Truncated: cut, Name: string(s[64 : 64+l]),
	}
	return nil
}
