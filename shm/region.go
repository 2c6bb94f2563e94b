package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layout constants of version 1 (see the package comment).
const (
	Magic           = 0x52425047 // "GPBR" little-endian
	Version         = 1          // layout version
	HeaderSize      = 64         // bytes of the region header
	DataOffset      = 512        // offset of the data area in every region
	PageSize        = 4096       // region sizes are multiples of this
	SlotHeaderSize  = 16         // ring slot header: seq, len, type
	MinSlotSize     = 24         // smallest ring slot
	MaxSlotSize     = 65536      // largest ring slot
	MailboxSlotSize = 256        // bytes of one mailbox slot
	MailboxPayload  = 168        // payload bytes of one mailbox slot
	ETIMEDOUT       = 110        // a host call that timed out returns -ETIMEDOUT
	maxRegionSize   = 1 << 40    // sanity bound on a region
)

// Header field offsets.
const (
	offMagic       = 0
	offVersion     = 4
	offKind        = 6
	offHeaderSize  = 8
	offFlags       = 12
	offDataSize    = 16
	offDataOffset  = 24
	offValueSize   = 32
	offMaxEntries  = 36
	offStride      = 40
	offLanes       = 44
	offRegionSize  = 48
	offID          = 56
	offReserved    = 60
	offRingHead    = 128
	offRingTail    = 192
	offRingDropped = 256
	offRingOversz  = 320
	offRingStalled = 384
	offMboxTimeout = 128
	offMboxServed  = 192
	offMboxBeat    = 256
	offMboxLate    = 320
)

// fieldOffset maps header field names to their offsets.
var fieldOffset = map[string]int{
	"magic": offMagic, "version": offVersion, "kind": offKind, "header_size": offHeaderSize,
	"flags": offFlags, "data_size": offDataSize, "data_offset": offDataOffset,
	"value_size": offValueSize, "max_entries": offMaxEntries, "stride": offStride,
	"lanes": offLanes, "region_size": offRegionSize, "id": offID, "reserved": offReserved,
}

// Kind is the kind of a region.
type Kind uint16

// Region kinds.
const (
	KindRing           Kind = 1 // multi-producer single-consumer ring of fixed slots
	KindArray          Kind = 2 // array shared by all threads
	KindPerThreadArray Kind = 3 // one value per GPU thread per key
	KindPerWarpArray   Kind = 4 // one value per warp per key
	KindMailbox        Kind = 5 // GPU→host call slots
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindRing:
		return "ring"
	case KindArray:
		return "array"
	case KindPerThreadArray:
		return "per-thread array"
	case KindPerWarpArray:
		return "per-warp array"
	case KindMailbox:
		return "mailbox"
	}
	return fmt.Sprintf("Kind(%d)", uint16(k))
}

// Header is the decoded 64-byte region header.
type Header struct {
	Kind       Kind   // region kind
	Flags      uint32 // reserved, 0
	DataSize   uint64 // bytes of the data area
	DataOffset uint64 // offset of the data area (DataOffset)
	ValueSize  uint32 // array: value bytes; ring, mailbox: slot bytes
	MaxEntries uint32 // array: keys; ring, mailbox: slots
	Stride     uint32 // bytes between values or slots
	Lanes      uint32 // threads or warps per key; 1 for other kinds
	RegionSize uint64 // bytes of the whole region
	ID         uint32 // owner-assigned id
}

// Spec describes a region to create.
type Spec struct {
	Kind       Kind   // region kind
	ValueSize  uint32 // array: value bytes; ring: slot bytes (incl. 16-byte slot header); mailbox: ignored
	MaxEntries uint32 // array: keys; ring, mailbox: slots (ring: a power of two)
	Lanes      uint32 // per-thread/per-warp arrays: threads/warps per key; otherwise 0 or 1
	ID         uint32 // owner-assigned id stored in the header
	Name       string // memfd name (shown in /proc/PID/fd); defaults to "gpuprobe-<kind>"
}

// HeaderError says which header field of a region is wrong and where it is.
type HeaderError struct {
	Field  string // header field name, as in the package comment
	Offset int    // byte offset of the field in the region
	Reason string // what is wrong
}

