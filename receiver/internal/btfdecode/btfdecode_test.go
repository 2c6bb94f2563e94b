package btfdecode

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
)

var (
	u8  = &btf.Int{Name: "unsigned char", Size: 1}
	s8  = &btf.Int{Name: "signed char", Size: 1, Encoding: btf.Signed}
	chr = &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
	u32 = &btf.Int{Name: "unsigned int", Size: 4}
	s32 = &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	u64 = &btf.Int{Name: "unsigned long long", Size: 8}
	s64 = &btf.Int{Name: "long long", Size: 8, Encoding: btf.Signed}
)

func member(name string, t btf.Type, bitOff int) btf.Member {
	return btf.Member{Name: name, Type: t, Offset: btf.Bits(bitOff)}
}

func bitfield(name string, t btf.Type, bitOff, bits int) btf.Member {
	return btf.Member{Name: name, Type: t, Offset: btf.Bits(bitOff), BitfieldSize: btf.Bits(bits)}
}

func TestNewErrors(t *testing.T) {
	fwd := &btf.Fwd{Name: "opaque"}
	deep := btf.Type(u32)
	for i := 0; i < MaxDepth+2; i++ {
		deep = &btf.Typedef{Name: "t", Type: deep}
	}
	tests := []struct {
		name string
		typ  btf.Type
		want string
	}{
		{"nil", nil, "nil type"},
		{"void member", &btf.Struct{Name: "s", Size: 4, Members: []btf.Member{member("v", &btf.Void{}, 0)}}, `field "v": void`},
		{"forward declaration", &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{member("p", &btf.Pointer{Target: fwd}, 0), member("o", fwd, 64)}}, `field "o": opaque is only declared, not defined`},
		{"function", &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{member("fn", &btf.Func{Name: "f", Type: &btf.FuncProto{Return: &btf.Void{}}}, 0)}}, `field "fn": cannot decode *btf.Func`},
		{"too deep", &btf.Struct{Name: "s", Size: 4, Members: []btf.Member{member("x", deep, 0)}}, `field "x": nested deeper than 32`},
		{"unaligned member", &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{member("x", u32, 3)}}, `field "x": offset 3 bits is not byte aligned`},
		{"bitfield of float", &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{bitfield("x", &btf.Float{Name: "float", Size: 4}, 0, 3)}}, `field "x": bitfield of *btf.Float`},
	}
	for _, tt := range tests {
		_, err := New(tt.typ)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestDecodeBuiltTypes(t *testing.T) {
	rec := make([]byte, 64)
	for i := range rec {
		rec[i] = byte(i*37 + 11)
	}
	le := binary.LittleEndian
	tests := []struct {
		name  string
		typ   btf.Type
		setup func(b []byte)
		check func(t *testing.T, fs []Field)
	}{
		{
			name: "typedefs and qualifiers resolve",
			typ: &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{
				member("t", &btf.Const{Type: &btf.Typedef{Name: "ts_t", Type: &btf.Volatile{Type: &btf.Typedef{Name: "__u64", Type: u64}}}}, 0)}},
			setup: func(b []byte) { le.PutUint64(b, 123456789) },
			check: func(t *testing.T, fs []Field) {
				if fs[0].Kind != KindUint || fs[0].Uint != 123456789 {
					t.Errorf("got %+v", fs[0])
				}
			},
		},
		{
			name: "odd sizes become bytes",
			typ: &btf.Struct{Name: "s", Size: 32, Members: []btf.Member{
				member("i128", &btf.Int{Name: "__int128", Size: 16, Encoding: btf.Signed}, 0),
				member("ld", &btf.Float{Name: "long double", Size: 16}, 128)}},
			check: func(t *testing.T, fs []Field) {
				if fs[0].Kind != KindBytes || len(fs[0].Bytes) != 16 || fs[1].Kind != KindBytes || fs[1].Bytes[0] != rec[16] {
					t.Errorf("got %+v", fs)
				}
			},
		},
		{
			name: "bitfield spanning nine bytes",
			typ: &btf.Struct{Name: "s", Size: 16, Members: []btf.Member{
				bitfield("lo", u64, 0, 7), bitfield("wide", s64, 7, 64)}},
			setup: func(b []byte) {
				clear(b[:16])
				v := uint64(0x8123_4567_89ab_cdef) // negative as 64-bit signed
				le.PutUint64(b, v<<7|0x55)
				b[8] = byte(v >> 57)
			},
			check: func(t *testing.T, fs []Field) {
				if fs[0].Uint != 0x55 || fs[1].Kind != KindInt || uint64(fs[1].Int) != 0x8123_4567_89ab_cdef {
					t.Errorf("lo %#x wide %#x", fs[0].Uint, uint64(fs[1].Int))
				}
			},
		},
		{
			name: "enums: signed flag, unknown values",
			typ: &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{
				member("e", &btf.Enum{Name: "e", Size: 4, Signed: true, Values: []btf.EnumValue{{Name: "MINUS_ONE", Value: 0xffff_ffff_ffff_ffff}}}, 0),
				member("u", &btf.Enum{Name: "u", Size: 4, Values: []btf.EnumValue{{Name: "ONE", Value: 1}}}, 32)}},
			setup: func(b []byte) { le.PutUint32(b, 0xffff_ffff); le.PutUint32(b[4:], 77) },
			check: func(t *testing.T, fs []Field) {
				if fs[0].Str != "MINUS_ONE" || fs[0].Int != -1 || fs[1].Str != "77" || fs[1].Uint != 77 {
					t.Errorf("got %+v", fs)
				}
			},
		},
		{
			name: "strings stop at NUL or fill the array; byte arrays stay bytes",
			typ: &btf.Struct{Name: "s", Size: 12, Members: []btf.Member{
				member("full", &btf.Array{Type: chr, Nelems: 4}, 0),
				member("sc", &btf.Array{Type: s8, Nelems: 4}, 32),
				member("raw", &btf.Array{Type: &btf.Typedef{Name: "__u8", Type: u8}, Nelems: 4}, 64)}},
			setup: func(b []byte) { copy(b, "abcdx\x00yz\x00\x01\x02\x03") },
			check: func(t *testing.T, fs []Field) {
				if fs[0].Str != "abcd" || fs[1].Str != "x" || fs[2].Kind != KindBytes || string(fs[2].Bytes) != "\x00\x01\x02\x03" {
					t.Errorf("got %+v", fs)
				}
			},
		},
		{
			name: "anonymous members flatten, unnamed bitfields are padding",
			typ: &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{
				bitfield("", u32, 0, 4),
				member("", &btf.Union{Size: 4, Members: []btf.Member{member("as_int", s32, 0), member("as_u", u32, 0)}}, 0),
				member("inner", &btf.Struct{Size: 4, Members: []btf.Member{member("x", u32, 0)}}, 32)}},
			setup: func(b []byte) { le.PutUint32(b, 0xffff_fffe); le.PutUint32(b[4:], 9) },
			check: func(t *testing.T, fs []Field) {
				if len(fs) != 3 || fs[0].Name != "as_int" || fs[0].Int != -2 || fs[1].Name != "as_u" || fs[2].Name != "inner.x" || fs[2].Uint != 9 {
					t.Errorf("got %+v", fs)
				}
			},
		},
		{
			name: "flexible array member adds nothing",
			typ: &btf.Struct{Name: "s", Size: 4, Members: []btf.Member{
				member("n", u32, 0), member("data", &btf.Array{Type: u32, Nelems: 0}, 32)}},
			check: func(t *testing.T, fs []Field) {
				if len(fs) != 1 || fs[0].Name != "n" {
					t.Errorf("got %+v", fs)
				}
			},
		},
		{
			name:  "bool",
			typ:   &btf.Struct{Name: "s", Size: 1, Members: []btf.Member{member("ok", &btf.Int{Name: "_Bool", Size: 1, Encoding: btf.Bool}, 0)}},
			setup: func(b []byte) { b[0] = 1 },
			check: func(t *testing.T, fs []Field) {
				if fs[0].Kind != KindBool || fs[0].Uint != 1 {
					t.Errorf("got %+v", fs)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			b := append([]byte(nil), rec...)
			if tt.setup != nil {
				tt.setup(b)
			}
			fs, err := d.Decode(b[:d.Size()])
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, fs)
		})
	}
}

