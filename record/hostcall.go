package record

import "fmt"

// HostCallSize is the size of a HostCall record.
const HostCallSize = 104

// HostCallArgs is the number of argument words a HostCall carries.
const HostCallArgs = 8

// HostAPI names the CUDA runtime or driver entry point a host probe saw.
type HostAPI uint16

// Host API entry points. The numbering is part of the record format: add,
// never renumber.
const (
	HostAPIUnknown HostAPI = 0

	// Launches. args: 0 function (cudart: the host stub address; driver: the
	// CUfunction or CUkernel handle), 1 grid_x | grid_y<<32, 2 grid_z |
	// block_x<<32, 3 block_y | block_z<<32, 4 dynamic shared memory bytes,
	// 5 stream.
	HostCudaLaunchKernel         HostAPI = 1
	HostCudaLaunchKernelPtsz     HostAPI = 2
	HostCudaLaunchKernelExC      HostAPI = 3
	HostCudaLaunchKernelExCPtsz  HostAPI = 4
	HostCuLaunchKernel           HostAPI = 5
	HostCuLaunchKernelPtsz       HostAPI = 6
	HostCuLaunchKernelEx         HostAPI = 7
	HostCuLaunchKernelExPtsz     HostAPI = 8
	HostCudaLaunchCooperative    HostAPI = 9 // cudaLaunchCooperativeKernel (same args as cudaLaunchKernel)
	HostCuLaunchCooperativeKern  HostAPI = 10
	hostLaunchLast                       = HostCuLaunchCooperativeKern
	HostCudaMemcpy               HostAPI = 20 // args: 0 dst, 1 src, 2 bytes, 3 MemcpyKind, 4 stream (async only)
	HostCudaMemcpyPtds           HostAPI = 21
	HostCudaMemcpyAsync          HostAPI = 22
	HostCudaMemcpyAsyncPtsz      HostAPI = 23
	HostCuMemcpyHtoD             HostAPI = 24 // cuMemcpyHtoD_v2
	HostCuMemcpyDtoH             HostAPI = 25 // cuMemcpyDtoH_v2
	HostCuMemcpyDtoD             HostAPI = 26 // cuMemcpyDtoD_v2
	HostCuMemcpyHtoDAsync        HostAPI = 27 // cuMemcpyHtoDAsync_v2
	HostCuMemcpyDtoHAsync        HostAPI = 28 // cuMemcpyDtoHAsync_v2
	HostCuMemcpyDtoDAsync        HostAPI = 29 // cuMemcpyDtoDAsync_v2
	HostCuMemcpy                 HostAPI = 30 // unified addressing: kind from the call is unknown (0)
	HostCuMemcpyAsync            HostAPI = 31
	hostMemcpyLast                       = HostCuMemcpyAsync
	HostCudaMalloc               HostAPI = 40 // args: 0 bytes, 1 the returned device pointer (0 on failure)
	HostCuMemAlloc               HostAPI = 41 // cuMemAlloc_v2
	HostCudaMallocAsync          HostAPI = 42 // args: 0 bytes, 1 pointer, 4 stream
	HostCuMemAllocAsync          HostAPI = 43
	HostCudaMallocHost           HostAPI = 44
	HostCuMemAllocHost           HostAPI = 45 // cuMemAllocHost_v2
	HostCudaMallocManaged        HostAPI = 46
	HostCuMemAllocManaged        HostAPI = 47
	hostAllocLast                        = HostCuMemAllocManaged
	HostCudaFree                 HostAPI = 50 // args: 0 pointer, 4 stream (async only)
	HostCuMemFree                HostAPI = 51 // cuMemFree_v2
	HostCudaFreeAsync            HostAPI = 52
	HostCuMemFreeAsync           HostAPI = 53
	HostCudaFreeHost             HostAPI = 54
	HostCuMemFreeHost            HostAPI = 55
	hostFreeLast                         = HostCuMemFreeHost
	HostCudaStreamSynchronize    HostAPI = 60 // args: 0 stream (or event, or 0 for device/context)
	HostCudaStreamSynchronizePts HostAPI = 61 // cudaStreamSynchronize_ptsz
	HostCudaDeviceSynchronize    HostAPI = 62
	HostCudaEventSynchronize     HostAPI = 63
	HostCuStreamSynchronize      HostAPI = 64
	HostCuStreamSynchronizePtsz  HostAPI = 65
	HostCuCtxSynchronize         HostAPI = 66
	HostCuEventSynchronize       HostAPI = 67
	hostSyncLast                         = HostCuEventSynchronize
	HostCudaGraphLaunch          HostAPI = 70 // args: 0 graph exec, 5 stream
	HostCudaGraphLaunchPtsz      HostAPI = 71
	HostCuGraphLaunch            HostAPI = 72
	HostCuGraphLaunchPtsz        HostAPI = 73
	hostGraphLast                        = HostCuGraphLaunchPtsz

	// Stream capture: a launch into a capturing stream does not run, it
	// becomes a node of the graph being captured (args: 0 stream).
	HostCudaStreamBeginCapture            HostAPI = 80 // args: 0 stream, 1 cudaStreamCaptureMode
	HostCudaStreamBeginCapturePtsz        HostAPI = 81
	HostCudaStreamBeginCaptureToGraph     HostAPI = 82 // args: 0 stream, 1 graph
	HostCudaStreamBeginCaptureToGraphPtsz HostAPI = 83
	HostCudaStreamEndCapture              HostAPI = 84 // args: 0 stream
	HostCudaStreamEndCapturePtsz          HostAPI = 85
	HostCuStreamBeginCapture              HostAPI = 86 // cuStreamBeginCapture (CUDA 10.0, no mode)
	HostCuStreamBeginCapturePtsz          HostAPI = 87
	HostCuStreamBeginCaptureV2            HostAPI = 88 // cuStreamBeginCapture_v2; args: 0 stream, 1 CUstreamCaptureMode
	HostCuStreamBeginCaptureV2Ptsz        HostAPI = 89
	HostCuStreamBeginCaptureToGraph       HostAPI = 90 // args: 0 stream, 1 graph
	HostCuStreamBeginCaptureToGraphPtsz   HostAPI = 91
	HostCuStreamEndCapture                HostAPI = 92
	HostCuStreamEndCapturePtsz            HostAPI = 93
	hostCaptureLast                               = HostCuStreamEndCapturePtsz

	// Events: where an event was recorded, for event syncs and for streams
	// that join a capture by waiting on an event recorded in it.
	HostCudaEventRecord              HostAPI = 100 // args: 0 event, 1 stream
	HostCudaEventRecordPtsz          HostAPI = 101
	HostCudaEventRecordWithFlags     HostAPI = 102 // args: 0 event, 1 stream, 2 flags
	HostCudaEventRecordWithFlagsPtsz HostAPI = 103
	HostCuEventRecord                HostAPI = 104
	HostCuEventRecordPtsz            HostAPI = 105
	HostCuEventRecordWithFlags       HostAPI = 106
	HostCuEventRecordWithFlagsPtsz   HostAPI = 107
	HostCudaStreamWaitEvent          HostAPI = 108 // args: 0 stream, 1 event, 2 flags
	HostCudaStreamWaitEventPtsz      HostAPI = 109
	HostCuStreamWaitEvent            HostAPI = 110
	HostCuStreamWaitEventPtsz        HostAPI = 111
	hostEventLast                            = HostCuStreamWaitEventPtsz

	// Streams: which are blocking (they synchronise implicitly with the
	// legacy default stream) and when a handle is let go. Create: args 0 the
	// created stream (0 when the call failed), 1 flags (cudaStreamCreate: 0,
	// blocking), 2 priority (WithPriority only: the int32, zero-extended;
	// int32(Args[2]) reads it back). Destroy: args 0 stream.
	HostCudaStreamCreate             HostAPI = 120
	HostCudaStreamCreateWithFlags    HostAPI = 121
	HostCudaStreamCreateWithPriority HostAPI = 122
	HostCuStreamCreate               HostAPI = 123
	HostCuStreamCreateWithPriority   HostAPI = 124
	HostCudaStreamDestroy            HostAPI = 125
	HostCuStreamDestroy              HostAPI = 126 // cuStreamDestroy (before CUDA 4.0's _v2)
	HostCuStreamDestroyV2            HostAPI = 127
	hostStreamLast                           = HostCuStreamDestroyV2
)

