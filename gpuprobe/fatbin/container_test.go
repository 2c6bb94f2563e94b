package fatbin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// testEntry describes an entry for buildContainer, which lays it out the
// way fatbinary does (see doc.go).
type testEntry struct {
	kind    Kind
	arch    uint32
	flags   Flags
	name    string
	options string
	data    []byte // the image; compressed here when flags ask for it
}

func align8(n int) int { return (n + 7) &^ 7 }

func buildEntry(t testing.TB, te testEntry) []byte {
	payload := te.data
	var csize, usize int
	switch {
	case te.flags&FlagLZ4 != 0:
		buf := make([]byte, lz4.CompressBlockBound(len(te.data)))
		n, err := lz4.CompressBlock(te.data, buf, nil)
		if err != nil || n == 0 {
			t.Fatalf("lz4: %d, %v", n, err)
		}
		payload, csize, usize = buf[:n], n, len(te.data)
	case te.flags&FlagZstd != 0:
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		payload = enc.EncodeAll(te.data, nil)
		csize, usize = len(payload), len(te.data)
	}
	hs := EntryHeaderSize
	var extra []byte
	var optRec, nameOff uint32
	if te.kind == KindPTX || te.options != "" {
		optRec = uint32(hs)
		extra = make([]byte, 8)
		if te.options != "" {
			binary.LittleEndian.PutUint32(extra[0:], uint32(hs+8))
			binary.LittleEndian.PutUint32(extra[4:], uint32(len(te.options)))
			extra = append(extra, te.options...)
			extra = append(extra, make([]byte, align8(len(te.options)+1)-len(te.options))...)
		}
	}
	if te.name != "" {
		nameOff = uint32(hs + len(extra))
		extra = append(extra, te.name...)
		extra = append(extra, make([]byte, align8(len(te.name)+1)-len(te.name))...)
	}
	hdr := make([]byte, hs)
	le := binary.LittleEndian
	le.PutUint16(hdr[0:], uint16(te.kind))
	le.PutUint16(hdr[2:], 0x0101)
	le.PutUint32(hdr[4:], uint32(hs+len(extra)))
	le.PutUint64(hdr[8:], uint64(align8(len(payload))))
	le.PutUint32(hdr[16:], uint32(csize))
	le.PutUint32(hdr[20:], optRec)
	le.PutUint16(hdr[24:], 8)
	le.PutUint16(hdr[26:], 7)
	le.PutUint32(hdr[28:], te.arch)
	le.PutUint32(hdr[32:], nameOff)
	le.PutUint32(hdr[36:], uint32(len(te.name)))
	le.PutUint64(hdr[40:], uint64(te.flags))
	le.PutUint64(hdr[56:], uint64(usize))
	out := append(hdr, extra...)
	out = append(out, payload...)
	return append(out, make([]byte, align8(len(payload))-len(payload))...)
}

func buildContainer(t testing.TB, entries ...testEntry) []byte {
	var body []byte
	for _, e := range entries {
		body = append(body, buildEntry(t, e)...)
	}
	hdr := make([]byte, ContainerHeaderSize)
	binary.LittleEndian.PutUint32(hdr[0:], ContainerMagic)
	binary.LittleEndian.PutUint16(hdr[4:], 1)
	binary.LittleEndian.PutUint16(hdr[6:], ContainerHeaderSize)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(body)))
	return append(hdr, body...)
}

const samplePTX = "//\n// test\n//\n\n.version 7.8\n.target sm_80\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n"

