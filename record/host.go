package record

import "fmt"

// MemcpySize is the size of a Memcpy record.
const MemcpySize = 56

// MemcpyKind is the direction of a copy.
type MemcpyKind uint16

// Copy directions.
const (
	MemcpyUnknown        MemcpyKind = 0 // cudaMemcpyDefault, cuMemcpy: inferred from the pointers
	MemcpyHostToDevice   MemcpyKind = 1
	MemcpyDeviceToHost   MemcpyKind = 2
	MemcpyDeviceToDevice MemcpyKind = 3
	MemcpyHostToHost     MemcpyKind = 4
	MemcpyPeer           MemcpyKind = 5
)

// String gives the cuda.memcpy.kind value, OBI's (the cudaMemcpyKind
// enumerator without its cuda prefix): "MemcpyHostToDevice",
// "MemcpyDeviceToHost", "MemcpyDeviceToDevice", "MemcpyHostToHost",
// "MemcpyDefault" (direction left to the driver), and "MemcpyPeer" (ours,
// cuMemcpyPeer; OBI allows custom values).
func (k MemcpyKind) String() string {
	switch k {
	case MemcpyHostToDevice:
		return "MemcpyHostToDevice"
	case MemcpyDeviceToHost:
		return "MemcpyDeviceToHost"
	case MemcpyDeviceToDevice:
		return "MemcpyDeviceToDevice"
	case MemcpyHostToHost:
		return "MemcpyHostToHost"
	case MemcpyPeer:
		return "MemcpyPeer"
	}
	return "MemcpyDefault"
}

// MemcpyAsync is the Memcpy flag of an asynchronous copy (the times are then
// those of the call, not of the transfer).
const MemcpyAsync = 1

// Memcpy is one memory copy call (type 5, 56 bytes):
//
//	offset  0  prefix {u16 type = 5, u16 version = 1, u32 size = 56}
//	offset  8  u64 bytes
//	offset 16  u64 start_ns  host CLOCK_MONOTONIC when the call began
//	offset 24  u64 end_ns    host CLOCK_MONOTONIC when it returned
//	offset 32  u64 stream    CUstream (0 for synchronous copies)
//	offset 40  u32 pid
//	offset 44  u32 tid
//	offset 48  u32 device
//	offset 52  u16 kind      MemcpyKind
//	offset 54  u16 flags     bit 0: asynchronous
type Memcpy struct {
	Bytes   uint64
	StartNS uint64
	EndNS   uint64
	Stream  uint64
	PID     uint32
	TID     uint32
	Device  uint32
	Kind    MemcpyKind
	Flags   uint16
}

// Decode fills m from the record in b.
func (m *Memcpy) Decode(b []byte) error {
	if err := check(b, TypeMemcpy, MemcpySize); err != nil {
		return err
	}
	*m = Memcpy{Bytes: le64(b, 8), StartNS: le64(b, 16), EndNS: le64(b, 24), Stream: le64(b, 32),
		PID: le32(b, 40), TID: le32(b, 44), Device: le32(b, 48), Kind: MemcpyKind(le16(b, 52)), Flags: le16(b, 54)}
	if m.Kind > MemcpyPeer {
		return &DecodeError{Type: TypeMemcpy, Field: "kind", Offset: 52, Reason: fmt.Sprintf("unknown kind %d", m.Kind)}
	}
	return notBefore(TypeMemcpy, "end_ns", 24, m.EndNS, "start_ns", m.StartNS)
}

// Append appends the encoded record to b.
func (m *Memcpy) Append(b []byte) []byte {
	b, r := grow(b, MemcpySize)
	putPrefix(r, TypeMemcpy, MemcpySize)
	put64(r, 8, m.Bytes)
	put64(r, 16, m.StartNS)
	put64(r, 24, m.EndNS)
	put64(r, 32, m.Stream)
	put32(r, 40, m.PID)
	put32(r, 44, m.TID)
	put32(r, 48, m.Device)
	put16(r, 52, uint16(m.Kind))
	put16(r, 54, m.Flags)
	return b
}

// SyncSize is the size of a Sync record.
const SyncSize = 48

// SyncKind is what a synchronisation call waited for.
type SyncKind uint16

// Synchronisation calls.
const (
	SyncContext     SyncKind = 1 // cuCtxSynchronize / cudaDeviceSynchronize
	SyncStream      SyncKind = 2 // cuStreamSynchronize
	SyncEvent       SyncKind = 3 // cuEventSynchronize
	SyncStreamEvent SyncKind = 4 // cuStreamWaitEvent
)

// String gives the attribute value and span name suffix.
func (k SyncKind) String() string {
	switch k {
	case SyncContext:
		return "context"
	case SyncStream:
		return "stream"
	case SyncEvent:
		return "event"
	case SyncStreamEvent:
		return "stream_wait_event"
	}
	return "unknown"
}

// Sync is one synchronisation call (type 6, 48 bytes):
//
//	offset  0  prefix {u16 type = 6, u16 version = 1, u32 size = 48}
//	offset  8  u64 start_ns  host CLOCK_MONOTONIC when the call began
//	offset 16  u64 end_ns    host CLOCK_MONOTONIC when it returned
//	offset 24  u64 stream    CUstream or CUevent handle (0 for context syncs)
//	offset 32  u32 pid
//	offset 36  u32 tid
//	offset 40  u32 device
//	offset 44  u16 kind      SyncKind, 1..4
//	offset 46  u16 reserved  zero
type Sync struct {
	StartNS uint64
	EndNS   uint64
	Stream  uint64
	PID     uint32
	TID     uint32
	Device  uint32
	Kind    SyncKind
}

// Decode fills s from the record in b.
func (s *Sync) Decode(b []byte) error {
	if err := check(b, TypeSync, SyncSize); err != nil {
		return err
	}
	*s = Sync{StartNS: le64(b, 8), EndNS: le64(b, 16), Stream: le64(b, 24), PID: le32(b, 32), TID: le32(b, 36),
		Device: le32(b, 40), Kind: SyncKind(le16(b, 44))}
	switch {
	case s.Kind < SyncContext || s.Kind > SyncStreamEvent:
		return &DecodeError{Type: TypeSync, Field: "kind", Offset: 44, Reason: fmt.Sprintf("unknown kind %d", s.Kind)}
	case le16(b, 46) != 0:
		return &DecodeError{Type: TypeSync, Field: "reserved", Offset: 46, Reason: "must be zero"}
	}
	return notBefore(TypeSync, "end_ns", 16, s.EndNS, "start_ns", s.StartNS)
}

// Append appends the encoded record to b.
func (s *Sync) Append(b []byte) []byte {
	b, r := grow(b, SyncSize)
	putPrefix(r, TypeSync, SyncSize)
	put64(r, 8, s.StartNS)
	put64(r, 16, s.EndNS)
	put64(r, 24, s.Stream)
	put32(r, 32, s.PID)
	put32(r, 36, s.TID)
	put32(r, 40, s.Device)
	put16(r, 44, uint16(s.Kind))
	return b
}
