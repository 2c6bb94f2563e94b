package fatbin

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
)

// testCubin is a hand-built cubin: a string table, a symbol table and a
// section name table, with the section headers last. Its e_version holds a
// CUDA version, as nvcc's cubins do.
type testCubin struct {
	data             []byte
	shoff            int // file offset of the section headers
	symtab, strtab   int // file offsets of the two tables' contents
	symtabHdr, names int // section header offset of .symtab; offset of the names
}

// Section indexes of testCubin.
const (
	tcShstrtab = 1
	tcStrtab   = 2
	tcSymtab   = 3
)

func newTestCubin(names ...string) *testCubin {
	le := binary.LittleEndian
	c := &testCubin{}
	b := make([]byte, 64)
	copy(b, "\x7fELF\x02\x01\x01\x33\x07")
	le.PutUint16(b[16:], 2) // ET_EXEC
	le.PutUint16(b[18:], emCUDA)
	le.PutUint32(b[20:], 128) // e_version: the CUDA version
	le.PutUint32(b[48:], 0x00500550)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[58:], 64)
	le.PutUint16(b[60:], 4)
	le.PutUint16(b[62:], tcShstrtab)
	// .strtab: "\0" then the names.
	c.strtab = len(b)
	b = append(b, 0)
	var nameOff []int
	for _, n := range names {
		nameOff = append(nameOff, len(b)-c.strtab)
		b = append(b, n...)
		b = append(b, 0)
	}
	strtabSize := len(b) - c.strtab
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	// .symtab: the null symbol, then one per name: names starting with
	// "_Z" are kernels (STT_FUNC, STO_ENTRY), "obj" a STT_OBJECT with the
	// entry bit, the rest plain functions.
	c.symtab = len(b)
	b = append(b, make([]byte, 24)...)
	for i, n := range names {
		sym := make([]byte, 24)
		le.PutUint32(sym, uint32(nameOff[i]))
		sym[4] = 0x12 // STB_GLOBAL, STT_FUNC
		if strings.HasPrefix(n, "_Z") {
			sym[5] = stoEntry
		}
		if n == "obj" {
			sym[4], sym[5] = 0x11, stoEntry // STT_OBJECT
		}
		b = append(b, sym...)
	}
	symtabSize := len(b) - c.symtab
	shstr := len(b)
	b = append(b, "\x00.shstrtab\x00.strtab\x00.symtab\x00"...)
	shstrSize := len(b) - shstr
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	c.shoff = len(b)
	le.PutUint64(b[40:], uint64(c.shoff))
	sec := func(name, typ, off, size, link, entsize int) {
		h := make([]byte, 64)
		le.PutUint32(h, uint32(name))
		le.PutUint32(h[4:], uint32(typ))
		le.PutUint64(h[24:], uint64(off))
		le.PutUint64(h[32:], uint64(size))
		le.PutUint32(h[40:], uint32(link))
		le.PutUint64(h[56:], uint64(entsize))
		b = append(b, h...)
	}
	sec(0, 0, 0, 0, 0, 0)
	sec(1, 3, shstr, shstrSize, 0, 0)
	sec(11, 3, c.strtab, strtabSize, 0, 0)
	c.symtabHdr = len(b)
	sec(19, 2, c.symtab, symtabSize, tcStrtab, 24)
	c.data = b
	return c
}

func TestCubinKernelsSynthetic(t *testing.T) {
	le := binary.LittleEndian
	names := []string{"_Z1kv", "helper", "obj", "_Z1jPi"}
	c := newTestCubin(names...)
	got, err := CubinKernels(c.data)
	if err != nil || !slices.Equal(got, []string{"_Z1kv", "_Z1jPi"}) {
		t.Fatalf("CubinKernels = %q, %v; want the two entry functions", got, err)
	}
	sym := func(i int) int { return c.symtab + 24*i }
	tests := []struct {
		name    string
		corrupt func(b []byte) []byte
		offset  int64
		want    string
	}{
		{"not a cubin", func(b []byte) []byte { le.PutUint16(b[18:], 62); return b }, 0, "not a cubin"},
		{"32-bit", func(b []byte) []byte { b[4] = 1; return b }, 4, "64-bit little-endian"},
		{"short header", func(b []byte) []byte { return b[:40] }, 4, "64-bit little-endian"},
		{"program headers past the end", func(b []byte) []byte { le.PutUint16(b[0x36:], 56); le.PutUint16(b[0x38:], 1000); return b }, 0x20, "1000 program headers"},
		{"program header size", func(b []byte) []byte { le.PutUint16(b[0x36:], 8); le.PutUint16(b[0x38:], 1); return b }, 0x36, "program header size 8"},
		{"compressed symbols", func(b []byte) []byte { b[c.symtabHdr+9] = 0x08; return b }, int64(c.symtabHdr + 8), "compressed"},
		{"section header size", func(b []byte) []byte { le.PutUint16(b[0x3a:], 40); return b }, 0x3a, "section header size 40"},
		{"headers past the end", func(b []byte) []byte { le.PutUint16(b[0x3c:], 200); return b }, 0x28, "200 section headers"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, 0x28, "run past"},
		{"symbol size", func(b []byte) []byte { le.PutUint64(b[c.symtabHdr+56:], 16); return b }, int64(c.symtabHdr + 56), "symbol size 16"},
		{"string table link", func(b []byte) []byte { le.PutUint32(b[c.symtabHdr+40:], 9); return b }, int64(c.symtabHdr + 40), "links to section 9 of 4"},
		{"symbols past the end", func(b []byte) []byte { le.PutUint64(b[c.symtabHdr+32:], 1<<40); return b }, int64(c.symtabHdr), "runs past"},
		{"name outside", func(b []byte) []byte { le.PutUint32(b[sym(1):], 1<<20); return b }, int64(sym(1)), "outside the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CubinKernels(tt.corrupt(slices.Clone(c.data)))
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Offset != tt.offset || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want a FormatError at %#x with %q", err, tt.offset, tt.want)
			}
		})
	}
	long := newTestCubin("_Z" + strings.Repeat("x", 5000))
	var fe *FormatError
	if _, err := CubinKernels(long.data); !errors.As(err, &fe) || fe.Offset != int64(long.symtab+24) || !strings.Contains(err.Error(), "over the 4096-byte limit") {
		t.Errorf("long name: %v, want the name limit at the symbol", err)
	}
}