// Error implements error.
func (e *HeaderError) Error() string {
	return fmt.Sprintf("shm: region header field %s at offset %d: %s", e.Field, e.Offset, e.Reason)
}

// ErrClosed is returned by operations on a closed region.
var ErrClosed = errors.New("shm: region is closed")

func align8(v uint64) uint64 { return (v + 7) &^ 7 }

// header computes the header a spec describes, or says why it cannot exist.
func (s Spec) header() (Header, error) {
	h, _, err := s.layout()
	return h, err
}

// layout is header that also names the header field at fault.
func (s Spec) layout() (Header, string, error) {
	h := Header{Kind: s.Kind, DataOffset: DataOffset, ID: s.ID, ValueSize: s.ValueSize, MaxEntries: s.MaxEntries, Lanes: 1}
	if s.MaxEntries == 0 {
		return h, "max_entries", fmt.Errorf("shm: %v: max entries must be > 0", s.Kind)
	}
	switch s.Kind {
	case KindRing:
		if s.ValueSize < MinSlotSize || s.ValueSize > MaxSlotSize || s.ValueSize%8 != 0 {
			return h, "value_size", fmt.Errorf("shm: ring slot size %d: want a multiple of 8 in [%d, %d]", s.ValueSize, MinSlotSize, MaxSlotSize)
		}
		if s.MaxEntries < 2 || bits.OnesCount32(s.MaxEntries) != 1 {
			return h, "max_entries", fmt.Errorf("shm: ring slot count %d: want a power of two >= 2", s.MaxEntries)
		}
		h.Stride = s.ValueSize
		h.DataSize = uint64(s.MaxEntries) * (uint64(s.ValueSize) + 8)
	case KindMailbox:
		h.ValueSize, h.Stride = MailboxSlotSize, MailboxSlotSize
		h.DataSize = uint64(s.MaxEntries) * MailboxSlotSize
	case KindArray, KindPerThreadArray, KindPerWarpArray:
		if s.ValueSize == 0 {
			return h, "value_size", fmt.Errorf("shm: %v: value size must be > 0", s.Kind)
		}
		if s.Kind != KindArray {
			if s.Lanes == 0 {
				return h, "lanes", fmt.Errorf("shm: %v: lanes (threads or warps per key) must be > 0", s.Kind)
			}
			h.Lanes = s.Lanes
		} else if s.Lanes > 1 {
			return h, "lanes", fmt.Errorf("shm: array: lanes %d: a plain array has 1 lane", s.Lanes)
		}
		h.Stride = uint32(align8(uint64(s.ValueSize)))
		h.DataSize = uint64(s.MaxEntries) * uint64(h.Lanes) * uint64(h.Stride)
	default:
		return h, "kind", fmt.Errorf("shm: unknown region kind %d", uint16(s.Kind))
	}
	if h.DataSize > maxRegionSize {
		return h, "data_size", fmt.Errorf("shm: %v: data size %d exceeds %d bytes", s.Kind, h.DataSize, uint64(maxRegionSize))
	}
	h.RegionSize = (DataOffset + h.DataSize + PageSize - 1) &^ (PageSize - 1)
	return h, "", nil
}

// encode writes h into the first 64 bytes of b.
func (h Header) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[offMagic:], Magic)
	le.PutUint16(b[offVersion:], Version)
	le.PutUint16(b[offKind:], uint16(h.Kind))
	le.PutUint32(b[offHeaderSize:], HeaderSize)
	le.PutUint32(b[offFlags:], h.Flags)
	le.PutUint64(b[offDataSize:], h.DataSize)
	le.PutUint64(b[offDataOffset:], h.DataOffset)
	le.PutUint32(b[offValueSize:], h.ValueSize)
	le.PutUint32(b[offMaxEntries:], h.MaxEntries)
	le.PutUint32(b[offStride:], h.Stride)
	le.PutUint32(b[offLanes:], h.Lanes)
	le.PutUint64(b[offRegionSize:], h.RegionSize)
	le.PutUint32(b[offID:], h.ID)
	le.PutUint32(b[offReserved:], 0)
}