// HostCategory groups host APIs by what they do.
type HostCategory uint8

// Host API categories.
const (
	HostCatUnknown HostCategory = iota
	HostCatLaunch
	HostCatMemcpy
	HostCatAlloc
	HostCatFree
	HostCatSync
	HostCatGraphLaunch
	HostCatCapture
	HostCatEvent
	HostCatStream
)

// String gives the category as used in attribute values.
func (c HostCategory) String() string {
	return [...]string{"unknown", "launch", "memcpy", "alloc", "free", "sync", "graph_launch", "capture", "event", "stream"}[min(int(c), 9)]
}

// Category is the group of the API.
func (a HostAPI) Category() HostCategory {
	switch {
	case a == HostAPIUnknown:
		return HostCatUnknown
	case a <= hostLaunchLast:
		return HostCatLaunch
	case a >= HostCudaMemcpy && a <= hostMemcpyLast:
		return HostCatMemcpy
	case a >= HostCudaMalloc && a <= hostAllocLast:
		return HostCatAlloc
	case a >= HostCudaFree && a <= hostFreeLast:
		return HostCatFree
	case a >= HostCudaStreamSynchronize && a <= hostSyncLast:
		return HostCatSync
	case a >= HostCudaGraphLaunch && a <= hostGraphLast:
		return HostCatGraphLaunch
	case a >= HostCudaStreamBeginCapture && a <= hostCaptureLast:
		return HostCatCapture
	case a >= HostCudaEventRecord && a <= hostEventLast:
		return HostCatEvent
	case a >= HostCudaStreamCreate && a <= hostStreamLast:
		return HostCatStream
	}
	return HostCatUnknown
}

