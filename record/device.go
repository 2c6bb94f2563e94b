package record

import (
	"fmt"
	"math/bits"
)

// WarpSize is the size of a Warp record.
const WarpSize = 64

// Warp is one warp's execution of a launch, written once per warp by the
// leader lane of the built-in kernel_phases exit probe (type 3, 64 bytes):
//
//	offset  0  prefix {u16 type = 3, u16 version = 1, u32 size = 64}
//	offset  8  u64 launch_id    the Launch it belongs to (helper 606)
//	offset 16  u32 block_x      %ctaid of the warp's block
//	offset 20  u32 block_y
//	offset 24  u32 block_z
//	offset 28  u32 warp         warp index inside the block (linear tid / 32)
//	offset 32  u32 sm_id        %smid
//	offset 36  u32 active_mask  lanes that reached the exit probe (nonzero)
//	offset 40  u64 start_ns     %globaltimer, earliest lane entry
//	offset 48  u64 end_ns       %globaltimer, latest lane exit
//	offset 56  u64 min_exit_ns  %globaltimer, earliest lane exit
//
// start_ns ≤ min_exit_ns ≤ end_ns; end_ns − min_exit_ns is the exit skew.
type Warp struct {
	LaunchID   uint64
	Block      [3]uint32
	Warp       uint32
	SMID       uint32
	ActiveMask uint32
	StartNS    uint64
	EndNS      uint64
	MinExitNS  uint64
}

// Decode fills w from the record in b.
func (w *Warp) Decode(b []byte) error {
	if err := check(b, TypeWarp, WarpSize); err != nil {
		return err
	}
	*w = Warp{
		LaunchID:   le64(b, 8),
		Block:      [3]uint32{le32(b, 16), le32(b, 20), le32(b, 24)},
		Warp:       le32(b, 28),
		SMID:       le32(b, 32),
		ActiveMask: le32(b, 36),
		StartNS:    le64(b, 40),
		EndNS:      le64(b, 48),
		MinExitNS:  le64(b, 56),
	}
	if w.ActiveMask == 0 {
		return &DecodeError{Type: TypeWarp, Field: "active_mask", Offset: 36, Reason: "must be nonzero"}
	}
	if err := notBefore(TypeWarp, "min_exit_ns", 56, w.MinExitNS, "start_ns", w.StartNS); err != nil {
		return err
	}
	return notBefore(TypeWarp, "end_ns", 48, w.EndNS, "min_exit_ns", w.MinExitNS)
}

// Append appends the encoded record to b.
func (w *Warp) Append(b []byte) []byte {
	b, r := grow(b, WarpSize)
	putPrefix(r, TypeWarp, WarpSize)
	put64(r, 8, w.LaunchID)
	put32(r, 16, w.Block[0])
	put32(r, 20, w.Block[1])
	put32(r, 24, w.Block[2])
	put32(r, 28, w.Warp)
	put32(r, 32, w.SMID)
	put32(r, 36, w.ActiveMask)
	put64(r, 40, w.StartNS)
	put64(r, 48, w.EndNS)
	put64(r, 56, w.MinExitNS)
	return b
}

// ActiveLanes is the number of lanes in ActiveMask.
func (w *Warp) ActiveLanes() int { return bits.OnesCount32(w.ActiveMask) }

// ExitSkewNS is end_ns − min_exit_ns.
func (w *Warp) ExitSkewNS() uint64 { return w.EndNS - w.MinExitNS }

// CompletionSize is the size of a Completion record.
const CompletionSize = 32

// CompletionHow says how the host learned that a launch completed.
type CompletionHow uint32

// Ways of seeing completion.
const (
	SeenByStreamSync   CompletionHow = 0 // cuStreamSynchronize returned
	SeenByEventQuery   CompletionHow = 1 // an event recorded after it completed
	SeenByCtxSync      CompletionHow = 2 // cuCtxSynchronize returned
	SeenByHostCallback CompletionHow = 3 // a host function queued after it ran
)

