package fatbin

import "errors"

// lz4Block inflates one LZ4 block (no frame) of at most limit bytes. The
// output grows as sequences arrive; a block that would pass limit stops
// there. (lz4.UncompressBlock needs its whole output allocated first.)
func lz4Block(src []byte, limit int) ([]byte, error) {
	dst := make([]byte, 0, min(limit, 4*len(src)+64))
	i := 0
	length := func(n int) (int, error) {
		if n != 15 {
			return n, nil
		}
		for {
			if i >= len(src) {
				return 0, errors.New("truncated length")
			}
			b := src[i]
			i++
			n += int(b)
			if n > limit {
				return 0, errLZ4Max
			}
			if b != 255 {
				return n, nil
			}
		}
	}
	for i < len(src) {
		tok := src[i]
		i++
		lit, err := length(int(tok >> 4))
		if err != nil {
			return nil, err
		}
		if lit > len(src)-i {
			return nil, errors.New("literals run past the block")
		}
		if lit > limit-len(dst) {
			return nil, errLZ4Max
		}
		dst = append(grow(dst, lit, limit), src[i:i+lit]...)
		i += lit
		if i == len(src) {
			return dst, nil // the last sequence has literals only
		}
		if i+2 > len(src) {
			return nil, errors.New("truncated match offset")
		}
		off := int(src[i]) | int(src[i+1])<<8
		i += 2
		if off == 0 || off > len(dst) {
			return nil, errors.New("match offset out of range")
		}
		ml, err := length(int(tok & 15))
		if err != nil {
			return nil, err
		}
		ml += 4
		if ml > limit-len(dst) {
			return nil, errLZ4Max
		}
		dst = grow(dst, ml, limit)
		for ml > 0 { // an overlapping match repeats the last off bytes
			n := min(ml, off)
			start := len(dst) - off
			dst = append(dst, dst[start:start+n]...)
			ml -= n
		}
	}
	return dst, nil // ended after a match (encoders end with literals)
}

var errLZ4Max = errors.New("inflates past the size the entry header says")

// grow returns dst with room for n more bytes: its capacity doubles, up
// to limit, so that inflating allocates less than twice the output in
// all (append grows large slices by 1.25×: five times the output).
func grow(dst []byte, n, limit int) []byte {
	if len(dst)+n <= cap(dst) {
		return dst
	}
	c := min(max(2*cap(dst), len(dst)+n), limit)
	out := make([]byte, len(dst), c)
	copy(out, dst)
	return out
}