func TestManyFieldsFoldIntoBytes(t *testing.T) {
	inner := &btf.Struct{Name: "pair", Size: 8, Members: []btf.Member{member("a", u32, 0), member("b", u32, 32)}}
	typ := &btf.Struct{Name: "s", Size: 8 + 8*MaxFields, Members: []btf.Member{
		member("head", u64, 0),
		member("pairs", &btf.Array{Type: inner, Nelems: MaxFields}, 64)}}
	d, err := New(typ)
	if err != nil {
		t.Fatal(err)
	}
	fs := d.Fields()
	if len(fs) != 2 || fs[1].Kind != KindBytes || fs[1].Size != 8*MaxFields {
		t.Fatalf("fields %+v, want head and pairs as %d bytes", fs, 8*MaxFields)
	}
}

func TestSpanHint(t *testing.T) {
	st := func(names ...string) btf.Type {
		s := &btf.Struct{Name: "s", Size: uint32(8 * len(names))}
		for i, n := range names {
			s.Members = append(s.Members, member(n, u64, 64*i))
		}
		return s
	}
	tests := []struct {
		name       string
		typ        btf.Type
		start, end string
	}{
		{"start/end", st("pid", "start", "end"), "start", "end"},
		{"ns suffix wins", st("start", "end", "start_ns", "end_ns"), "start_ns", "end_ns"},
		{"ts_ prefix", st("ts_start", "ts_end"), "ts_start", "ts_end"},
		{"begin/finish", st("begin", "finish"), "begin", "finish"},
		{"case", st("Start", "END"), "Start", "END"},
		{"nested", &btf.Struct{Name: "s", Size: 16, Members: []btf.Member{member("t", st("begin", "end"), 0)}}, "t.begin", "t.end"},
		{"only start", st("start", "count"), "", ""},
		{"none", st("a", "b"), "", ""},
		{"32-bit fields are not timestamps", &btf.Struct{Name: "s", Size: 8, Members: []btf.Member{member("start", u32, 0), member("end", u32, 32)}}, "", ""},
	}
	for _, tt := range tests {
		d, err := New(tt.typ)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		h := d.Span()
		fs := d.Fields()
		switch {
		case tt.start == "" && h.OK:
			t.Errorf("%s: hint %+v, want none", tt.name, h)
		case tt.start != "" && (!h.OK || fs[h.Start].Name != tt.start || fs[h.End].Name != tt.end):
			t.Errorf("%s: hint %+v, want %s/%s", tt.name, h, tt.start, tt.end)
		}
	}
}

