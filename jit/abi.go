// Package jit verifies eBPF programs and compiles them to PTX that can be
// spliced into CUDA kernels. A reference interpreter (package interp) gives
// the same semantics on machines without a GPU.
//
// The helper ABI and the map type numbers follow bpftime's GPU support, so
// that its GPU programs compile unmodified. Our own helpers start at id 600
// and our own map types at 1600. include/gpuprobe.h declares the same
// table for C programs (abi_header_test.go checks the two agree).
package jit

import (
	"fmt"
	"sort"

	"github.com/gpuprobe/gpuprobe/shm"
)

// HelperID is the immediate of a BPF_CALL instruction that calls a helper.
type HelperID int32

// Helpers of the GPU ABI (bpftime-compatible; docs/gpu-programs.md).
const (
	HelperMapLookupElem     HelperID = 1   // void *(map, key)
	HelperMapUpdateElem     HelperID = 2   // long (map, key, value, flags)
	HelperMapDeleteElem     HelperID = 3   // long (map, key)
	HelperKtimeGetNs        HelperID = 5   // u64 (): CLOCK_MONOTONIC ns (%globaltimer + the collector's offset)
	HelperTracePrintk       HelperID = 6   // long (fmt, fmt_size, ...): host call
	HelperGetCurrentPidTgid HelperID = 14  // u64 (): the application's tgid<<32 | pid
	HelperPerfEventOutput   HelperID = 25  // long (ctx, map, flags, data, size): GPU ring buffer
	HelperPuts              HelperID = 501 // long (str): host call
	HelperGetGlobalTimer    HelperID = 502 // u64 (): %globaltimer, ns
	HelperGetBlockIdx       HelperID = 503 // long (u64 *x, u64 *y, u64 *z): %ctaid
	HelperGetBlockDim       HelperID = 504 // long (u64 *x, u64 *y, u64 *z): %ntid
	HelperGetThreadIdx      HelperID = 505 // long (u64 *x, u64 *y, u64 *z): %tid
	HelperGPUMembar         HelperID = 506 // long (): membar.sys
	HelperExit              HelperID = 507 // void (): end this thread's kernel
	HelperGetGridDim        HelperID = 508 // long (u64 *x, u64 *y, u64 *z): %nctaid
	HelperGetSMID           HelperID = 509 // u64 (): %smid
	HelperGetWarpID         HelperID = 510 // u64 (): %warpid
	HelperGetLaneID         HelperID = 511 // u64 (): %laneid

	// Our warp-level helpers: they aggregate over the lanes that are active
	// at the call, so a probe can write one record per warp instead of 32.
	HelperWarpIsLeader    HelperID = 600 // u64 (): 1 in the lowest active lane, else 0
	HelperWarpSumU64      HelperID = 601 // u64 (u64 v): sum of v over active lanes
	HelperWarpMinU64      HelperID = 602 // u64 (u64 v): minimum over active lanes
	HelperWarpMaxU64      HelperID = 603 // u64 (u64 v): maximum over active lanes
	HelperWarpActiveCount HelperID = 604 // u64 (): number of active lanes
	HelperWarpActiveMask  HelperID = 605 // u64 (): activemask of the warp
	HelperGetLaunchID     HelperID = 606 // u64 (): id of the current launch (0 if unknown)

	// Our device-memory helpers, for aggregating on the GPU.
	HelperAtomicMaxU64 HelperID = 607 // long (u64 *p, u64 v): *p = max(*p, v) atomically (unsigned); 0
	HelperAtomicMinU64 HelperID = 608 // long (u64 *p, u64 v): *p = min(*p, v) atomically (unsigned); 0
	HelperFenceGPU     HelperID = 609 // long (): fence.acq_rel.gpu (device scope, cheaper than 506); 0

	// Our launch-geometry helpers: the value in r0 (503/504/508 write x, y
	// and z through stack pointers, which costs every calling warp
	// local-memory stores and loads).
	HelperBlockLinearID HelperID = 610 // u64 (): the block's linear index in the grid, (z*ny + y)*nx + x
	HelperGridBlocks    HelperID = 611 // u64 (): blocks in the grid, nx*ny*nz
	HelperBlockThreads  HelperID = 612 // u64 (): threads in a block, ntid.x*ntid.y*ntid.z
)

// ArgType says what a helper expects in one argument register.
type ArgType uint8

