package record

import (
	"fmt"
	"unicode/utf8"
)

// LaunchSize is the size of a Launch record.
const LaunchSize = 96

// LaunchAPI says which driver entry point launched a kernel.
type LaunchAPI uint32

// Launch entry points.
const (
	APILaunchKernel            LaunchAPI = 0 // cuLaunchKernel(_ptsz)
	APILaunchKernelEx          LaunchAPI = 1 // cuLaunchKernelEx(_ptsz)
	APILaunchCooperativeKernel LaunchAPI = 2 // cuLaunchCooperativeKernel(_ptsz)
	APIGraphLaunch             LaunchAPI = 3 // a kernel node of cuGraphLaunch
)

// String names the entry point.
func (a LaunchAPI) String() string {
	switch a {
	case APILaunchKernel:
		return "cuLaunchKernel"
	case APILaunchKernelEx:
		return "cuLaunchKernelEx"
	case APILaunchCooperativeKernel:
		return "cuLaunchCooperativeKernel"
	case APIGraphLaunch:
		return "cuGraphLaunch"
	}
	return fmt.Sprintf("api(%d)", uint32(a))
}

// Launch is one kernel launch, written by the shim when the launch call
// returns (type 1, 96 bytes):
//
//	offset  0  prefix {u16 type = 1, u16 version = 1, u32 size = 96}
//	offset  8  u64 launch_id    unique per process and device context
//	offset 16  u32 pid          process id (tgid)
//	offset 20  u32 tid          thread id of the caller
//	offset 24  u64 enqueue_ns   host CLOCK_MONOTONIC when the launch call began
//	offset 32  u64 return_ns    host CLOCK_MONOTONIC when the launch call returned
//	offset 40  u64 stream       CUstream handle (0 = legacy default stream)
//	offset 48  u64 function     CUfunction handle (named by a KernelName record)
//	offset 56  u32 device       CUDA device ordinal
//	offset 60  u32 shared_mem   dynamic shared memory bytes
//	offset 64  u32 grid_x       grid dimensions in blocks, each ≥ 1
//	offset 68  u32 grid_y
//	offset 72  u32 grid_z
//	offset 76  u32 block_x      block dimensions in threads, each ≥ 1
//	offset 80  u32 block_y
//	offset 84  u32 block_z
//	offset 88  u32 result       CUresult the launch call returned (0 = CUDA_SUCCESS)
//	offset 92  u32 api          LaunchAPI in the low 16 bits, LaunchFlags in the high 16
type Launch struct {
	LaunchID  uint64
	PID       uint32
	TID       uint32
	EnqueueNS uint64
	ReturnNS  uint64
	Stream    uint64
	Function  uint64
	Device    uint32
	SharedMem uint32
	Grid      [3]uint32
	Block     [3]uint32
	Result    uint32
	API       LaunchAPI
	Flags     LaunchFlags
}

// LaunchFlags are the flags of a launch record.
type LaunchFlags uint16

// Launch flags.
const (
	// LaunchUnprobed marks a launch that runs no device probe (its kernel
	// is not patched, or the shim gave it launch id 0): no device record of
	// it will come.
	LaunchUnprobed LaunchFlags = 1
	// LaunchNoWindow marks a launch of which no Window record will come
	// (device windows off, paused by their rate cap, or no correlation id).
	LaunchNoWindow LaunchFlags = 2
	// LaunchSASS marks a launch that runs the SASS route's patch functions
	// (Compute Sanitizer, shim/src/sass.c): one Exec record of it will come.
	LaunchSASS LaunchFlags = 4
	// LaunchPreswap marks a launch that ran before its kernel's patched
	// image was ready (compiled off the application's threads): it ran
	// the original kernel, windows only (LaunchUnprobed is set too).
	LaunchPreswap LaunchFlags = 8
	// LaunchCooperative marks a cuLaunchKernelEx launch with the
	// cooperative attribute (cuLaunchCooperativeKernel is its own API).
	LaunchCooperative LaunchFlags = 16
	// LaunchCluster marks a cuLaunchKernelEx launch with a thread-block
	// cluster dimension.
	LaunchCluster LaunchFlags = 32
)