// ParseHeader decodes and validates a region header from b, the start of a
// region whose file holds fileSize bytes. want is the expected kind (0: any).
func ParseHeader(b []byte, fileSize int64, want Kind) (Header, error) {
	var h Header
	if len(b) < HeaderSize || fileSize < DataOffset {
		return h, &HeaderError{Field: "region_size", Offset: offRegionSize,
			Reason: fmt.Sprintf("region is %d bytes, shorter than the %d-byte header and control block", fileSize, DataOffset)}
	}
	le := binary.LittleEndian
	bad := func(field string, off int, format string, a ...any) (Header, error) {
		return h, &HeaderError{Field: field, Offset: off, Reason: fmt.Sprintf(format, a...)}
	}
	if m := le.Uint32(b[offMagic:]); m != Magic {
		return bad("magic", offMagic, "got %#08x, want %#08x (\"GPBR\")", m, Magic)
	}
	if v := le.Uint16(b[offVersion:]); v != Version {
		return bad("version", offVersion, "layout version %d, this reader understands %d", v, Version)
	}
	h.Kind = Kind(le.Uint16(b[offKind:]))
	if h.Kind < KindRing || h.Kind > KindMailbox {
		return bad("kind", offKind, "unknown region kind %d", uint16(h.Kind))
	}
	if want != 0 && h.Kind != want {
		return bad("kind", offKind, "region is a %v, want a %v", h.Kind, want)
	}
	if hs := le.Uint32(b[offHeaderSize:]); hs != HeaderSize {
		return bad("header_size", offHeaderSize, "got %d, want %d", hs, HeaderSize)
	}
	if h.Flags = le.Uint32(b[offFlags:]); h.Flags != 0 {
		return bad("flags", offFlags, "unknown flag bits %#x", h.Flags)
	}
	if r := le.Uint32(b[offReserved:]); r != 0 {
		return bad("reserved", offReserved, "got %#x, want 0", r)
	}
	h.DataSize = le.Uint64(b[offDataSize:])
	h.DataOffset = le.Uint64(b[offDataOffset:])
	h.ValueSize = le.Uint32(b[offValueSize:])
	h.MaxEntries = le.Uint32(b[offMaxEntries:])
	h.Stride = le.Uint32(b[offStride:])
	h.Lanes = le.Uint32(b[offLanes:])
	h.RegionSize = le.Uint64(b[offRegionSize:])
	h.ID = le.Uint32(b[offID:])
	if h.DataOffset != DataOffset {
		return bad("data_offset", offDataOffset, "got %d, want %d", h.DataOffset, DataOffset)
	}
	if h.RegionSize%PageSize != 0 || h.RegionSize < DataOffset || h.RegionSize > maxRegionSize {
		return bad("region_size", offRegionSize, "%d is not a multiple of %d in [%d, %d]", h.RegionSize, PageSize, PageSize, uint64(maxRegionSize))
	}
	if fileSize < 0 || uint64(fileSize) < h.RegionSize {
		return bad("region_size", offRegionSize, "header says %d bytes but the region is truncated to %d", h.RegionSize, fileSize)
	}
	if h.DataSize > h.RegionSize-DataOffset {
		return bad("data_size", offDataSize, "%d bytes of data do not fit in a %d-byte region", h.DataSize, h.RegionSize)
	}
	// Recompute what the kind-specific fields imply and compare.
	spec := Spec{Kind: h.Kind, ValueSize: h.ValueSize, MaxEntries: h.MaxEntries, Lanes: h.Lanes}
	if h.Kind == KindMailbox && h.ValueSize != MailboxSlotSize {
		return bad("value_size", offValueSize, "mailbox slot size %d, want %d", h.ValueSize, MailboxSlotSize)
	}
	want2, field, err := spec.layout()
	if err != nil {
		return bad(field, fieldOffset[field], "%v", err)
	}
	if h.Lanes != want2.Lanes {
		return bad("lanes", offLanes, "got %d, want %d for a %v", h.Lanes, want2.Lanes, h.Kind)
	}
	if h.Stride != want2.Stride {
		return bad("stride", offStride, "got %d, want %d for value size %d", h.Stride, want2.Stride, h.ValueSize)
	}
	if h.DataSize != want2.DataSize {
		return bad("data_size", offDataSize, "got %d, want %d for %d entries", h.DataSize, want2.DataSize, h.MaxEntries)
	}
	return h, nil
}