func TestParseContainer(t *testing.T) {
	ptxNUL := append([]byte(samplePTX), 0)
	cubin := bytes.Repeat([]byte("\x7fELF-cubin-bytes"), 40)
	tests := []struct {
		name    string
		entries []testEntry
		want    []Entry // fields compared: Kind, Arch, Name, Options, compression via Flags
		data    [][]byte
	}{
		{
			name:    "plain PTX and ELF",
			entries: []testEntry{{kind: KindPTX, arch: 80, flags: Flag64Bit | FlagLinux, data: ptxNUL}, {kind: KindELF, arch: 80, flags: Flag64Bit | FlagLinux, data: cubin}},
			want:    []Entry{{Kind: KindPTX, Arch: 80, Flags: 0x11}, {Kind: KindELF, Arch: 80, Flags: 0x11}},
			data:    [][]byte{[]byte(samplePTX), cubin},
		},
		{
			name:    "LZ4",
			entries: []testEntry{{kind: KindPTX, arch: 90, flags: 0x2011, data: ptxNUL}, {kind: KindELF, arch: 90, flags: 0x2011, data: cubin}},
			want:    []Entry{{Kind: KindPTX, Arch: 90, Flags: 0x2011}, {Kind: KindELF, Arch: 90, Flags: 0x2011}},
			data:    [][]byte{[]byte(samplePTX), cubin},
		},
		{
			name:    "ZSTD (CUDA 12.8+ layout, synthesised: nvcc 11.8 cannot write it)",
			entries: []testEntry{{kind: KindPTX, arch: 120, flags: 0x8011, data: ptxNUL}, {kind: KindELF, arch: 100, flags: 0x8011, data: cubin}},
			want:    []Entry{{Kind: KindPTX, Arch: 120, Flags: 0x8011}, {Kind: KindELF, Arch: 100, Flags: 0x8011}},
			data:    [][]byte{[]byte(samplePTX), cubin},
		},
		{
			name:    "name and options",
			entries: []testEntry{{kind: KindPTX, arch: 52, flags: 0x11, name: "hello.cu", options: "-O2 -v", data: ptxNUL}, {kind: KindELF, arch: 52, flags: 0x11, name: "hello.cu", data: cubin}},
			want:    []Entry{{Kind: KindPTX, Arch: 52, Flags: 0x11, Name: "hello.cu", Options: "-O2 -v"}, {Kind: KindELF, Arch: 52, Flags: 0x11, Name: "hello.cu"}},
			data:    [][]byte{[]byte(samplePTX), cubin},
		},
		{
			name:    "empty container",
			entries: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildContainer(t, tt.entries...)
			c, err := ParseContainer(b, 0x100)
			if err != nil {
				t.Fatal(err)
			}
			if c.Offset != 0x100 || c.End() != 0x100+int64(len(b)) {
				t.Errorf("container offset %#x end %#x, want 0x100 and %#x", c.Offset, c.End(), 0x100+len(b))
			}
			if len(c.Entries) != len(tt.want) {
				t.Fatalf("%d entries, want %d", len(c.Entries), len(tt.want))
			}
			for i, e := range c.Entries {
				w := tt.want[i]
				if e.Kind != w.Kind || e.Arch != w.Arch || e.Flags != w.Flags || e.Name != w.Name || e.Options != w.Options {
					t.Errorf("entry %d: %s %s flags %#x name %q options %q, want %s %d %#x %q %q",
						i, e.Kind, e.ArchName(), uint64(e.Flags), e.Name, e.Options, w.Kind, w.Arch, uint64(w.Flags), w.Name, w.Options)
				}
				if e.Major != 7 || e.Minor != 8 {
					t.Errorf("entry %d: version %d.%d, want 7.8", i, e.Major, e.Minor)
				}
				got, err := e.Data()
				if err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				if !bytes.Equal(got, tt.data[i]) {
					t.Errorf("entry %d data: got %d bytes %q..., want %d bytes", i, len(got), got[:min(len(got), 20)], len(tt.data[i]))
				}
			}
		})
	}
}

// put returns a copy of b with v written little-endian at off.
func put(b []byte, off int, v any) []byte {
	c := bytes.Clone(b)
	switch v := v.(type) {
	case uint16:
		binary.LittleEndian.PutUint16(c[off:], v)
	case uint32:
		binary.LittleEndian.PutUint32(c[off:], v)
	case uint64:
		binary.LittleEndian.PutUint64(c[off:], v)
	}
	return c
}

