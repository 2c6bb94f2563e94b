package record

import (
	"fmt"
	"strings"
)

// CounterSetHeaderSize is the size of a CounterSet record without its
// names.
const CounterSetHeaderSize = 48

// MaxCounterNamesLen bounds the names of one CounterSet record: 16
// metrics (the sampler's most) of up to 127 bytes each. A record of
// CounterSetHeaderSize + MaxCounterNamesLen bytes fits a slot of the
// receiver's names ring (MaxKernelNameSize).
const MaxCounterNamesLen = 2048

// CounterSet names the metrics of a PM sampler's CounterSample records
// and the GPU they sample (type 18, 48 + names rounded up to 8 bytes),
// written once per session before its first sample, by the sampler's
// forwarder (gpuprobe counters):
//
//	offset  0  prefix {u16 type = 18, u16 version = 1, u32 size = 48 + pad8(names_len)}
//	offset  8  u64 interval_ns  the sampling interval
//	offset 16  u8  uuid[16]     cuDeviceGetUuid(_v2) of the sampled GPU; all zero: unknown
//	offset 32  u32 device       the sampler's CUDA device ordinal (CounterSample.device)
//	offset 36  u32 set_hash     CounterSetHash of the names (CounterSample.set_hash)
//	offset 40  u16 count        number of names, 1..MaxCounterValues
//	offset 42  u16 names_len    bytes of names, 1..MaxCounterNamesLen
//	offset 44  u32 reserved     zero
//	offset 48  u8  names[names_len]  the metric names joined by ",", zero-padded to 8
//
// A name is CUPTI's ([A-Za-z0-9_.]+), so the names are safe as metric
// attribute values and the joined string is exactly what set_hash hashes.
// The UUID, not the ordinal, says which GPU: processes see different
// ordinals under CUDA_VISIBLE_DEVICES.
type CounterSet struct {
	IntervalNS uint64
	UUID       [16]byte
	Device     uint32
	Names      []string
}

// HasUUID reports whether the sampler gave the GPU's UUID.
func (c *CounterSet) HasUUID() bool { return c.UUID != [16]byte{} }

// UUIDString is the UUID bare, as cuda.device.uuid carries it
// ("xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx").
func (c *CounterSet) UUIDString() string {
	d := Device{UUID: c.UUID}
	return strings.TrimPrefix(d.UUIDString(), "GPU-")
}

// Hash is CounterSetHash of the names.
func (c *CounterSet) Hash() uint32 { return CounterSetHash(c.Names) }

// Decode fills c from the record in b.
func (c *CounterSet) Decode(b []byte) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if err := counterSetPrefix(p); err != nil {
		return err
	}
	n, nl := int(le16(b, 40)), int(le16(b, 42))
	if nl == 0 || nl > MaxCounterNamesLen || int(p.Size) != CounterSetHeaderSize+(nl+7)&^7 {
		return &DecodeError{Type: TypeCounterSet, Field: "names_len", Offset: 42,
			Reason: fmt.Sprintf("must be 1..%d and fit size %d, got %d", MaxCounterNamesLen, p.Size, nl)}
	}
	if le32(b, 44) != 0 {
		return &DecodeError{Type: TypeCounterSet, Field: "reserved", Offset: 44, Reason: "must be zero"}
	}
	for i := CounterSetHeaderSize + nl; i < int(p.Size); i++ {
		if b[i] != 0 {
			return &DecodeError{Type: TypeCounterSet, Field: "names", Offset: i, Reason: "padding must be zero"}
		}
	}
	names, err := counterNames(string(b[CounterSetHeaderSize:CounterSetHeaderSize+nl]), n)
	if err != nil {
		return err
	}
	if h := CounterSetHash(names); h != le32(b, 36) {
		return &DecodeError{Type: TypeCounterSet, Field: "set_hash", Offset: 36,
			Reason: fmt.Sprintf("%#x is not the names' hash %#x", le32(b, 36), h)}
	}
	*c = CounterSet{IntervalNS: le64(b, 8), Device: le32(b, 32), Names: names}
	copy(c.UUID[:], b[16:32])
	return nil
}

func counterSetPrefix(p Prefix) error {
	switch {
	case p.Type != TypeCounterSet:
		return &DecodeError{Type: TypeCounterSet, Field: "type", Offset: 0, Reason: fmt.Sprintf("is %s, not %s", p.Type, TypeCounterSet)}
	case p.Version != Version:
		return &DecodeError{Type: TypeCounterSet, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	case p.Size < CounterSetHeaderSize+8:
		return &DecodeError{Type: TypeCounterSet, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be ≥ %d, got %d", CounterSetHeaderSize+8, p.Size)}
	}
	return nil
}

// counterNames splits s into n metric names and checks each.
func counterNames(s string, n int) ([]string, error) {
	names := strings.Split(s, ",")
	if n == 0 || n > MaxCounterValues || len(names) != n {
		return nil, &DecodeError{Type: TypeCounterSet, Field: "count", Offset: 40,
			Reason: fmt.Sprintf("must be 1..%d and the number of names (%d), got %d", MaxCounterValues, len(names), n)}
	}
	for i, name := range names {
		if err := CheckCounterName(name); err != nil {
			return nil, &DecodeError{Type: TypeCounterSet, Field: "names", Offset: CounterSetHeaderSize,
				Reason: fmt.Sprintf("name %d: %v", i, err)}
		}
	}
	return names, nil
}

// CheckCounterName returns an error unless name is a CUPTI metric name:
// 1..127 bytes of [A-Za-z0-9_.].
func CheckCounterName(name string) error {
	if name == "" || len(name) > 127 {
		return fmt.Errorf("%q: must be 1..127 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return fmt.Errorf("%q: byte %d (%#x) is not one of [A-Za-z0-9_.]", name, i, c)
		}
	}
	return nil
}

// Append appends the encoded record to b. The caller keeps the names
// valid (CheckCounterName) and within MaxCounterNamesLen; Decode refuses
// a record that does not.
func (c *CounterSet) Append(b []byte) []byte {
	joined := strings.Join(c.Names, ",")
	size := CounterSetHeaderSize + (len(joined)+7)&^7
	b, r := grow(b, size)
	putPrefix(r, TypeCounterSet, size)
	put64(r, 8, c.IntervalNS)
	copy(r[16:32], c.UUID[:])
	put32(r, 32, c.Device)
	put32(r, 36, CounterSetHash(c.Names))
	put16(r, 40, uint16(len(c.Names)))
	put16(r, 42, uint16(len(joined)))
	copy(r[CounterSetHeaderSize:], joined)
	return b
}
