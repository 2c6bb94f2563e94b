package fatbin

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// MaxImageSize bounds the inflated size of one entry under DefaultLimits
// (256 MiB, the largest image a PATCHED answer carries).
const MaxImageSize = 256 << 20

// Limits bound what inflating entries may cost. Every entry header's
// claims are checked against them before any work, and the inflated
// bytes are counted as they arrive: a stream that inflates past what its
// header claimed stops there. Nothing is allocated up front from a claim.
type Limits struct {
	// MaxEntry bounds the inflated bytes of one entry.
	MaxEntry int64
	// MaxTotal bounds the inflated bytes of all entries read through one
	// Inflater (one image or file).
	MaxTotal int64
	// MaxRatio bounds inflated ÷ compressed bytes. nvcc's PTX compresses
	// 4–12× with LZ4 and 6–20× with zstd; a bomb claims thousands.
	MaxRatio int64
}

// DefaultLimits are the limits of Entry.Data and Entry.PTX.
var DefaultLimits = Limits{MaxEntry: MaxImageSize, MaxTotal: 1 << 30, MaxRatio: 128}

// ErrLimit is wrapped by every *LimitError.
var ErrLimit = errors.New("limit exceeded")

// LimitError says that an entry would inflate past a limit.
type LimitError struct {
	Offset int64  // of the entry header, in the blob or file parsed
	Limit  string // which limit: "Limits.MaxEntry", "Limits.MaxTotal", "Limits.MaxRatio"
	What   string // the claim or size that passed it
}

// Error returns "fatbin: offset 0x...: what (limit)".
func (e *LimitError) Error() string {
	return fmt.Sprintf("fatbin: offset %#x: %s (%s)", e.Offset, e.What, e.Limit)
}

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// Inflater inflates entries under Limits, counting the bytes of all of
// them against Limits.MaxTotal. It is not safe for concurrent use.
type Inflater struct {
	Limits Limits
	used   int64 // inflated bytes so far
}

// NewInflater returns an Inflater with limits l.
func NewInflater(l Limits) *Inflater { return &Inflater{Limits: l} }

// Used returns the inflated bytes counted so far.
func (in *Inflater) Used() int64 { return in.used }

// Data is Entry.Data under the inflater's limits.
func (in *Inflater) Data(e *Entry) ([]byte, error) {
	data, err := in.inflate(e)
	if err != nil {
		return nil, err
	}
	if e.Kind == KindPTX {
		// The text ends at the first NUL: after it come only the
		// terminator and padding.
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return data[:i], nil
		}
	}
	return data, nil
}

// PTX is Entry.PTX under the inflater's limits.
func (in *Inflater) PTX(e *Entry) ([]byte, error) {
	if e.Kind != KindPTX {
		return nil, fmt.Errorf("fatbin: entry at offset %#x is %s, not PTX", e.Offset, e.Kind)
	}
	return in.Data(e)
}

// inflate returns the payload decompressed (or as stored).
func (in *Inflater) inflate(e *Entry) ([]byte, error) {
	c := e.Compression()
	if c == CompressionNone {
		return e.payload, nil
	}
	src := e.payload[:e.CompressedSize]
	size, err := in.admit(e, len(src))
	if err != nil {
		return nil, err
	}
	where := e.Offset + int64(e.HeaderSize) // the payload's offset, for errors
	var dst []byte
	switch c {
	case CompressionLZ4:
		dst, err = lz4Block(src, size)
		if err != nil {
			return nil, formatErr(where, "LZ4 block of %d bytes: %v", len(src), err)
		}
	case CompressionZstd:
		var h zstd.Header
		if err := h.Decode(src); err != nil {
			return nil, formatErr(where, "zstd frame header: %v", err)
		}
		if h.HasFCS && h.FrameContentSize != uint64(size) {
			return nil, formatErr(where, "zstd frame holds %d bytes, the entry header says %d", h.FrameContentSize, size)
		}
		dst, err = zstdFrame(src, size)
		if err != nil {
			return nil, formatErr(where, "zstd frame of %d bytes: %v", len(src), err)
		}
	}
	if len(dst) != size {
		return nil, formatErr(where, "%s payload inflates to %d bytes, the entry header says %d", c, len(dst), size)
	}
	return dst, nil
}

// admit checks an entry's claimed inflated size against the limits and
// counts it; the claim is then the hard cap of the decompression.
func (in *Inflater) admit(e *Entry, compressed int) (int, error) {
	claim, l := e.UncompressedSize, in.Limits
	lim := func(name, format string, args ...any) error {
		return &LimitError{Offset: e.Offset, Limit: name, What: fmt.Sprintf(format, args...)}
	}
	switch {
	case claim > uint64(l.MaxEntry):
		return 0, lim("Limits.MaxEntry", "%s %s entry claims %d inflated bytes, over the %d-byte entry limit", e.Compression(), e.Kind, claim, l.MaxEntry)
	case claim > uint64(compressed)*uint64(l.MaxRatio):
		return 0, lim("Limits.MaxRatio", "%s %s entry claims %d inflated bytes from %d compressed, over the %d× ratio limit", e.Compression(), e.Kind, claim, compressed, l.MaxRatio)
	case claim > uint64(l.MaxTotal-in.used):
		return 0, lim("Limits.MaxTotal", "%s %s entry claims %d inflated bytes, %d already inflated, over the %d-byte image limit", e.Compression(), e.Kind, claim, in.used, l.MaxTotal)
	}
	in.used += int64(claim)
	return int(claim), nil
}

// zstdMinWindow is the window always allowed (zstd -19 declares 8 MiB).
const zstdMinWindow = 8 << 20

// zstdFrame inflates a zstd frame of at most limit bytes, growing the
// output as it arrives.
func zstdFrame(src []byte, limit int) ([]byte, error) {
	// The window a frame declares may exceed its content (it is rounded
	// up); the output cap below is what bounds memory, so the window is
	// allowed up to limit or zstdMinWindow, whichever is larger.
	win := uint64(max(limit, zstdMinWindow))
	dec, err := zstd.NewReader(bytes.NewReader(src), zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(win), zstd.WithDecoderMaxMemory(win))
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	defer dec.Close()
	out := make([]byte, 0, min(limit, 4*len(src)+512))
	for {
		out = grow(out, 1, limit+1)
		n, err := dec.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if len(out) > limit {
			return nil, fmt.Errorf("inflates past the %d bytes the entry header says", limit)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