func TestParseContainerErrors(t *testing.T) {
	good := buildContainer(t,
		testEntry{kind: KindPTX, arch: 80, flags: 0x2011, name: "x.cu", data: append([]byte(samplePTX), 0)},
		testEntry{kind: KindELF, arch: 80, flags: 0x11, data: make([]byte, 40)})
	e0 := ContainerHeaderSize // first entry header
	tests := []struct {
		name   string
		in     []byte
		offset int64  // where the error must point
		want   string // in the message
	}{
		{"empty", nil, 0, "truncated container header"},
		{"short header", good[:10], 0, "truncated container header"},
		{"bad magic", put(good, 0, uint32(0x12345678)), 0, "container magic"},
		{"header size too small", put(good, 6, uint16(8)), 6, "container header size 8"},
		{"size past end", put(good, 8, uint64(len(good))), 8, "truncated"},
		{"huge size", put(good, 8, ^uint64(0)), 8, "truncated"},
		{"truncated entry header", put(good, 8, uint64(30)), int64(e0), "truncated entry header"},
		{"entry header size small", put(good, e0+4, uint32(12)), int64(e0 + 4), "entry header size 12"},
		{"entry header size huge", put(good, e0+4, uint32(1<<20)), int64(e0 + 4), "entry header size"},
		{"entry header past container", put(good, e0+4, uint32(60000)), int64(e0 + 4), "runs past the container"},
		{"payload past container", put(good, e0+8, uint64(1<<40)), int64(e0 + 8), "payload of"},
		{"name past header", put(good, e0+36, uint32(500)), int64(e0 + 32), "runs past the"},
		{"options record past header", put(good, e0+20, uint32(200)), int64(e0 + 20), "options record"},
		{"both compressions", put(good, e0+40, uint64(0xa011)), int64(e0 + 40), "both LZ4 and ZSTD"},
		{"compressed size past payload", put(good, e0+16, uint32(1<<20)), int64(e0 + 16), "compressed size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseContainer(tt.in, 0)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FormatError", err)
			}
			if fe.Offset != tt.offset || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q at %#x, want %q at %#x", err, fe.Offset, tt.want, tt.offset)
			}
		})
	}
}

func TestDataErrors(t *testing.T) {
	ptx := append([]byte(samplePTX), 0)
	lz := buildContainer(t, testEntry{kind: KindPTX, arch: 80, flags: 0x2011, data: ptx})
	zs := buildContainer(t, testEntry{kind: KindPTX, arch: 80, flags: 0x8011, data: ptx})
	// Above 1 KiB the encoder writes the frame content size, which is
	// checked against the entry header before anything is allocated.
	big := append(bytes.Repeat([]byte("// padding line\n"), 100), ptx...)
	zsBig := buildContainer(t, testEntry{kind: KindPTX, arch: 80, flags: 0x8011, data: big})
	e0 := ContainerHeaderSize
	payload := e0 + EntryHeaderSize + 8 // PTX entries carry an 8-byte options record
	tests := []struct {
		name   string
		in     []byte
		offset int64
		want   string
	}{
		{"lz4 size mismatch", put(lz, e0+56, uint64(len(ptx)+5)), int64(payload), "inflates to"},
		{"lz4 garbage", put(lz, payload, uint64(0xffffffffffffffff)), int64(payload), "LZ4 block"},
		{"zstd larger than the frame", put(zs, e0+56, uint64(len(ptx)+1)), int64(payload), "inflates to"},
		{"zstd smaller than the frame", put(zs, e0+56, uint64(len(ptx)-1)), int64(payload), "zstd frame of"},
		{"zstd content size disagrees", put(zsBig, e0+56, uint64(len(big)-1)), int64(payload), "zstd frame holds"},
		{"zstd bad frame", put(zs, payload, uint32(0x11223344)), int64(payload), "zstd frame header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseContainer(tt.in, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Entries[0].Data()
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FormatError", err)
			}
			if fe.Offset != tt.offset || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q at %#x, want %q at %#x", err, fe.Offset, tt.want, tt.offset)
			}
		})
	}
}