// Argument types of helper signatures.
const (
	ArgNone     ArgType = iota // not an argument: not checked
	ArgScalar                  // an initialised number
	ArgAnything                // any initialised value
	ArgMap                     // a map handle (LD_IMM64 map reference)
	ArgRingbuf                 // a map handle of a GPU ring buffer (type 1527)
	ArgMapKey                  // pointer to KeySize bytes the helper reads, of the map in the ArgMap argument
	ArgMapValue                // pointer to ValueSize bytes the helper reads, of that map
	ArgMem                     // pointer to bytes the helper reads: the next argument's count, at most Signature.MaxLen
	ArgSize                    // bounded size of the preceding ArgMem
	ArgOut8                    // pointer to 8 bytes the helper writes
	ArgString                  // pointer to a string: the helper reads up to and including its first NUL, at most Signature.MaxLen bytes
	ArgAtomic8                 // pointer to 8 bytes of the stack or a map value, 8-byte aligned, read-modify-written by the helper
)

// RetType says what a helper returns in r0.
type RetType uint8

// Return types of helper signatures.
const (
	RetScalar         RetType = iota // a number
	RetMapValueOrNull                // pointer into the value of the ArgMap map, or NULL
)

// Signature describes a helper's arguments (r1..r5), its result and, with
// ArgAccess, the bytes it touches through each pointer argument.
type Signature struct {
	Name string
	Args [5]ArgType
	Ret  RetType
	// MaxLen bounds the bytes read through the ArgString or ArgMem
	// argument (0: no bound): the compiled code copies at most this many
	// into the host-call payload, and the interpreter reads as many.
	MaxLen uint64
}

// Access is what a helper touches through one pointer argument.
type Access struct {
	Bytes  uint64 // bytes from the pointer on (a string: at most this many)
	Write  bool   // the helper writes them (ArgOut8, ArgAtomic8)
	String bool   // the read ends at the first NUL, which it includes
}

// ArgAccess returns the bytes that argument a (0 for r1) of a call points
// to, given the value of the call's size argument (ArgMem) and the map of
// its ArgMap argument (ArgMapKey, ArgMapValue). ok is false when the
// argument is not a pointer the helper reads or writes.
func (s Signature) ArgAccess(a int, size uint64, m *Map) (acc Access, ok bool) {
	if a < 0 || a >= len(s.Args) {
		return Access{}, false
	}
	capped := func(n uint64) uint64 {
		if s.MaxLen > 0 {
			return min(n, s.MaxLen)
		}
		return n
	}
	switch s.Args[a] {
	case ArgMapKey, ArgMapValue:
		if m == nil {
			return Access{}, false
		}
		if s.Args[a] == ArgMapKey {
			return Access{Bytes: uint64(m.KeySize)}, true
		}
		return Access{Bytes: uint64(m.ValueSize)}, true
	case ArgMem:
		return Access{Bytes: capped(size)}, true
	case ArgString:
		return Access{Bytes: s.MaxLen, String: true}, true
	case ArgOut8, ArgAtomic8:
		return Access{Bytes: 8, Write: true}, true
	}
	return Access{}, false
}

var out3 = [5]ArgType{ArgOut8, ArgOut8, ArgOut8}

// helpers is the GPU helper ABI: what the verifier checks, the compiler
// emits and the interpreter runs for each helper id. The host-call
// helpers (trace_printk, puts) copy their text into one mailbox payload.
var helpers = map[HelperID]Signature{
	HelperMapLookupElem:     {Name: "map_lookup_elem", Args: [5]ArgType{ArgMap, ArgMapKey}, Ret: RetMapValueOrNull},
	HelperMapUpdateElem:     {Name: "map_update_elem", Args: [5]ArgType{ArgMap, ArgMapKey, ArgMapValue, ArgScalar}},
	HelperMapDeleteElem:     {Name: "map_delete_elem", Args: [5]ArgType{ArgMap, ArgMapKey}},
	HelperKtimeGetNs:        {Name: "ktime_get_ns"},
	HelperTracePrintk:       {Name: "trace_printk", Args: [5]ArgType{ArgMem, ArgSize}, MaxLen: shm.MailboxPayload},
	HelperGetCurrentPidTgid: {Name: "get_current_pid_tgid"},
	HelperPerfEventOutput:   {Name: "perf_event_output", Args: [5]ArgType{ArgAnything, ArgRingbuf, ArgScalar, ArgMem, ArgSize}},
	HelperPuts:              {Name: "puts", Args: [5]ArgType{ArgString}, MaxLen: shm.MailboxPayload},
	HelperGetGlobalTimer:    {Name: "get_globaltimer"},
	HelperGetBlockIdx:       {Name: "get_block_idx", Args: out3},
	HelperGetBlockDim:       {Name: "get_block_dim", Args: out3},
	HelperGetThreadIdx:      {Name: "get_thread_idx", Args: out3},
	HelperGPUMembar:         {Name: "gpu_membar"},
	HelperExit:              {Name: "exit"},
	HelperGetGridDim:        {Name: "get_grid_dim", Args: out3},
	HelperGetSMID:           {Name: "get_sm_id"},
	HelperGetWarpID:         {Name: "get_warp_id"},
	HelperGetLaneID:         {Name: "get_lane_id"},
	HelperWarpIsLeader:      {Name: "warp_is_leader"},
	HelperWarpSumU64:        {Name: "warp_sum_u64", Args: [5]ArgType{ArgScalar}},
	HelperWarpMinU64:        {Name: "warp_min_u64", Args: [5]ArgType{ArgScalar}},
	HelperWarpMaxU64:        {Name: "warp_max_u64", Args: [5]ArgType{ArgScalar}},
	HelperWarpActiveCount:   {Name: "warp_active_count"},
	HelperWarpActiveMask:    {Name: "warp_active_mask"},
	HelperGetLaunchID:       {Name: "get_launch_id"},
	HelperAtomicMaxU64:      {Name: "atomic_max_u64", Args: [5]ArgType{ArgAtomic8, ArgScalar}},
	HelperAtomicMinU64:      {Name: "atomic_min_u64", Args: [5]ArgType{ArgAtomic8, ArgScalar}},
	HelperFenceGPU:          {Name: "fence_gpu"},
	HelperBlockLinearID:     {Name: "block_linear_id"},
	HelperGridBlocks:        {Name: "grid_blocks"},
	HelperBlockThreads:      {Name: "block_threads"},
}

