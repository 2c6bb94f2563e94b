// Package record defines the binary records that producers (the C shim in
// the application, PTX probes on the GPU, the Go load generator) write into
// gpuprobe's shared-memory rings, and decodes them.
//
// Every record is little-endian, 8-byte aligned in size, and starts with the
// same 8-byte prefix:
//
//	offset 0  u16 type     record type (Type)
//	offset 2  u16 version  layout version of that type (1 for all types here)
//	offset 4  u32 size     bytes of the whole record, prefix included, a multiple of 8
//
// The layouts of the types follow in the doc comment of each Go type and, for
// C and PTX producers, in include/gpuprobe_record.h. A reader skips a record
// of an unknown type by its size; a known type with an unknown version is an
// error. Timestamps named *_ns are nanoseconds: host ones are CLOCK_MONOTONIC
// unless said otherwise, device ones are the GPU's %globaltimer, mapped onto
// the host clock through Calibration records.
package record

import (
	"encoding/binary"
	"fmt"
)

// Type identifies the layout of a record.
type Type uint16

// Record types.
const (
	TypeLaunch        Type = 1  // Launch: a kernel launch seen by the shim
	TypeKernelName    Type = 2  // KernelName: function handle → name, once per handle
	TypeWarp          Type = 3  // Warp: one warp's execution, written by the GPU
	TypeCompletion    Type = 4  // Completion: the host saw the launch complete
	TypeMemcpy        Type = 5  // Memcpy: one memory copy
	TypeSync          Type = 6  // Sync: one synchronisation call
	TypeCalibration   Type = 7  // Calibration: host and GPU clocks read together
	TypeThreadCount   Type = 8  // ThreadCount: per-thread execution counts (threadhist)
	TypeDevice        Type = 9  // Device: index → UUID, name and SM count
	TypeHostCall      Type = 10 // HostCall: a CUDA API call seen by a host uprobe
	TypeExec          Type = 11 // Exec: one launch's device window, aggregated on the GPU
	TypeWindow        Type = 12 // Window: one kernel's device window, timed by the driver (CUPTI)
	TypeWindowState   Type = 13 // WindowState: device windows turned on or off
	TypeSpanContext   Type = 14 // SpanContext: the application span a thread's launches run under
	TypeStack         Type = 15 // Stack: the launching thread's stack of a sampled launch
	TypePatch         Type = 16 // Patch: one module patched off the application's threads
	TypeCounterSample Type = 17 // CounterSample: one sample of a GPU's performance monitors
	TypeCounterSet    Type = 18 // CounterSet: the metric names and GPU of a sampler's samples
)

// Version is the layout version of every type defined here.
const Version = 1

// PrefixSize is the size of the common prefix.
const PrefixSize = 8

// MaxFixedSize is the size of the largest fixed-size record (Device); ring
// slots must be at least this large.
const MaxFixedSize = DeviceSize

// String names the type as in the documentation ("launch", "warp", ...).
func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint16(t))
}

var typeNames = [...]string{
	TypeLaunch:        "launch",
	TypeKernelName:    "kernel_name",
	TypeWarp:          "warp",
	TypeCompletion:    "completion",
	TypeMemcpy:        "memcpy",
	TypeSync:          "sync",
	TypeCalibration:   "calibration",
	TypeThreadCount:   "thread_count",
	TypeDevice:        "device",
	TypeHostCall:      "host_call",
	TypeExec:          "exec",
	TypeWindow:        "window",
	TypeWindowState:   "window_state",
	TypeSpanContext:   "span_context",
	TypeStack:         "stack",
	TypePatch:         "patch",
	TypeCounterSample: "counter_sample",
	TypeCounterSet:    "counter_set",
}

// Prefix is the common 8-byte prefix of every record.
type Prefix struct {
	Type    Type
	Version uint16
	Size    uint32
}

// DecodeError says what is wrong with a record: its type, the field and its
// byte offset inside the record, and why.
type DecodeError struct {
	Type   Type
	Field  string
	Offset int
	Reason string
}

// Error reads like "record launch: field grid_x at offset 64: must be ≥ 1, got 0".
func (e *DecodeError) Error() string {
	return fmt.Sprintf("record %s: field %s at offset %d: %s", e.Type, e.Field, e.Offset, e.Reason)
}

// ParsePrefix reads and checks the prefix of the record at the start of b:
// b must hold at least Size bytes, and Size must be a multiple of 8 and at
// least PrefixSize.
func ParsePrefix(b []byte) (Prefix, error) {
	if len(b) < PrefixSize {
		return Prefix{}, &DecodeError{Field: "type", Offset: 0,
			Reason: fmt.Sprintf("need the %d-byte prefix, have %d bytes", PrefixSize, len(b))}
	}
	p := Prefix{
		Type:    Type(binary.LittleEndian.Uint16(b)),
		Version: binary.LittleEndian.Uint16(b[2:]),
		Size:    binary.LittleEndian.Uint32(b[4:]),
	}
	switch {
	case p.Size < PrefixSize || p.Size%8 != 0:
		return p, &DecodeError{Type: p.Type, Field: "size", Offset: 4,
			Reason: fmt.Sprintf("must be a multiple of 8 and ≥ %d, got %d", PrefixSize, p.Size)}
	case uint64(p.Size) > uint64(len(b)):
		return p, &DecodeError{Type: p.Type, Field: "size", Offset: 4,
			Reason: fmt.Sprintf("record of %d bytes but only %d bytes available", p.Size, len(b))}
	}
	return p, nil
}

// putPrefix writes the prefix into b[0:8].
func putPrefix(b []byte, t Type, size int) {
	put16(b, 0, uint16(t))
	put16(b, 2, Version)
	put32(b, 4, uint32(size))
}

// grow appends n zero bytes to b and returns the new slice and the new part.
func grow(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	clear(b[l:])
	return b, b[l:]
}

// check verifies the prefix of b for a fixed-size record of type t.
func check(b []byte, t Type, size int) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if p.Type != t {
		return &DecodeError{Type: t, Field: "type", Offset: 0, Reason: fmt.Sprintf("is %s, not %s", p.Type, t)}
	}
	if p.Version != Version {
		return &DecodeError{Type: t, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	}
	if int(p.Size) != size {
		return &DecodeError{Type: t, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be %d, got %d", size, p.Size)}
	}
	return nil
}

// notBefore returns nil when the time t of field (at offset off) is not
// before the time e of the field named earlier, else a DecodeError.
func notBefore(typ Type, field string, off int, t uint64, earlier string, e uint64) error {
	if t >= e {
		return nil
	}
	return &DecodeError{Type: typ, Field: field, Offset: off, Reason: fmt.Sprintf("%d is before %s %d", t, earlier, e)}
}

// Split calls fn with each record of buf, a concatenation of records, and
// returns the first error of ParsePrefix or fn. A zero-length buf is fine.
func Split(buf []byte, fn func(p Prefix, rec []byte) error) error {
	off := 0
	for off < len(buf) {
		p, err := ParsePrefix(buf[off:])
		if err != nil {
			return fmt.Errorf("record at byte %d: %w", off, err)
		}
		if err := fn(p, buf[off:off+int(p.Size)]); err != nil {
			return fmt.Errorf("record at byte %d: %w", off, err)
		}
		off += int(p.Size)
	}
	return nil
}

func le16(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
func le32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func le64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func put16(b []byte, off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
func put64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