// Async reports whether the call only enqueues work (its times are those of
// the call, not of the work).
func (a HostAPI) Async() bool {
	switch a {
	case HostCudaMemcpyAsync, HostCudaMemcpyAsyncPtsz, HostCuMemcpyHtoDAsync, HostCuMemcpyDtoHAsync,
		HostCuMemcpyDtoDAsync, HostCuMemcpyAsync, HostCudaMallocAsync, HostCuMemAllocAsync,
		HostCudaFreeAsync, HostCuMemFreeAsync:
		return true
	}
	return a.Category() == HostCatLaunch || a.Category() == HostCatGraphLaunch
}

// Driver reports whether the API belongs to the driver (libcuda, cu*)
// rather than the runtime (libcudart, cuda*).
func (a HostAPI) Driver() bool {
	n := a.String()
	return len(n) > 2 && n[:2] == "cu" && n[2] != 'd'
}

// String is the exported symbol name of the entry point.
func (a HostAPI) String() string {
	if n, ok := hostAPINames[a]; ok {
		return n
	}
	return fmt.Sprintf("host_api(%d)", uint16(a))
}

// HostAPIs returns every known API, in numeric order.
func HostAPIs() []HostAPI {
	out := make([]HostAPI, 0, len(hostAPINames))
	for a := HostAPI(1); a <= hostStreamLast; a++ {
		if _, ok := hostAPINames[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

var hostAPINames = map[HostAPI]string{
	HostCudaLaunchKernel:         "cudaLaunchKernel",
	HostCudaLaunchKernelPtsz:     "cudaLaunchKernel_ptsz",
	HostCudaLaunchKernelExC:      "cudaLaunchKernelExC",
	HostCudaLaunchKernelExCPtsz:  "cudaLaunchKernelExC_ptsz",
	HostCuLaunchKernel:           "cuLaunchKernel",
	HostCuLaunchKernelPtsz:       "cuLaunchKernel_ptsz",
	HostCuLaunchKernelEx:         "cuLaunchKernelEx",
	HostCuLaunchKernelExPtsz:     "cuLaunchKernelEx_ptsz",
	HostCudaLaunchCooperative:    "cudaLaunchCooperativeKernel",
	HostCuLaunchCooperativeKern:  "cuLaunchCooperativeKernel",
	HostCudaMemcpy:               "cudaMemcpy",
	HostCudaMemcpyPtds:           "cudaMemcpy_ptds",
	HostCudaMemcpyAsync:          "cudaMemcpyAsync",
	HostCudaMemcpyAsyncPtsz:      "cudaMemcpyAsync_ptsz",
	HostCuMemcpyHtoD:             "cuMemcpyHtoD_v2",
	HostCuMemcpyDtoH:             "cuMemcpyDtoH_v2",
	HostCuMemcpyDtoD:             "cuMemcpyDtoD_v2",
	HostCuMemcpyHtoDAsync:        "cuMemcpyHtoDAsync_v2",
	HostCuMemcpyDtoHAsync:        "cuMemcpyDtoHAsync_v2",
	HostCuMemcpyDtoDAsync:        "cuMemcpyDtoDAsync_v2",
	HostCuMemcpy:                 "cuMemcpy",
	HostCuMemcpyAsync:            "cuMemcpyAsync",
	HostCudaMalloc:               "cudaMalloc",
	HostCuMemAlloc:               "cuMemAlloc_v2",
	HostCudaMallocAsync:          "cudaMallocAsync",
	HostCuMemAllocAsync:          "cuMemAllocAsync",
	HostCudaMallocHost:           "cudaMallocHost",
	HostCuMemAllocHost:           "cuMemAllocHost_v2",
	HostCudaMallocManaged:        "cudaMallocManaged",
	HostCuMemAllocManaged:        "cuMemAllocManaged",
	HostCudaFree:                 "cudaFree",
	HostCuMemFree:                "cuMemFree_v2",
	HostCudaFreeAsync:            "cudaFreeAsync",
	HostCuMemFreeAsync:           "cuMemFreeAsync",
	HostCudaFreeHost:             "cudaFreeHost",
	HostCuMemFreeHost:            "cuMemFreeHost",
	HostCudaStreamSynchronize:    "cudaStreamSynchronize",
	HostCudaStreamSynchronizePts: "cudaStreamSynchronize_ptsz",
	HostCudaDeviceSynchronize:    "cudaDeviceSynchronize",
	HostCudaEventSynchronize:     "cudaEventSynchronize",
	HostCuStreamSynchronize:      "cuStreamSynchronize",
	HostCuStreamSynchronizePtsz:  "cuStreamSynchronize_ptsz",
	HostCuCtxSynchronize:         "cuCtxSynchronize",
	HostCuEventSynchronize:       "cuEventSynchronize",
	HostCudaGraphLaunch:          "cudaGraphLaunch",
	HostCudaGraphLaunchPtsz:      "cudaGraphLaunch_ptsz",
	HostCuGraphLaunch:            "cuGraphLaunch",
	HostCuGraphLaunchPtsz:        "cuGraphLaunch_ptsz",

	HostCudaStreamBeginCapture:            "cudaStreamBeginCapture",
	HostCudaStreamBeginCapturePtsz:        "cudaStreamBeginCapture_ptsz",
	HostCudaStreamBeginCaptureToGraph:     "cudaStreamBeginCaptureToGraph",
	HostCudaStreamBeginCaptureToGraphPtsz: "cudaStreamBeginCaptureToGraph_ptsz",
	HostCudaStreamEndCapture:              "cudaStreamEndCapture",
	HostCudaStreamEndCapturePtsz:          "cudaStreamEndCapture_ptsz",
	HostCuStreamBeginCapture:              "cuStreamBeginCapture",
	HostCuStreamBeginCapturePtsz:          "cuStreamBeginCapture_ptsz",
	HostCuStreamBeginCaptureV2:            "cuStreamBeginCapture_v2",
	HostCuStreamBeginCaptureV2Ptsz:        "cuStreamBeginCapture_v2_ptsz",
	HostCuStreamBeginCaptureToGraph:       "cuStreamBeginCaptureToGraph",
	HostCuStreamBeginCaptureToGraphPtsz:   "cuStreamBeginCaptureToGraph_ptsz",
	HostCuStreamEndCapture:                "cuStreamEndCapture",
	HostCuStreamEndCapturePtsz:            "cuStreamEndCapture_ptsz",

	HostCudaEventRecord:              "cudaEventRecord",
	HostCudaEventRecordPtsz:          "cudaEventRecord_ptsz",
	HostCudaEventRecordWithFlags:     "cudaEventRecordWithFlags",
	HostCudaEventRecordWithFlagsPtsz: "cudaEventRecordWithFlags_ptsz",
	HostCuEventRecord:                "cuEventRecord",
	HostCuEventRecordPtsz:            "cuEventRecord_ptsz",
	HostCuEventRecordWithFlags:       "cuEventRecordWithFlags",
	HostCuEventRecordWithFlagsPtsz:   "cuEventRecordWithFlags_ptsz",
	HostCudaStreamWaitEvent:          "cudaStreamWaitEvent",
	HostCudaStreamWaitEventPtsz:      "cudaStreamWaitEvent_ptsz",
	HostCuStreamWaitEvent:            "cuStreamWaitEvent",
	HostCuStreamWaitEventPtsz:        "cuStreamWaitEvent_ptsz",

	HostCudaStreamCreate:             "cudaStreamCreate",
	HostCudaStreamCreateWithFlags:    "cudaStreamCreateWithFlags",
	HostCudaStreamCreateWithPriority: "cudaStreamCreateWithPriority",
	HostCuStreamCreate:               "cuStreamCreate",
	HostCuStreamCreateWithPriority:   "cuStreamCreateWithPriority",
	HostCudaStreamDestroy:            "cudaStreamDestroy",
	HostCuStreamDestroy:              "cuStreamDestroy",
	HostCuStreamDestroyV2:            "cuStreamDestroy_v2",
}

// CreatesStream reports whether a creates a stream (the Destroy APIs of
// HostCatStream let one go).
func (a HostAPI) CreatesStream() bool {
	return a >= HostCudaStreamCreate && a <= HostCuStreamCreateWithPriority
}

// WaitsEvent reports whether a makes a stream wait for an event (the other
// event APIs record one).
func (a HostAPI) WaitsEvent() bool {
	return a >= HostCudaStreamWaitEvent && a <= HostCuStreamWaitEventPtsz
}

// CaptureBegins reports whether a is one of the entry points that begin a
// stream capture (CaptureEnds: that end one).
func (a HostAPI) CaptureBegins() bool {
	return a.Category() == HostCatCapture && !a.CaptureEnds()
}

// CaptureEnds reports whether a ends a stream capture.
func (a HostAPI) CaptureEnds() bool {
	switch a {
	case HostCudaStreamEndCapture, HostCudaStreamEndCapturePtsz, HostCuStreamEndCapture, HostCuStreamEndCapturePtsz:
		return true
	}
	return false
}

// HostCallReturned is the HostCall flag of a call whose return was seen
// (a uretprobe fired); without it exit_ns and ret are not meaningful.
const HostCallReturned = 1

// HostCallArgsFaulted is the HostCall flag of a call some of whose
// arguments could not be read from the application's memory (they are 0).
const HostCallArgsFaulted = 2

// HostCall is one CUDA runtime or driver call seen by a host probe (a
// uprobe/uretprobe pair in the kernel), type 10, 104 bytes:
//
//	offset  0  prefix {u16 type = 10, u16 version = 1, u32 size = 104}
//	offset  8  u32 pid       process id (tgid)
//	offset 12  u32 tid       thread id of the caller
//	offset 16  u64 enter_ns  CLOCK_MONOTONIC (bpf_ktime_get_ns) at entry
//	offset 24  u64 exit_ns   CLOCK_MONOTONIC at return (flag 1), else = enter_ns
//	offset 32  u16 api       HostAPI
//	offset 34  u16 flags     bit 0: returned; bit 1: some arguments unreadable
//	offset 36  i32 ret       the return value (CUresult or cudaError_t)
//	offset 40  u64 args[8]   per API, see the HostAPI constants
type HostCall struct {
	PID     uint32
	TID     uint32
	EnterNS uint64
	ExitNS  uint64
	API     HostAPI
	Flags   uint16
	Ret     int32
	Args    [HostCallArgs]uint64
}

// Decode fills h from the record in b.
func (h *HostCall) Decode(b []byte) error {
	if err := check(b, TypeHostCall, HostCallSize); err != nil {
		return err
	}
	*h = HostCall{PID: le32(b, 8), TID: le32(b, 12), EnterNS: le64(b, 16), ExitNS: le64(b, 24),
		API: HostAPI(le16(b, 32)), Flags: le16(b, 34), Ret: int32(le32(b, 36))}
	for i := range h.Args {
		h.Args[i] = le64(b, 40+8*i)
	}
	if h.API.Category() == HostCatUnknown {
		return &DecodeError{Type: TypeHostCall, Field: "api", Offset: 32, Reason: fmt.Sprintf("unknown API %d", h.API)}
	}
	return notBefore(TypeHostCall, "exit_ns", 24, h.ExitNS, "enter_ns", h.EnterNS)
}

// Append appends the encoded record to b.
func (h *HostCall) Append(b []byte) []byte {
	b, r := grow(b, HostCallSize)
	putPrefix(r, TypeHostCall, HostCallSize)
	put32(r, 8, h.PID)
	put32(r, 12, h.TID)
	put64(r, 16, h.EnterNS)
	put64(r, 24, h.ExitNS)
	put16(r, 32, uint16(h.API))
	put16(r, 34, h.Flags)
	put32(r, 36, uint32(h.Ret))
	for i, a := range h.Args {
		put64(r, 40+8*i, a)
	}
	return b
}

// Grid returns the grid dimensions of a launch call (args 1 and 2).
func (h *HostCall) Grid() [3]uint32 {
	return [3]uint32{uint32(h.Args[1]), uint32(h.Args[1] >> 32), uint32(h.Args[2])}
}

// Block returns the block dimensions of a launch call (args 2 and 3).
func (h *HostCall) Block() [3]uint32 {
	return [3]uint32{uint32(h.Args[2] >> 32), uint32(h.Args[3]), uint32(h.Args[3] >> 32)}
}

// SetDims packs grid and block dimensions into args 1..3.
func (h *HostCall) SetDims(grid, block [3]uint32) {
	h.Args[1] = uint64(grid[0]) | uint64(grid[1])<<32
	h.Args[2] = uint64(grid[2]) | uint64(block[0])<<32
	h.Args[3] = uint64(block[1]) | uint64(block[2])<<32
}