// HelperSignature returns the signature of a helper of the GPU ABI.
func HelperSignature(id HelperID) (Signature, bool) {
	s, ok := helpers[id]
	return s, ok
}

// Helpers returns the ids of the GPU ABI's helpers, in increasing order.
func Helpers() []HelperID {
	ids := make([]HelperID, 0, len(helpers))
	for id := range helpers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// MapType is the type number of a map definition (bpftime's numbering for GPU
// maps; Linux's for the rest).
type MapType uint32

// Map types understood by the compiler.
const (
	MapTypeHash           MapType = 1    // BPF_MAP_TYPE_HASH: host path
	MapTypeGPUHash        MapType = 1501 // hash shared by all GPU threads, inline on the GPU (layout: gpuhash.go)
	MapTypeArray          MapType = 2    // BPF_MAP_TYPE_ARRAY: host path
	MapTypePerThreadArray MapType = 1502 // one value per GPU thread per key, inline on the GPU
	MapTypeGPUArray       MapType = 1503 // array shared by all GPU threads, inline on the GPU
	MapTypeGPURingbuf     MapType = 1527 // GPU ring buffer, written by perf_event_output
	MapTypePerWarpArray   MapType = 1600 // one value per warp per key, inline on the GPU (ours)
	MapTypePerBlockArray  MapType = 1601 // one value per thread block per key, in the block's shared memory, not zeroed (ours)

	// bpftime's types that the loader turns into one of the above
	// (convertMap); Map.Declared keeps the number the object wrote.
	MapTypeKernelSharedArray  MapType = 1504 // kernel map shared with host programs: type 2 + BPF_F_MMAPABLE; with none, a GPU array (1503)
	MapTypePerThreadHostArray MapType = 1512 // a per-thread array (1502) that stays in host memory
	MapTypeGPUHostArray       MapType = 1513 // a GPU array (1503) that stays in host memory
)

// aliasedMapTypes are the declared types the loader lays out as another
// type (Map.Declared): what each becomes.
var aliasedMapTypes = map[MapType]MapType{
	MapTypeKernelSharedArray:  MapTypeArray,
	MapTypePerThreadHostArray: MapTypePerThreadArray,
	MapTypeGPUHostArray:       MapTypeGPUArray,
}

// CheckGPUMapType refuses a map type GPU programs cannot use: they can
// use the GPU maps (1501, 1502, 1503, 1527, 1600, 1601; bpftime's 1504,
// 1512 and 1513 arrive here as the type they become) and, through host
// calls, BPF_MAP_TYPE_HASH and BPF_MAP_TYPE_ARRAY.
func CheckGPUMapType(m *Map) error {
	switch m.Type {
	case MapTypeHash, MapTypeArray, MapTypeGPUHash, MapTypePerThreadArray, MapTypeGPUArray, MapTypeGPURingbuf,
		MapTypePerWarpArray, MapTypePerBlockArray:
		return nil
	}
	return fmt.Errorf("map %q has type %d, not a map type GPU programs can use (1, 2, 1501, 1502, 1503, 1504, 1512, 1513, 1527, 1600, 1601)", m.Name, m.Type)
}

// MaxBlockMapBytes bounds a per-block array (max_entries × 8-byte aligned
// value size): it takes shared memory from every block of the kernels it
// is spliced into.
const MaxBlockMapBytes = 1024

// MapFlagMmapable is Linux's BPF_F_MMAPABLE. A BPF_MAP_TYPE_ARRAY with it
// is a kernel map shared by host and GPU programs: the collector creates
// it in Linux, the application maps it and registers it with the device,
// and GPU programs access its values inline (see Map.Mmapable).
const MapFlagMmapable = 1 << 10

// Mmapable says whether m is a BPF_MAP_TYPE_ARRAY with BPF_F_MMAPABLE:
// its values lie at key × align8(ValueSize) from the start of the mapping,
// with no shm header, and GPU programs read and write them in place.
func (m *Map) Mmapable() bool {
	return m != nil && m.Type == MapTypeArray && m.Flags&MapFlagMmapable != 0
}

// HostMapID is the id by which a host-map request names its map (the
// request's args[4]): FNV-1a 64 of the map's name. The map index (args[0])
// is the map's place in the calling program's Maps, which differs between
// programs; map names are unique across a collector's programs.
func HostMapID(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// DeviceArray reports whether the GPU code indexes m itself: a GPU array,
// a per-thread, per-warp or per-block array, or an mmapable array. Its
// helpers compute the value's address from the key, with no host call.
func (m *Map) DeviceArray() bool {
	if m == nil {
		return false
	}
	switch m.Type {
	case MapTypeGPUArray, MapTypePerThreadArray, MapTypePerWarpArray, MapTypePerBlockArray:
		return true
	}
	return m.Mmapable()
}

// DeviceResident reports whether m may live in device memory, mirrored to
// the host by DMA (shm package comment, "Device-resident maps"): a GPU
// array, per-thread or per-warp array, GPU hash map or GPU ring buffer,
// but not one declared as bpftime's host-memory arrays (1512, 1513), whose
// point is that the host reads them without a copy.
func (m *Map) DeviceResident() bool {
	if m == nil || m.HostMemory() {
		return false
	}
	switch m.Type {
	case MapTypeGPUArray, MapTypeGPUHash, MapTypePerThreadArray, MapTypePerWarpArray, MapTypeGPURingbuf:
		return true
	}
	return false
}

// HostMemory reports whether m was declared as one of bpftime's
// host-memory GPU arrays (1512, 1513): it stays in the host region the
// device maps, whatever the placement of the other GPU maps.
func (m *Map) HostMemory() bool {
	return m != nil && (m.Declared == MapTypePerThreadHostArray || m.Declared == MapTypeGPUHostArray)
}

// DeviceResidentMaps returns the sorted names of the programs' maps that
// may live in device memory (Map.DeviceResident).
func DeviceResidentMaps(progs []*Program) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range progs {
		for _, m := range p.Maps {
			if m.DeviceResident() && !seen[m.Name] {
				seen[m.Name] = true
				out = append(out, m.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ProbeKind says where in a CUDA kernel a GPU program runs.
type ProbeKind int

// Probe kinds, from the ELF section name.
const (
	ProbeUnknown    ProbeKind = iota
	ProbeEntry                // kprobe/<kernel>: at kernel entry
	ProbeExit                 // kretprobe/<kernel>: before every ret/exit
	ProbeMemCapture           // kprobe/__memcapture: after each ld/st.global
	ProbeUprobe               // uprobe/...: a host program, loaded into Linux
	ProbeUretprobe            // uretprobe/...: a host program, loaded into Linux
)

// String names the probe kind as in section names.
func (k ProbeKind) String() string {
	switch k {
	case ProbeEntry:
		return "entry"
	case ProbeExit:
		return "exit"
	case ProbeMemCapture:
		return "memcapture"
	case ProbeUprobe:
		return "uprobe"
	case ProbeUretprobe:
		return "uretprobe"
	}
	return fmt.Sprintf("ProbeKind(%d)", int(k))
}

// ContextSize is the bytes of the context a GPU program of kind k finds
// in r1: a memory-capture program's (MemCtxSize), none for the others.
func (k ProbeKind) ContextSize() int {
	if k == ProbeMemCapture {
		return MemCtxSize
	}
	return 0
}

// StackSize is the size of the eBPF stack in bytes.
const StackSize = 512

// LoopBudget is how many backward jumps one run of a program may take. The
// verifier accepts loops; the compiler and the interpreter count backward
// jumps and end the program (r0 = 0) when the budget is spent, so a probe
// can never hang the kernel it runs in.
const LoopBudget = 1 << 16

// Memory-capture context (r1 of a kprobe/__memcapture program), 16 bytes:
//
//	offset 0  u64 addr   global address accessed
//	offset 8  u32 size   bytes accessed
//	offset 12 u32 flags  MemCtxStore if the access is a store
const (
	MemCtxSize  = 16
	MemCtxStore = 1
)
