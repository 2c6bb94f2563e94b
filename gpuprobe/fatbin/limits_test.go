package fatbin

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/pierrec/lz4/v4"
)

// maxAlloc bounds what refusing or cutting short a bomb may allocate.
const maxAlloc = 16 << 20

// TestBombs feeds entries whose headers claim, or whose streams expand
// to, far more than their size: each is refused before or while
// inflating, allocating little, with an error naming the limit or the
// entry. Today's main allocated the claim up front (1 GiB for the
// zstd claim: the reported 98 KB request).
func TestBombs(t *testing.T) {
	lzBomb := fatbintest.LZ4Bomb(64 << 20)   // 251 KiB
	zsBomb := fatbintest.ZstdBomb(t, 64<<20) // a few KiB
	tests := []struct {
		name  string
		entry fatbintest.BombEntry
		limit string // "": not a *LimitError, a *FormatError containing want
		want  string
	}{
		{"zstd claims 1 GiB", fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Payload: zsBomb[:98<<10%len(zsBomb)], Claim: 1 << 30}, "Limits.MaxEntry", "entry limit"},
		{"zstd ratio", fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Payload: zsBomb, Claim: 64 << 20}, "Limits.MaxRatio", "ratio limit"},
		{"zstd expands past its claim", fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Payload: zsBomb, Claim: uint64(len(zsBomb))}, "", "inflates past"},
		{"lz4 ratio", fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Payload: lzBomb, Claim: 64 << 20}, "Limits.MaxRatio", "ratio limit"},
		{"lz4 expands past its claim", fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Payload: lzBomb, Claim: uint64(len(lzBomb)) * 4}, "", "inflates past"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseContainer(fatbintest.Container(tt.entry), 0)
			if err != nil {
				t.Fatal(err)
			}
			var derr error
			n := fatbintest.Allocated(func() { _, derr = c.Entries[0].Data() })
			if n > maxAlloc {
				t.Errorf("allocated %d bytes, want at most %d", n, maxAlloc)
			}
			var le *LimitError
			var fe *FormatError
			switch {
			case tt.limit != "" && (!errors.As(derr, &le) || le.Limit != tt.limit || le.Offset != ContainerHeaderSize):
				t.Errorf("error %v, want a *LimitError for %s at offset %#x", derr, tt.limit, ContainerHeaderSize)
			case tt.limit == "" && !errors.As(derr, &fe):
				t.Errorf("error %v, want a *FormatError", derr)
			case !strings.Contains(derr.Error(), tt.want):
				t.Errorf("error %q, want it to say %q", derr, tt.want)
			}
		})
	}
}

// TestInflaterTotal: entries each under the entry limit stop at the
// image limit (the reported inspect run on 8 bomb entries).
func TestInflaterTotal(t *testing.T) {
	var text []byte // 1.1 MB that compresses about 4×, as PTX does
	for i := 0; len(text) < 1100000; i++ {
		text = fmt.Appendf(text, "\tmov.u32 %%r%d, %d;\n", i%1000, i*7919%100003)
	}
	comp := make([]byte, lz4.CompressBlockBound(len(text)))
	n, err := lz4.CompressBlock(text, comp, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Arch: 80, Payload: comp[:n], Claim: uint64(len(text))}
	c, err := ParseContainer(fatbintest.Container(e, e, e, e), 0)
	if err != nil {
		t.Fatal(err)
	}
	in := NewInflater(Limits{MaxEntry: 2 << 20, MaxTotal: 3 << 20, MaxRatio: DefaultLimits.MaxRatio})
	for i, e := range c.Entries {
		got, err := in.Data(e)
		if i < 2 && (err != nil || !bytes.Equal(got, text)) {
			t.Fatalf("entry %d: %d bytes, %v; want the text", i, len(got), err)
		}
		if i == 2 && !errors.Is(err, ErrLimit) {
			t.Fatalf("entry %d: %v, want ErrLimit", i, err)
		}
	}
	if in.Used() != 2*int64(len(text)) {
		t.Errorf("Used %d, want %d", in.Used(), 2*len(text))
	}
}

// FuzzLZ4Block checks the bounded LZ4 decoder against the library's.
func FuzzLZ4Block(f *testing.F) {
	for _, s := range []string{"hello hello hello hello hello", strings.Repeat(".version 8.0\n", 50)} {
		buf := make([]byte, lz4.CompressBlockBound(len(s)))
		n, _ := lz4.CompressBlock([]byte(s), buf, nil)
		f.Add(buf[:n], len(s))
	}
	f.Add(fatbintest.LZ4Bomb(4096), 100)
	f.Fuzz(func(t *testing.T, src []byte, size int) {
		if size < 0 || size > 1<<20 {
			return
		}
		got, err := lz4Block(src, size)
		want := make([]byte, size)
		n, werr := lz4.UncompressBlock(src, want)
		switch {
		case err == nil && werr == nil && !bytes.Equal(got, want[:n]):
			t.Fatalf("lz4Block gives %d bytes, lz4.UncompressBlock %d", len(got), n)
		case err != nil && werr == nil && n == size:
			t.Fatalf("lz4Block: %v; lz4.UncompressBlock inflates the block to its %d bytes", err, n)
		}
	})
}