func TestParseSequence(t *testing.T) {
	a := buildContainer(t, testEntry{kind: KindELF, arch: 52, flags: 0x11, data: make([]byte, 16)})
	b := buildContainer(t, testEntry{kind: KindPTX, arch: 90, flags: 0x2011, data: append([]byte(samplePTX), 0)})
	pad := make([]byte, 8)
	tests := []struct {
		name    string
		in      []byte
		offsets []int64
		err     string
	}{
		{"back to back", append(bytes.Clone(a), b...), []int64{0, int64(len(a))}, ""},
		{"zero padding between", append(append(bytes.Clone(a), pad...), b...), []int64{0, int64(len(a) + 8)}, ""},
		{"garbage after", append(bytes.Clone(a), bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 4)...), nil, "container magic"},
		{"nothing", make([]byte, 32), nil, "no fatbin container"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, err := Parse(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, c := range cs {
				got = append(got, c.Offset)
			}
			if !equal(got, tt.offsets) {
				t.Errorf("containers at %v, want %v", got, tt.offsets)
			}
		})
	}
}

func TestScan(t *testing.T) {
	a := buildContainer(t, testEntry{kind: KindELF, arch: 52, flags: 0x11, data: make([]byte, 16)})
	// A container embedded in other data at offset 24, a false magic at
	// 8 (whose header does not parse) and trailing bytes.
	in := make([]byte, 24)
	binary.LittleEndian.PutUint32(in[8:], ContainerMagic)
	in = append(in, a...)
	in = append(in, []byte("trailing data...")...)
	cs := Scan(in, 0x1000)
	if len(cs) != 1 || cs[0].Offset != 0x1000+24 {
		t.Fatalf("Scan found %d containers (%v), want one at %#x", len(cs), cs, 0x1000+24)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClassify(t *testing.T) {
	cubin := make([]byte, 64)
	copy(cubin, "\x7fELF\x02\x01\x01\x33\x07")
	binary.LittleEndian.PutUint16(cubin[18:], emCUDA)
	binary.LittleEndian.PutUint32(cubin[48:], 0x00500550)
	host := bytes.Clone(cubin)
	binary.LittleEndian.PutUint16(host[18:], 62)
	wrapper := make([]byte, WrapperSize)
	binary.LittleEndian.PutUint32(wrapper, WrapperMagic)
	tests := []struct {
		name string
		in   []byte
		want ImageKind
	}{
		{"wrapper", wrapper, ImageWrapper},
		{"container", buildContainer(t), ImageFatbin},
		{"cubin", cubin, ImageCubin},
		{"host ELF", host, ImageHostELF},
		{"PTX", []byte(samplePTX), ImagePTX},
		{"PTX with NUL", append([]byte(".version 8.0\n.target sm_90\n"), 0), ImagePTX},
		{"PTX after block comment", []byte("/* hi */ .version 7.0"), ImagePTX},
		{"text that is not PTX", []byte("hello world\n"), ImageUnknown},
		{"unterminated comment", []byte("/* .version"), ImageUnknown},
		{"binary", []byte{1, 2, 3, 4, 5}, ImageUnknown},
		{"empty", nil, ImageUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.in); got != tt.want {
				t.Errorf("Classify = %s, want %s", got, tt.want)
			}
		})
	}
	f, err := ParseImage(cubin)
	if err != nil {
		t.Fatal(err)
	}
	if es := f.Entries(); len(es) != 1 || es[0].Arch != 0x50 || es[0].Kind != KindELF {
		t.Errorf("cubin image: entries %+v, want one sm_80 ELF", es)
	}
	if _, err := f.PTX(); !errors.Is(err, ErrNoPTX) {
		t.Errorf("cubin image PTX(): %v, want ErrNoPTX", err)
	}
	for _, bad := range [][]byte{wrapper, host, []byte("nope")} {
		if _, err := ParseImage(bad); err == nil {
			t.Errorf("ParseImage(% x...) succeeded, want an error", bad[:4])
		}
	}
}

func TestFileName(t *testing.T) {
	tests := []struct {
		e    Entry
		n    int
		want string
	}{
		{Entry{Kind: KindPTX, Arch: 80}, 1, "va.1.sm_80.ptx"},
		{Entry{Kind: KindELF, Arch: 90}, 3, "va.3.sm_90.cubin"},
		{Entry{Kind: KindPTX, Arch: 80, Name: "dir/hello.cu"}, 2, "hello.sm_80.ptx"},
	}
	for _, tt := range tests {
		if got := tt.e.FileName("va", tt.n); got != tt.want {
			t.Errorf("FileName = %q, want %q", got, tt.want)
		}
	}
}
