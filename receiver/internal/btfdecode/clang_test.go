package btfdecode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// loadSpec compiles testdata/records.bpf.c with clang into a temporary
// directory and loads it with cilium/ebpf.
func loadSpec(t testing.TB) *ebpf.CollectionSpec {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to compile testdata/records.bpf.c and was not found on PATH: %v (apt-get install clang)", err)
	}
	obj := filepath.Join(t.TempDir(), "records.o")
	out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-c", "testdata/records.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatalf("loading %s: %v", obj, err)
	}
	return spec
}

// event mirrors struct event of records.bpf.c byte for byte (x86-64/BPF
// alignment; blank fields are the compiler's padding).
type event struct {
	StartNs, EndNs uint64
	Pid            uint32
	Tid            int32
	Comm           [16]byte
	Raw            [4]byte
	Phase          uint32
	Block          [3]uint32
	_              [4]byte
	Flags          uint64
	Ratio          float32
	_              [4]byte
	Score          float64
	Ok             uint8
	_              [1]byte
	Small          int16
	Tiny           int8
	_              [3]byte
	V              uint64
	Hist           [3]uint32
	Grid           [6]uint32
	_              [4]byte
	Ptr            uint64
	A, B           uint32
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// flags packs struct flags: ready:1, kind:3, delta:5 (signed), big:40, d:4.
func flags(ready, kind uint64, delta int64, big uint64, d int64) uint64 {
	return ready | kind<<1 | (uint64(delta)&0x1f)<<4 | (big&(1<<40-1))<<9 | (uint64(d)&0xf)<<49
}

func sampleEvent() event {
	e := event{
		StartNs: 1_700_000_000_000_000_000, EndNs: 1_700_000_000_000_123_456,
		Pid: 4242, Tid: -7,
		Raw:   [4]byte{0xde, 0xad, 0, 0xef},
		Phase: 2, Block: [3]uint32{32, 4, 1},
		Flags: flags(1, 5, -3, 0xab_cdef_0123, -2),
		Ratio: 0.5, Score: -1.25, Ok: 1, Small: -300, Tiny: -5,
		V:    math.Float64bits(2.5),
		Hist: [3]uint32{10, 20, 30},
		Grid: [6]uint32{1, 2, 3, 4, 5, 6},
		Ptr:  0x7fff_0000_1000, A: 11, B: 12,
	}
	copy(e.Comm[:], "vectorAdd\x00junk")
	return e
}

func TestDecodeClangEvent(t *testing.T) {
	spec := loadSpec(t)
	d, err := New(spec.Maps["events"].Value)
	if err != nil {
		t.Fatal(err)
	}
	rec := encode(t, sampleEvent())
	if d.Size() != len(rec) {
		t.Fatalf("BTF size %d, Go mirror %d bytes: the mirror's layout is wrong", d.Size(), len(rec))
	}
	fields, err := d.Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Field{}
	var order []string
	for _, f := range fields {
		got[f.Name] = f
		order = append(order, f.Name)
	}
	tests := []struct {
		name string
		want Field
	}{
		{"start_ns", Field{Kind: KindUint, Uint: 1_700_000_000_000_000_000}},
		{"end_ns", Field{Kind: KindUint, Uint: 1_700_000_000_000_123_456}},
		{"pid", Field{Kind: KindUint, Uint: 4242}},
		{"tid", Field{Kind: KindInt, Int: -7}},
		{"comm", Field{Kind: KindString, Str: "vectorAdd"}},
		{"raw", Field{Kind: KindBytes, Bytes: []byte{0xde, 0xad, 0, 0xef}}},
		{"phase", Field{Kind: KindEnum, Str: "PHASE_RUNNING", Uint: 2, Int: 2}},
		{"block.x", Field{Kind: KindUint, Uint: 32}},
		{"block.y", Field{Kind: KindUint, Uint: 4}},
		{"block.z", Field{Kind: KindUint, Uint: 1}},
		{"f.ready", Field{Kind: KindUint, Uint: 1}},
		{"f.kind", Field{Kind: KindUint, Uint: 5}},
		{"f.delta", Field{Kind: KindInt, Int: -3}},
		{"f.big", Field{Kind: KindUint, Uint: 0xab_cdef_0123}},
		{"f.d", Field{Kind: KindEnum, Str: "DELTA_NEG", Int: -2}},
		{"ratio", Field{Kind: KindFloat, Float: 0.5}},
		{"score", Field{Kind: KindFloat, Float: -1.25}},
		{"ok", Field{Kind: KindBool, Uint: 1}},
		{"small", Field{Kind: KindInt, Int: -300}},
		{"tiny", Field{Kind: KindInt, Int: -5}},
		{"v.u", Field{Kind: KindUint, Uint: math.Float64bits(2.5)}},
		{"v.d", Field{Kind: KindFloat, Float: 2.5}},
		{"hist[0]", Field{Kind: KindUint, Uint: 10}},
		{"hist[2]", Field{Kind: KindUint, Uint: 30}},
		{"grid[0].x", Field{Kind: KindUint, Uint: 1}},
		{"grid[1].z", Field{Kind: KindUint, Uint: 6}},
		{"ptr", Field{Kind: KindUint, Uint: 0x7fff_0000_1000}},
		{"a", Field{Kind: KindUint, Uint: 11}},
		{"b", Field{Kind: KindUint, Uint: 12}},
	}
	for _, tt := range tests {
		f, ok := got[tt.name]
		if !ok {
			t.Errorf("no field %q; fields: %v", tt.name, order)
			continue
		}
		w := tt.want
		if f.Kind != w.Kind {
			t.Errorf("%s: kind %v, want %v", tt.name, f.Kind, w.Kind)
		}
		switch w.Kind {
		case KindInt:
			if f.Int != w.Int {
				t.Errorf("%s = %d, want %d", tt.name, f.Int, w.Int)
			}
		case KindUint, KindBool:
			if f.Uint != w.Uint {
				t.Errorf("%s = %#x, want %#x", tt.name, f.Uint, w.Uint)
			}
		case KindFloat:
			if f.Float != w.Float {
				t.Errorf("%s = %v, want %v", tt.name, f.Float, w.Float)
			}
		case KindString:
			if f.Str != w.Str {
				t.Errorf("%s = %q, want %q", tt.name, f.Str, w.Str)
			}
		case KindBytes:
			if !bytes.Equal(f.Bytes, w.Bytes) {
				t.Errorf("%s = %x, want %x", tt.name, f.Bytes, w.Bytes)
			}
		case KindEnum:
			if f.Str != w.Str || f.Int != w.Int {
				t.Errorf("%s = %q (%d), want %q (%d)", tt.name, f.Str, f.Int, w.Str, w.Int)
			}
		}
	}
	if n := len(fields); n != 34 {
		t.Errorf("%d fields, want 34: %v", n, order)
	}
	h := d.Span()
	if !h.OK || fields[h.Start].Name != "start_ns" || fields[h.End].Name != "end_ns" {
		t.Errorf("span hint %+v, want start_ns/end_ns", h)
	}
}

func TestDecodeClangShortRecord(t *testing.T) {
	spec := loadSpec(t)
	d, err := New(spec.Maps["events"].Value)
	if err != nil {
		t.Fatal(err)
	}
	rec := encode(t, sampleEvent())
	tests := []struct {
		cut   int
		field string
		off   int
	}{
		{0, "start_ns", 0},
		{30, "comm", 24},
		{66, "f.big", 65},
		{159, "b", 156},
	}
	for _, tt := range tests {
		_, err := d.Decode(rec[:tt.cut])
		var se *ShortError
		if !errors.As(err, &se) {
			t.Errorf("cut at %d: error %v, want *ShortError", tt.cut, err)
			continue
		}
		if se.Field != tt.field || se.Offset != tt.off || se.Have != tt.cut {
			t.Errorf("cut at %d: %v, want field %q at offset %d", tt.cut, se, tt.field, tt.off)
		}
	}
	// Longer records (ring-buffer padding) decode.
	if _, err := d.Decode(append(rec, 0, 0, 0, 0, 0, 0, 0, 0)); err != nil {
		t.Errorf("padded record: %v", err)
	}
}

func TestDecodeClangCounterAndBig(t *testing.T) {
	spec := loadSpec(t)
	c, err := New(spec.Maps["counters"].Value)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := c.Decode(encode(t, [3]uint64{100, 250, 7}))
	if err != nil {
		t.Fatal(err)
	}
	h := c.Span()
	if !h.OK || fields[h.Start].Uint != 100 || fields[h.End].Uint != 250 {
		t.Errorf("counter span hint %+v over %v", h, fields)
	}

	b, err := New(spec.Maps["bigs"].Value)
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, b.Size())
	binary.LittleEndian.PutUint64(rec[8:], 99)
	copy(rec[16000:], "tail")
	fields, err = b.Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 2 || fields[0].Kind != KindBytes || len(fields[0].Bytes) != 16000 || fields[1].Str != "tail" {
		t.Fatalf("big record: %d fields, want slots as 16000 bytes and tail string", len(fields))
	}
	if b.Span().OK {
		t.Errorf("big record has no timestamps, got span hint %+v", b.Span())
	}

	// The program's BTF also carries the types, for ring buffer records.
	var ev *btf.Struct
	if err := spec.Types.TypeByName("event", &ev); err != nil {
		t.Fatal(err)
	}
	if d, err := New(ev); err != nil || d.Size() != 160 {
		t.Fatalf("event from program BTF: size %v, err %v", d, err)
	}
}

func BenchmarkDecodeEvent(b *testing.B) {
	spec := loadSpec(b)
	d, err := New(spec.Maps["events"].Value)
	if err != nil {
		b.Fatal(err)
	}
	rec := encode(b, sampleEvent())
	buf := make([]Field, 0, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		buf, err = d.DecodeInto(buf, rec)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkDecodeCounter(b *testing.B) {
	spec := loadSpec(b)
	d, err := New(spec.Maps["counters"].Value)
	if err != nil {
		b.Fatal(err)
	}
	rec := encode(b, [3]uint64{1, 2, 3})
	buf := make([]Field, 0, 4)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = d.DecodeInto(buf, rec)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