// fuzzType is a struct with every kind of field the decoder handles.
var fuzzType = &btf.Struct{Name: "fz", Size: 40, Members: []btf.Member{
	member("start", u64, 0),
	bitfield("bf", s64, 64, 13),
	bitfield("bf2", u64, 77, 50),
	member("s", &btf.Array{Type: chr, Nelems: 8}, 128),
	member("e", &btf.Enum{Name: "e", Size: 4, Values: []btf.EnumValue{{Name: "A", Value: 0}}}, 192),
	member("f", &btf.Float{Name: "float", Size: 4}, 224),
	member("d", &btf.Float{Name: "double", Size: 8}, 256),
}}

func FuzzDecode(f *testing.F) {
	f.Add(make([]byte, 40))
	f.Add([]byte("short"))
	d, err := New(fuzzType)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := d.Decode(b)
		if len(b) >= d.Size() {
			if err != nil || len(fs) != 7 {
				t.Fatalf("full record: %d fields, %v", len(fs), err)
			}
			if fs[1].Int < -(1<<12) || fs[1].Int >= 1<<12 || fs[2].Uint >= 1<<50 {
				t.Fatalf("bitfield out of range: %+v", fs[1:3])
			}
		} else if err == nil {
			t.Fatalf("short record of %d bytes decoded", len(b))
		}
	})
}

func TestDecodePrefix(t *testing.T) {
	d, err := New(fuzzType)
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 40)
	binary.LittleEndian.PutUint64(rec, 77)
	copy(rec[16:], "abc")
	tests := []struct {
		n       int
		present string // fields not Absent
		cut     int
	}{
		{40, "start,bf,bf2,s,e,f,d", 0},
		{64, "start,bf,bf2,s,e,f,d", 0},
		{32, "start,bf,bf2,s,e,f", 0},
		{30, "start,bf,bf2,s,e", 1}, // f (bytes 28..32) cut
		{12, "start,bf", 1},         // bf2 (bytes 9..16) cut
		{8, "start", 0},
		{0, "", 0},
	}
	for _, tt := range tests {
		b := rec
		if tt.n > len(rec) {
			b = make([]byte, tt.n)
			copy(b, rec)
		}
		fs, cut := d.DecodePrefix(nil, b[:tt.n])
		var got []string
		for _, f := range fs {
			if !f.Absent {
				got = append(got, f.Name)
			} else if f.Uint != 0 || f.Str != "" || f.Bytes != nil {
				t.Errorf("%d bytes: absent field %s has a value: %+v", tt.n, f.Name, f)
			}
		}
		if len(fs) != 7 || strings.Join(got, ",") != tt.present || cut != tt.cut {
			t.Errorf("%d bytes: %d fields, present %q cut %d; want 7, %q, %d", tt.n, len(fs), strings.Join(got, ","), cut, tt.present, tt.cut)
		}
		if tt.n >= 8 && fs[0].Uint != 77 {
			t.Errorf("%d bytes: start = %d", tt.n, fs[0].Uint)
		}
		if tt.n >= 24 && fs[3].Str != "abc" {
			t.Errorf("%d bytes: s = %q", tt.n, fs[3].Str)
		}
	}
}
