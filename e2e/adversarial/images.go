package adversarial

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
)

// Sizes of the hostile images.
const (
	// bombInflated is what each zstd entry inflates to: the PATCH size
	// limit, from a few kilobytes on the wire.
	bombInflated = 256 << 20
	// hugeImage is a plain image just under the PATCH size limit.
	hugeImage = 255 << 20
	// lz4Claimed is the uncompressed size an LZ4 entry claims (1 TiB) for
	// a block that inflates to a few bytes.
	lz4Claimed = 1 << 40
)

var (
	bombOnce sync.Once
	bombImgs [][]byte
	bombErr  error
)

// bombImages returns the hostile PATCH images: a fatbin whose PTX entries
// are zstd bombs, one whose LZ4 entry lies about its size, and a huge
// image of zeros.
func bombImages() ([][]byte, error) {
	bombOnce.Do(func() {
		z, err := zstdBomb(bombInflated)
		if err != nil {
			bombErr = err
			return
		}
		var zb []byte
		for _, arch := range []uint32{52, 70, 80, 90} { // every arch a device might pick
			zb = append(zb, entry(fatbin.KindPTX, arch, fatbin.Flag64Bit|fatbin.FlagLinux|fatbin.FlagZstd, z, bombInflated)...)
		}
		l, err := lz4Liar()
		if err != nil {
			bombErr = err
			return
		}
		lb := entry(fatbin.KindPTX, 90, fatbin.Flag64Bit|fatbin.FlagLinux|fatbin.FlagLZ4, l, lz4Claimed)
		bombImgs = [][]byte{container(zb), container(lb), make([]byte, hugeImage)}
	})
	return bombImgs, bombErr
}

// zstdBomb compresses n bytes of PTX-looking text (a header, then one long
// comment) into one zstd frame.
func zstdBomb(n int) ([]byte, error) {
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	head := []byte(".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n//")
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	if _, err := w.Write(head); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	for left := n - len(head); left > 0; left -= len(chunk) {
		if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return out.Bytes(), nil
}

// lz4Liar is one LZ4 block of 64 KiB of text.
func lz4Liar() ([]byte, error) {
	src := bytes.Repeat([]byte("B"), 64<<10)
	buf := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := lz4.CompressBlock(src, buf, nil)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("lz4: %d bytes, %v", n, err)
	}
	return buf[:n], nil
}

// entry encodes one fatbin entry (gpuprobe/fatbin/doc.go) whose header
// claims usize uncompressed bytes.
func entry(kind fatbin.Kind, arch uint32, flags fatbin.Flags, payload []byte, usize uint64) []byte {
	const hs = fatbin.EntryHeaderSize + 8 // PTX carries an (empty) options record
	padded := (len(payload) + 7) &^ 7
	h := make([]byte, hs)
	le := binary.LittleEndian
	le.PutUint16(h[0:], uint16(kind))
	le.PutUint16(h[2:], 0x0101)
	le.PutUint32(h[4:], hs)
	le.PutUint64(h[8:], uint64(padded))
	le.PutUint32(h[16:], uint32(len(payload)))
	le.PutUint32(h[20:], fatbin.EntryHeaderSize)
	le.PutUint16(h[24:], 8)
	le.PutUint16(h[26:], 7)
	le.PutUint32(h[28:], arch)
	le.PutUint64(h[40:], uint64(flags))
	le.PutUint64(h[56:], usize)
	out := append(h, payload...)
	return append(out, make([]byte, padded-len(payload))...)
}

// container wraps entries in a fatbin container header.
func container(entries []byte) []byte {
	h := make([]byte, fatbin.ContainerHeaderSize)
	binary.LittleEndian.PutUint32(h[0:], fatbin.ContainerMagic)
	binary.LittleEndian.PutUint16(h[4:], 1)
	binary.LittleEndian.PutUint16(h[6:], fatbin.ContainerHeaderSize)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(entries)))
	return append(h, entries...)
}