// Region is one mapped shared-memory region.
type Region struct {
	mu     sync.Mutex
	file   *os.File
	mem    []byte
	base   unsafe.Pointer
	header Header
	closed []func() // run by Close (OnClose)
}

// Create makes a new memfd region described by spec, sized, zeroed, headed
// and mapped.
func Create(spec Spec) (*Region, error) {
	h, err := spec.header()
	if err != nil {
		return nil, err
	}
	name := spec.Name
	if name == "" {
		name = "gpuprobe-" + h.Kind.String()
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create %q: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(int64(h.RegionSize)); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: ftruncate %q to %d bytes: %w", name, h.RegionSize, err)
	}
	// The size is fixed for the region's life: forbid shrinking, which
	// would turn accesses of the other side into SIGBUS.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: sealing %q: %w", name, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(h.RegionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: mmap %q (%d bytes): %w", name, h.RegionSize, err)
	}
	h.encode(mem)
	return &Region{file: f, mem: mem, base: unsafe.Pointer(&mem[0]), header: h}, nil
}

// Map maps the region behind fd after validating its header; want is the
// expected kind (0 accepts any). Map duplicates fd, so the caller keeps
// ownership of its own descriptor.
func Map(fd int, want Kind) (*Region, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: dup fd %d: %w", fd, err)
	}
	f := os.NewFile(uintptr(dup), fmt.Sprintf("gpuprobe-region-fd%d", fd))
	r, err := mapFile(f, want)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: fd %d: %w", fd, err)
	}
	return r, nil
}

// MapFile maps the region held by f, taking ownership of f (Close closes it).
func MapFile(f *os.File, want Kind) (*Region, error) {
	r, err := mapFile(f, want)
	if err != nil {
		return nil, fmt.Errorf("shm: %s: %w", f.Name(), err)
	}
	return r, nil
}

func mapFile(f *os.File, want Kind) (*Region, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	size := st.Size()
	if size < DataOffset {
		_, err := ParseHeader(nil, size, want)
		return nil, err
	}
	if size > maxRegionSize || size > math.MaxInt {
		return nil, fmt.Errorf("region file is %d bytes, larger than %d", size, uint64(maxRegionSize))
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	h, err := ParseHeader(mem, size, want)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &Region{file: f, mem: mem, base: unsafe.Pointer(&mem[0]), header: h}, nil
}

// Header returns the region's decoded header.
func (r *Region) Header() Header { return r.header }

// Kind returns the region's kind.
func (r *Region) Kind() Kind { return r.header.Kind }

// File returns the memfd behind the region (for passing it to another
// process); it stays owned by the region.
func (r *Region) File() *os.File { return r.file }

// Bytes returns the whole mapped region, header included. The slice is
// invalid after Close.
func (r *Region) Bytes() []byte { return r.mem }

// Data returns the data area. The slice is invalid after Close.
func (r *Region) Data() []byte {
	return r.mem[DataOffset : DataOffset+r.header.DataSize : DataOffset+r.header.DataSize]
}

// OnClose has fn run when the region is unmapped (by Close, once), e.g.
// to give its bytes back to a budget.
func (r *Region) OnClose(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, fn)
}

// DropFile closes the region's memfd, keeping the mapping: once the
// descriptor was handed over, the region holds no descriptor of this
// process. File returns nil afterwards. It is safe to call twice.
func (r *Region) DropFile() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == nil {
		return nil
	}
	err := r.file.Close()
	r.file = nil
	if err != nil {
		return fmt.Errorf("shm: closing the memfd of a %v region: %w", r.header.Kind, err)
	}
	return nil
}

// Close unmaps the region and closes its file. It is safe to call twice;
// users of the region's slices must be done with them.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem, r.base = nil, nil
	if r.file != nil {
		if cerr := r.file.Close(); err == nil && cerr != nil {
			err = cerr
		}
		r.file = nil
	}
	for _, fn := range r.closed {
		fn()
	}
	r.closed = nil
	if err != nil {
		return fmt.Errorf("shm: closing %v region: %w", r.header.Kind, err)
	}
	return nil
}

// u64 returns a pointer to the u64 at byte offset off of the region.
func (r *Region) u64(off uint64) *uint64 { return (*uint64)(unsafe.Add(r.base, off)) }