// Completion is the moment the host saw a launch complete (type 4, 32 bytes):
//
//	offset  0  prefix {u16 type = 4, u16 version = 1, u32 size = 32}
//	offset  8  u64 launch_id
//	offset 16  u64 complete_ns  host CLOCK_MONOTONIC
//	offset 24  u32 device
//	offset 28  u32 how          CompletionHow
type Completion struct {
	LaunchID   uint64
	CompleteNS uint64
	Device     uint32
	How        CompletionHow
}

// Decode fills c from the record in b.
func (c *Completion) Decode(b []byte) error {
	if err := check(b, TypeCompletion, CompletionSize); err != nil {
		return err
	}
	*c = Completion{LaunchID: le64(b, 8), CompleteNS: le64(b, 16), Device: le32(b, 24), How: CompletionHow(le32(b, 28))}
	return nil
}

// Append appends the encoded record to b.
func (c *Completion) Append(b []byte) []byte {
	b, r := grow(b, CompletionSize)
	putPrefix(r, TypeCompletion, CompletionSize)
	put64(r, 8, c.LaunchID)
	put64(r, 16, c.CompleteNS)
	put32(r, 24, c.Device)
	put32(r, 28, uint32(c.How))
	return b
}

// CalibrationSize is the size of a Calibration record.
const CalibrationSize = 40

// Calibration is one joint reading of the host clocks and a GPU's
// %globaltimer (type 7, 40 bytes). The producer reads CLOCK_MONOTONIC, the GPU
// timer, then CLOCK_MONOTONIC again, and records the midpoint with half the
// interval as uncertainty:
//
//	offset  0  prefix {u16 type = 7, u16 version = 1, u32 size = 40}
//	offset  8  u64 mono_ns         host CLOCK_MONOTONIC
//	offset 16  u64 realtime_ns     host CLOCK_REALTIME at the same moment
//	offset 24  u64 gpu_ns          %globaltimer
//	offset 32  u32 device
//	offset 36  u32 uncertainty_ns  half the host interval around the GPU read
type Calibration struct {
	MonoNS        uint64
	RealtimeNS    uint64
	GPUNS         uint64
	Device        uint32
	UncertaintyNS uint32
}

// Decode fills c from the record in b.
func (c *Calibration) Decode(b []byte) error {
	if err := check(b, TypeCalibration, CalibrationSize); err != nil {
		return err
	}
	*c = Calibration{MonoNS: le64(b, 8), RealtimeNS: le64(b, 16), GPUNS: le64(b, 24), Device: le32(b, 32), UncertaintyNS: le32(b, 36)}
	if c.RealtimeNS == 0 {
		return &DecodeError{Type: TypeCalibration, Field: "realtime_ns", Offset: 16, Reason: "must be nonzero"}
	}
	return nil
}

// Append appends the encoded record to b.
func (c *Calibration) Append(b []byte) []byte {
	b, r := grow(b, CalibrationSize)
	putPrefix(r, TypeCalibration, CalibrationSize)
	put64(r, 8, c.MonoNS)
	put64(r, 16, c.RealtimeNS)
	put64(r, 24, c.GPUNS)
	put32(r, 32, c.Device)
	put32(r, 36, c.UncertaintyNS)
	return b
}

// ThreadCountHeaderSize is the size of a ThreadCount record without counts.
const ThreadCountHeaderSize = 24

// MaxThreadCounts is the most counts one ThreadCount record carries.
const MaxThreadCounts = 1 << 16

// ThreadCount carries execution counts of consecutive threads of a launch, as
// threadhist's per-thread array holds them (type 8, 24 + 8·count bytes):
//
//	offset  0  prefix {u16 type = 8, u16 version = 1, u32 size}
//	offset  8  u64 launch_id
//	offset 16  u32 first_thread  linear global index of the thread of counts[0]
//	offset 20  u32 count         number of counts, 1..65536
//	offset 24  u64 counts[count]
type ThreadCount struct {
	LaunchID    uint64
	FirstThread uint32
	Counts      []uint64
}

