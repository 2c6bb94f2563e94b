package fatbin

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxImageSize bounds the inflated size of one entry (1 GiB): larger
// claims are treated as corrupt rather than allocated.
const MaxImageSize = 1 << 30

// lz4MaxRatio is the largest expansion an LZ4 block can encode (a match
// of 255-byte length extensions per byte, roughly); a claim beyond it
// cannot be honest.
const lz4MaxRatio = 256

var (
	zstdOnce sync.Once
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// zstdDecoder returns a shared decoder; DecodeAll is safe for concurrent
// use, and WithDecodeAllCapLimit keeps output within the capacity that
// the entry header announces.
func zstdDecoder() (*zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdDec, zstdErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(MaxImageSize))
	})
	return zstdDec, zstdErr
}

// inflate returns the payload decompressed (or as stored).
func (e *Entry) inflate() ([]byte, error) {
	c := e.Compression()
	if c == CompressionNone {
		return e.payload, nil
	}
	where := e.Offset + int64(e.HeaderSize) // the payload's offset, for errors
	if e.UncompressedSize > MaxImageSize {
		return nil, formatErr(e.Offset+56, "uncompressed size %d is over the %d-byte limit", e.UncompressedSize, MaxImageSize)
	}
	src := e.payload[:e.CompressedSize]
	size := int(e.UncompressedSize)
	switch c {
	case CompressionLZ4:
		if uint64(size) > uint64(len(src))*lz4MaxRatio+64 {
			return nil, formatErr(e.Offset+56, "uncompressed size %d is impossible for a %d-byte LZ4 block", size, len(src))
		}
		dst := make([]byte, size)
		n, err := lz4.UncompressBlock(src, dst)
		if err != nil {
			return nil, formatErr(where, "LZ4 block of %d bytes: %v", len(src), err)
		}
		if n != size {
			return nil, formatErr(where, "LZ4 block inflates to %d bytes, the entry header says %d", n, size)
		}
		return dst, nil
	case CompressionZstd:
		var h zstd.Header
		if err := h.Decode(src); err != nil {
			return nil, formatErr(where, "zstd frame header: %v", err)
		}
		if h.HasFCS && h.FrameContentSize != uint64(size) {
			return nil, formatErr(where, "zstd frame holds %d bytes, the entry header says %d", h.FrameContentSize, size)
		}
		dec, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("fatbin: zstd decoder: %w", err)
		}
		dst, err := dec.DecodeAll(src, make([]byte, 0, size))
		if err != nil {
			return nil, formatErr(where, "zstd frame of %d bytes: %v", len(src), err)
		}
		if len(dst) != size {
			return nil, formatErr(where, "zstd frame inflates to %d bytes, the entry header says %d", len(dst), size)
		}
		return dst, nil
	}
	return nil, formatErr(e.Offset+40, "unknown compression in flags %#x", uint64(e.Flags))
}