// Decode fills l from the record in b.
func (l *Launch) Decode(b []byte) error {
	if err := check(b, TypeLaunch, LaunchSize); err != nil {
		return err
	}
	*l = Launch{
		LaunchID:  le64(b, 8),
		PID:       le32(b, 16),
		TID:       le32(b, 20),
		EnqueueNS: le64(b, 24),
		ReturnNS:  le64(b, 32),
		Stream:    le64(b, 40),
		Function:  le64(b, 48),
		Device:    le32(b, 56),
		SharedMem: le32(b, 60),
		Grid:      [3]uint32{le32(b, 64), le32(b, 68), le32(b, 72)},
		Block:     [3]uint32{le32(b, 76), le32(b, 80), le32(b, 84)},
		Result:    le32(b, 88),
		API:       LaunchAPI(le32(b, 92) & 0xffff),
		Flags:     LaunchFlags(le32(b, 92) >> 16),
	}
	for i, n := range [3]string{"grid_x", "grid_y", "grid_z"} {
		if l.Grid[i] == 0 {
			return &DecodeError{Type: TypeLaunch, Field: n, Offset: 64 + 4*i, Reason: "must be ≥ 1, got 0"}
		}
	}
	for i, n := range [3]string{"block_x", "block_y", "block_z"} {
		if l.Block[i] == 0 {
			return &DecodeError{Type: TypeLaunch, Field: n, Offset: 76 + 4*i, Reason: "must be ≥ 1, got 0"}
		}
	}
	return notBefore(TypeLaunch, "return_ns", 32, l.ReturnNS, "enqueue_ns", l.EnqueueNS)
}

// Append appends the encoded record to b.
func (l *Launch) Append(b []byte) []byte {
	b, r := grow(b, LaunchSize)
	putPrefix(r, TypeLaunch, LaunchSize)
	put64(r, 8, l.LaunchID)
	put32(r, 16, l.PID)
	put32(r, 20, l.TID)
	put64(r, 24, l.EnqueueNS)
	put64(r, 32, l.ReturnNS)
	put64(r, 40, l.Stream)
	put64(r, 48, l.Function)
	put32(r, 56, l.Device)
	put32(r, 60, l.SharedMem)
	for i := range 3 {
		put32(r, 64+4*i, l.Grid[i])
		put32(r, 76+4*i, l.Block[i])
	}
	put32(r, 88, l.Result)
	put32(r, 92, uint32(l.API)&0xffff|uint32(l.Flags)<<16)
	return b
}

// Threads is the number of threads of the launch.
func (l *Launch) Threads() uint64 {
	return uint64(l.Grid[0]) * uint64(l.Grid[1]) * uint64(l.Grid[2]) *
		uint64(l.Block[0]) * uint64(l.Block[1]) * uint64(l.Block[2])
}

// WarpsPerBlock is the number of warps of one block.
func (l *Launch) WarpsPerBlock() uint64 {
	t := uint64(l.Block[0]) * uint64(l.Block[1]) * uint64(l.Block[2])
	return (t + 31) / 32
}

// KernelNameHeaderSize is the size of a KernelName record without its name.
const KernelNameHeaderSize = 32

// MaxKernelNameLen is the longest name a KernelName record carries; longer
// names are truncated and flagged.
const MaxKernelNameLen = 4096

// KernelNameTruncated is the KernelName flag of a truncated name.
const KernelNameTruncated = 1

// KernelName binds a function handle to its (mangled) name; the shim writes
// it once per handle, before the first Launch of that handle (type 2,
// 32 + name_len rounded up to 8 bytes):
//
//	offset  0  prefix {u16 type = 2, u16 version = 1, u32 size}
//	offset  8  u64 function    CUfunction handle
//	offset 16  u64 module      CUmodule or CUlibrary handle it came from
//	offset 24  u32 pid         process id
//	offset 28  u16 name_len    bytes of name, 1..4096
//	offset 30  u16 flags       bit 0: name truncated
//	offset 32  name_len bytes  the name, UTF-8, no NUL; then zero padding to size
type KernelName struct {
	Function  uint64
	Module    uint64
	PID       uint32
	Truncated bool
	Name      string
}

