package btfdecode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/gpuprobe/gpuprobe/record"
)

// ShortError reports a record too short for one of its fields.
type ShortError struct {
	Field  string // the first field that does not fit
	Offset int    // its byte offset in the record
	Need   int    // bytes the field needs from Offset
	Have   int    // length of the record
}

// Error implements error.
func (e *ShortError) Error() string {
	return fmt.Sprintf("btfdecode: record of %d bytes too short: field %q at byte offset %d needs %d bytes", e.Have, e.Field, e.Offset, e.Need)
}

// Decode decodes one record. Bytes fields alias b. A record longer than
// Size is accepted (ring-buffer records are padded); a shorter one fails
// with a *ShortError naming the first field that does not fit.
func (d *Decoder) Decode(b []byte) ([]Field, error) {
	return d.DecodeInto(make([]Field, 0, len(d.leaves)), b)
}

// DecodeInto is Decode appending to dst[:0], so a caller can reuse one slice
// across records.
func (d *Decoder) DecodeInto(dst []Field, b []byte) ([]Field, error) {
	dst = dst[:0]
	if len(b) < d.size {
		for i := range d.leaves {
			l := &d.leaves[i]
			if l.Offset+l.Size > len(b) {
				return dst, &ShortError{Field: l.Name, Offset: l.Offset, Need: l.Size, Have: len(b)}
			}
		}
	}
	return d.decode(dst, b), nil
}

// DecodePrefix decodes a record that may be shorter than the type, as a
// producer that writes fewer bytes than the declared value does: every
// field appears, in the order of Fields, and those that b does not hold
// whole are zero and marked Absent. cut is the number of fields that b
// ends inside of (neither wholly present nor wholly absent).
func (d *Decoder) DecodePrefix(dst []Field, b []byte) (fs []Field, cut int) {
	fs = d.decode(dst[:0], b)
	if len(b) >= d.size {
		return fs, 0
	}
	for i := range d.leaves {
		if l := &d.leaves[i]; l.Offset < len(b) && l.Offset+l.Size > len(b) {
			cut++
		}
	}
	return fs, cut
}

// decode fills dst with every field; those beyond len(b) are Absent.
func (d *Decoder) decode(dst []Field, b []byte) []Field {
	n := len(d.leaves)
	if cap(dst) < n {
		dst = make([]Field, n)
	}
	dst = dst[:n]
	for i := range d.leaves {
		l := &d.leaves[i]
		f := &dst[i]
		*f = Field{Name: l.Name, Kind: l.Kind}
		if l.Offset+l.Size > len(b) {
			f.Absent = true
			continue
		}
		p := b[l.Offset : l.Offset+l.Size]
		switch l.Kind {
		case KindString:
			f.Str = cString(p)
		case KindBytes:
			f.Bytes = p
		case KindFloat:
			if l.Size == 4 {
				f.Float = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
			} else {
				f.Float = math.Float64frombits(binary.LittleEndian.Uint64(p))
			}
		default:
			u := l.load(p)
			if l.signed {
				f.Int = l.extend(u)
				f.Uint = uint64(f.Int)
			} else {
				f.Uint = u
				f.Int = int64(u)
			}
			if l.Kind == KindEnum {
				if name, ok := l.byName[f.Uint]; ok {
					f.Str = name
				} else if l.signed {
					f.Str = strconv.FormatInt(f.Int, 10)
				} else {
					f.Str = strconv.FormatUint(u, 10)
				}
			}
		}
	}
	return dst
}

// load reads the little-endian integer (or bitfield) at p.
func (l *leaf) load(p []byte) uint64 {
	if l.BitSize == 0 {
		switch len(p) {
		case 1:
			return uint64(p[0])
		case 2:
			return uint64(binary.LittleEndian.Uint16(p))
		case 4:
			return uint64(binary.LittleEndian.Uint32(p))
		default:
			return binary.LittleEndian.Uint64(p)
		}
	}
	// A bitfield spans at most 9 bytes: gather the low 8 and the 9th apart.
	var lo uint64
	for i := 0; i < len(p) && i < 8; i++ {
		lo |= uint64(p[i]) << (8 * i)
	}
	v := lo >> l.BitOffset
	if len(p) == 9 && l.BitOffset > 0 {
		v |= uint64(p[8]) << (64 - l.BitOffset)
	}
	if l.BitSize < 64 {
		v &= 1<<l.BitSize - 1
	}
	return v
}

// extend sign-extends u from the field's width.
func (l *leaf) extend(u uint64) int64 {
	bits := l.BitSize
	if bits == 0 {
		bits = 8 * l.Size
	}
	return signExtend(u, bits)
}

// cString returns p up to its first NUL byte, as valid UTF-8.
func cString(p []byte) string {
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	// The bytes come from a GPU or host program: exporters drop invalid
	// UTF-8, so it is replaced (each run by 3 bytes: at most 3× the array).
	return record.Sanitize(string(p), 3*len(p))
}
