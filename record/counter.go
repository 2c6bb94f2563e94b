package record

import (
	"fmt"
	"math"
)

// CounterHeaderSize is the size of a CounterSample record without its
// values.
const CounterHeaderSize = 40

// MaxCounterValues bounds the values of one CounterSample record (the
// sampler samples at most 16 metrics).
const MaxCounterValues = 64

// CounterFlags are the flags of a CounterSample record.
type CounterFlags uint16

// CounterSample flags.
const (
	// CounterOverflowBefore: the sampler's hardware buffer overflowed
	// since the previous sample of this device: samples were lost before
	// this one.
	CounterOverflowBefore CounterFlags = 1

	knownCounterFlags = CounterOverflowBefore
)

// CounterSample is one sample of a GPU's performance monitors (type 17,
// 40 + 8 × values bytes), written by the per-node PM sampler
// (gpuprobe-counters): the whole device's counters over [start_ns,
// end_ns), one value per metric of its set. The sampler maps CUPTI's
// sample timestamps onto CLOCK_MONOTONIC, the clock of the windows
// (Window) they are joined to. set_hash names the metric set: FNV-1a 32
// of the metric names joined by "," (CounterSetHash), so that a reader
// holding the names can check that the values are in their order.
//
//	offset  0  prefix {u16 type = 17, u16 version = 1, u32 size = 40 + 8n}
//	offset  8  u64 start_ns   host CLOCK_MONOTONIC, the sample began
//	offset 16  u64 end_ns     host CLOCK_MONOTONIC, the sample ended
//	offset 24  u32 device     CUDA device ordinal
//	offset 28  u32 set_hash   CounterSetHash of the metric names
//	offset 32  u16 values     n, at most MaxCounterValues
//	offset 34  u16 flags      CounterFlags: bit 0 OVERFLOW_BEFORE
//	offset 36  u32 reserved   zero
//	offset 40  f64 value[n]   IEEE 754, in the set's metric order
type CounterSample struct {
	StartNS uint64
	EndNS   uint64
	Device  uint32
	SetHash uint32
	Flags   CounterFlags
	Values  []float64
}

// CounterSetHash is the FNV-1a 32-bit hash of metric names joined by
// ",", as CounterSample.SetHash carries it.
func CounterSetHash(names []string) uint32 {
	h := uint32(2166136261)
	for i, n := range names {
		if i > 0 {
			h = (h ^ ',') * 16777619
		}
		for j := 0; j < len(n); j++ {
			h = (h ^ uint32(n[j])) * 16777619
		}
	}
	return h
}

// Decode fills c from the record in b.
func (c *CounterSample) Decode(b []byte) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if p.Type != TypeCounterSample {
		return &DecodeError{Type: TypeCounterSample, Field: "type", Offset: 0, Reason: fmt.Sprintf("is %s, not %s", p.Type, TypeCounterSample)}
	}
	if p.Version != Version {
		return &DecodeError{Type: TypeCounterSample, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	}
	if p.Size < CounterHeaderSize {
		return &DecodeError{Type: TypeCounterSample, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be ≥ %d, got %d", CounterHeaderSize, p.Size)}
	}
	n := int(le16(b, 32))
	if n > MaxCounterValues || int(p.Size) != CounterHeaderSize+8*n {
		return &DecodeError{Type: TypeCounterSample, Field: "size", Offset: 4,
			Reason: fmt.Sprintf("must be %d for %d values (at most %d), got %d", CounterHeaderSize+8*n, n, MaxCounterValues, p.Size)}
	}
	fl := CounterFlags(le16(b, 34))
	if fl&^knownCounterFlags != 0 {
		return &DecodeError{Type: TypeCounterSample, Field: "flags", Offset: 34, Reason: fmt.Sprintf("unknown flags %#x", uint16(fl&^knownCounterFlags))}
	}
	if le32(b, 36) != 0 {
		return &DecodeError{Type: TypeCounterSample, Field: "reserved", Offset: 36, Reason: "must be zero"}
	}
	start, end := le64(b, 8), le64(b, 16)
	if end < start {
		return &DecodeError{Type: TypeCounterSample, Field: "end_ns", Offset: 16, Reason: fmt.Sprintf("%d is before start_ns %d", end, start)}
	}
	*c = CounterSample{StartNS: start, EndNS: end, Device: le32(b, 24), SetHash: le32(b, 28), Flags: fl, Values: c.Values[:0]}
	for i := range n {
		c.Values = append(c.Values, math.Float64frombits(le64(b, CounterHeaderSize+8*i)))
	}
	return nil
}

// Append appends the encoded record to b.
func (c *CounterSample) Append(b []byte) []byte {
	size := CounterHeaderSize + 8*len(c.Values)
	b, r := grow(b, size)
	putPrefix(r, TypeCounterSample, size)
	put64(r, 8, c.StartNS)
	put64(r, 16, c.EndNS)
	put32(r, 24, c.Device)
	put32(r, 28, c.SetHash)
	put16(r, 32, uint16(len(c.Values)))
	put16(r, 34, uint16(c.Flags))
	for i, v := range c.Values {
		put64(r, CounterHeaderSize+8*i, math.Float64bits(v))
	}
	return b
}