// Decode fills t from the record in b, reusing t.Counts' storage.
func (t *ThreadCount) Decode(b []byte) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if p.Type != TypeThreadCount || p.Version != Version {
		return &DecodeError{Type: TypeThreadCount, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported %s version %d", p.Type, p.Version)}
	}
	if p.Size < ThreadCountHeaderSize {
		return &DecodeError{Type: TypeThreadCount, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be ≥ %d, got %d", ThreadCountHeaderSize, p.Size)}
	}
	n := int(le32(b, 20))
	if n == 0 || n > MaxThreadCounts {
		return &DecodeError{Type: TypeThreadCount, Field: "count", Offset: 20, Reason: fmt.Sprintf("must be 1..%d, got %d", MaxThreadCounts, n)}
	}
	if want := ThreadCountHeaderSize + 8*n; int(p.Size) != want {
		return &DecodeError{Type: TypeThreadCount, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be %d for count %d, got %d", want, n, p.Size)}
	}
	t.LaunchID = le64(b, 8)
	t.FirstThread = le32(b, 16)
	t.Counts = t.Counts[:0]
	for i := range n {
		t.Counts = append(t.Counts, le64(b, ThreadCountHeaderSize+8*i))
	}
	return nil
}

// Append appends the encoded record to b. It encodes at most MaxThreadCounts
// counts; callers split longer runs.
func (t *ThreadCount) Append(b []byte) []byte {
	counts := t.Counts
	if len(counts) > MaxThreadCounts {
		counts = counts[:MaxThreadCounts]
	}
	size := ThreadCountHeaderSize + 8*len(counts)
	b, r := grow(b, size)
	putPrefix(r, TypeThreadCount, size)
	put64(r, 8, t.LaunchID)
	put32(r, 16, t.FirstThread)
	put32(r, 20, uint32(len(counts)))
	for i, c := range counts {
		put64(r, ThreadCountHeaderSize+8*i, c)
	}
	return b
}

// DeviceSize is the size of a Device record.
const DeviceSize = 104

// Device describes a CUDA device the application uses; the shim writes it
// once per device at attach (type 9, 104 bytes):
//
//	offset  0  prefix {u16 type = 9, u16 version = 1, u32 size = 104}
//	offset  8  u32 device        CUDA device ordinal
//	offset 12  u32 pid
//	offset 16  u8  uuid[16]      cuDeviceGetUuid
//	offset 32  u32 sm_count      multiprocessors
//	offset 36  u32 compute_cap   major·10 + minor
//	offset 40  u8  name[64]      cuDeviceGetName, NUL-padded
type Device struct {
	Device     uint32
	PID        uint32
	UUID       [16]byte
	SMCount    uint32
	ComputeCap uint32
	Name       string
}

// Decode fills d from the record in b.
func (d *Device) Decode(b []byte) error {
	if err := check(b, TypeDevice, DeviceSize); err != nil {
		return err
	}
	d.Device, d.PID = le32(b, 8), le32(b, 12)
	copy(d.UUID[:], b[16:32])
	d.SMCount, d.ComputeCap = le32(b, 32), le32(b, 36)
	name := b[40:104]
	n := 0
	for n < len(name) && name[n] != 0 {
		n++
	}
	d.Name = Sanitize(string(name[:n]), len(name))
	return nil
}

// Append appends the encoded record to b (the name is cut at 63 bytes).
func (d *Device) Append(b []byte) []byte {
	b, r := grow(b, DeviceSize)
	putPrefix(r, TypeDevice, DeviceSize)
	put32(r, 8, d.Device)
	put32(r, 12, d.PID)
	copy(r[16:32], d.UUID[:])
	put32(r, 32, d.SMCount)
	put32(r, 36, d.ComputeCap)
	name := d.Name
	if len(name) > 63 {
		name = name[:63]
	}
	copy(r[40:], name)
	return b
}

// UUIDString formats the UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
// as nvidia-smi does.
func (d *Device) UUIDString() string {
	u := d.UUID
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