// Decode fills k from the record in b. The name is copied, its invalid
// UTF-8 replaced (Sanitize) and kept within MaxKernelNameLen.
func (k *KernelName) Decode(b []byte) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if p.Type != TypeKernelName {
		return &DecodeError{Type: TypeKernelName, Field: "type", Offset: 0, Reason: fmt.Sprintf("is %s", p.Type)}
	}
	if p.Version != Version {
		return &DecodeError{Type: TypeKernelName, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	}
	if p.Size < KernelNameHeaderSize {
		return &DecodeError{Type: TypeKernelName, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be ≥ %d, got %d", KernelNameHeaderSize, p.Size)}
	}
	n := int(le16(b, 28))
	if n == 0 || n > MaxKernelNameLen {
		return &DecodeError{Type: TypeKernelName, Field: "name_len", Offset: 28, Reason: fmt.Sprintf("must be 1..%d, got %d", MaxKernelNameLen, n)}
	}
	if want := align8(KernelNameHeaderSize + n); int(p.Size) != want {
		return &DecodeError{Type: TypeKernelName, Field: "size", Offset: 4,
			Reason: fmt.Sprintf("must be %d for name_len %d, got %d", want, n, p.Size)}
	}
	*k = KernelName{
		Function:  le64(b, 8),
		Module:    le64(b, 16),
		PID:       le32(b, 24),
		Truncated: le16(b, 30)&KernelNameTruncated != 0,
		Name:      Sanitize(string(b[KernelNameHeaderSize:KernelNameHeaderSize+n]), 3*MaxKernelNameLen),
	}
	// Invalid bytes became U+FFFD (3 bytes each): cut back to the bound.
	if len(k.Name) > MaxKernelNameLen {
		k.Name, k.Truncated = Sanitize(k.Name, MaxKernelNameLen), true
	}
	return nil
}

// Append appends the encoded record to b, truncating a name longer than
// MaxKernelNameLen. An empty name is encoded as "?".
func (k *KernelName) Append(b []byte) []byte {
	name, flags := k.Name, uint16(0)
	if k.Truncated {
		flags |= KernelNameTruncated
	}
	if len(name) > MaxKernelNameLen {
		name, flags = name[:MaxKernelNameLen], flags|KernelNameTruncated
	}
	if name == "" {
		name = "?"
	}
	size := align8(KernelNameHeaderSize + len(name))
	b, r := grow(b, size)
	putPrefix(r, TypeKernelName, size)
	put64(r, 8, k.Function)
	put64(r, 16, k.Module)
	put32(r, 24, k.PID)
	put16(r, 28, uint16(len(name)))
	put16(r, 30, flags)
	copy(r[KernelNameHeaderSize:], name)
	return b
}

// MaxKernelNameSize is the size of the largest KernelName record (a name of
// MaxKernelNameLen bytes). The receiver's names ring (agent role 4) has
// slots that hold it, so no name up to MaxKernelNameLen is cut.
const MaxKernelNameSize = KernelNameHeaderSize + MaxKernelNameLen

// AppendFit is Append for a ring whose records can be at most maxSize
// bytes (a slot's payload): a name that does not fit is cut at a UTF-8
// character boundary and flagged truncated, so the reader marks it instead
// of the record being lost. maxSize below KernelNameHeaderSize+8 leaves a
// one-byte name.
func (k *KernelName) AppendFit(b []byte, maxSize int) []byte {
	room := min(max(maxSize&^7-KernelNameHeaderSize, 1), MaxKernelNameLen)
	if len(k.Name) <= room {
		return k.Append(b)
	}
	cut := room
	for cut > 1 && !utf8.RuneStart(k.Name[cut]) {
		cut--
	}
	t := *k
	t.Name, t.Truncated = k.Name[:cut], true
	return t.Append(b)
}

func align8(n int) int { return (n + 7) &^ 7 }
