package fatbintest

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Entry flags of the compressed entries Bomb writes (fatbin.FlagLZ4,
// fatbin.FlagZstd, with 64-bit and Linux).
const (
	FlagsLZ4  = 0x2011
	FlagsZstd = 0x8011
)

// BombEntry is a compressed PTX entry whose header claims Claim inflated
// bytes, whatever Payload really inflates to.
type BombEntry struct {
	Flags   uint64 // FlagsLZ4 or FlagsZstd
	Arch    uint32 // SM of the entry
	Payload []byte // the compressed stream
	Claim   uint64 // the entry header's uncompressed size
}

// Container returns a fatbin container of the entries, laid out as nvcc
// does (72-byte PTX headers, payloads padded to 8 bytes).
func Container(entries ...BombEntry) []byte {
	le := binary.LittleEndian
	var body []byte
	for _, e := range entries {
		h := make([]byte, 72)
		le.PutUint16(h[0:], 1) // PTX
		le.PutUint16(h[2:], 0x0101)
		le.PutUint32(h[4:], 72)
		padded := (len(e.Payload) + 7) &^ 7
		le.PutUint64(h[8:], uint64(padded))
		le.PutUint32(h[16:], uint32(len(e.Payload)))
		le.PutUint32(h[20:], 64) // options record, empty
		le.PutUint16(h[24:], 8)
		le.PutUint16(h[26:], 7)
		le.PutUint32(h[28:], e.Arch)
		le.PutUint64(h[40:], e.Flags)
		le.PutUint64(h[56:], e.Claim)
		body = append(body, h...)
		body = append(body, e.Payload...)
		body = append(body, make([]byte, padded-len(e.Payload))...)
	}
	hdr := make([]byte, 16)
	le.PutUint32(hdr[0:], 0xBA55ED50)
	le.PutUint16(hdr[4:], 1)
	le.PutUint16(hdr[6:], 16)
	le.PutUint64(hdr[8:], uint64(len(body)))
	return append(hdr, body...)
}

// LZ4Bomb returns one LZ4 block of about n/255 bytes that inflates to at
// least n bytes of 'A': one literal, then one match of offset 1 whose
// length is spelled in 255s.
func LZ4Bomb(n int) []byte {
	b := []byte{0x1f, 'A', 1, 0}
	for rest := n - 20; rest > 0; rest -= 255 {
		b = append(b, 255)
	}
	return append(b, 0, 0x00) // end of the length, then an empty last sequence
}

// ZstdBomb returns a zstd frame, without a content size, that inflates to
// n bytes of PTX-like text.
func ZstdBomb(tb testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(1<<20))
	if err != nil {
		tb.Fatal(err)
	}
	line := []byte("\tadd.s32 %r1, %r1, 1;\n")
	chunk := bytes.Repeat(line, 1<<16/len(line))
	for written := 0; written < n; written += len(chunk) {
		if _, err := w.Write(chunk[:min(len(chunk), n-written)]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// Allocated returns the bytes f allocates on the Go heap (a
// runtime.MemStats.TotalAlloc difference): what an up-front allocation
// from a claimed size shows up in, whether or not it is ever touched.
func Allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}
