package verifier

import (
	"math"
	"math/bits"

	"github.com/cilium/ebpf/asm"
)

// evalALU computes one ALU operation on concrete values with the semantics of
// RFC 9669: 32-bit operations work on the low halves and zero-extend the
// result; unsigned division by zero gives 0, unsigned modulo by zero leaves
// dst unchanged; signed division and modulo follow the RFC for zero and for
// INT_MIN / -1; shift counts are masked to the operand width. imm is the
// instruction's constant (the byte-swap width for Swap).
func evalALU(op asm.ALUOp, alu32 bool, le bool, dst, src uint64, imm int64) uint64 {
	if alu32 {
		d, s := uint32(dst), uint32(src)
		var r uint32
		switch op {
		case asm.Add:
			r = d + s
		case asm.Sub:
			r = d - s
		case asm.Mul:
			r = d * s
		case asm.Div:
			if s != 0 {
				r = d / s
			}
		case asm.SDiv:
			r = uint32(sdiv(int32(d), int32(s)))
		case asm.Mod:
			r = d
			if s != 0 {
				r = d % s
			}
		case asm.SMod:
			r = uint32(smod(int32(d), int32(s)))
		case asm.Or:
			r = d | s
		case asm.And:
			r = d & s
		case asm.Xor:
			r = d ^ s
		case asm.LSh:
			r = d << (s & 31)
		case asm.RSh:
			r = d >> (s & 31)
		case asm.ArSh:
			r = uint32(int32(d) >> (s & 31))
		case asm.Neg:
			r = -d
		case asm.Mov:
			r = s
		case asm.MovSX8:
			r = uint32(int32(int8(s)))
		case asm.MovSX16:
			r = uint32(int32(int16(s)))
		case asm.MovSX32:
			r = s
		case asm.Swap:
			return swap(dst, imm, le)
		}
		return uint64(r)
	}
	switch op {
	case asm.Add:
		return dst + src
	case asm.Sub:
		return dst - src
	case asm.Mul:
		return dst * src
	case asm.Div:
		if src == 0 {
			return 0
		}
		return dst / src
	case asm.SDiv:
		return uint64(sdiv(int64(dst), int64(src)))
	case asm.Mod:
		if src == 0 {
			return dst
		}
		return dst % src
	case asm.SMod:
		return uint64(smod(int64(dst), int64(src)))
	case asm.Or:
		return dst | src
	case asm.And:
		return dst & src
	case asm.Xor:
		return dst ^ src
	case asm.LSh:
		return dst << (src & 63)
	case asm.RSh:
		return dst >> (src & 63)
	case asm.ArSh:
		return uint64(int64(dst) >> (src & 63))
	case asm.Neg:
		return -dst
	case asm.Mov:
		return src
	case asm.MovSX8:
		return uint64(int64(int8(src)))
	case asm.MovSX16:
		return uint64(int64(int16(src)))
	case asm.MovSX32:
		return uint64(int64(int32(src)))
	case asm.Swap:
		return bits.ReverseBytes64(truncate(dst, imm)) >> (64 - uint(imm))
	}
	return 0
}

// sdiv is eBPF's signed division: by zero gives 0, and by -1 negates
// (INT_MIN / -1 wraps to INT_MIN).
func sdiv[T int32 | int64](d, s T) T {
	switch {
	case s == 0:
		return 0
	case s == -1:
		return -d
	}
	return d / s
}

// smod is eBPF's signed modulo: by zero gives the dividend, by -1 gives 0;
// the sign follows the dividend.
func smod[T int32 | int64](d, s T) T {
	switch {
	case s == 0:
		return d
	case s == -1:
		return 0
	}
	return d % s
}

// truncate keeps the low width bits of v (width 16, 32 or 64).
func truncate(v uint64, width int64) uint64 {
	if width >= 64 || width <= 0 {
		return v
	}
	return v & (uint64(1)<<uint(width) - 1)
}

// swap implements the ALU-class byte swaps (le/be) on a little-endian target:
// "le" only truncates, "be" reverses the bytes of the low width bits.
func swap(v uint64, width int64, le bool) uint64 {
	v = truncate(v, width)
	if le {
		return v
	}
	switch width {
	case 16:
		return uint64(bits.ReverseBytes16(uint16(v)))
	case 32:
		return uint64(bits.ReverseBytes32(uint32(v)))
	}
	return bits.ReverseBytes64(v)
}

// scalarALU computes the abstract result of dst = dst op src on scalars.
func scalarALU(op asm.ALUOp, alu32 bool, le bool, d, s value, imm int64) value {
	if op == asm.Swap {
		if c, ok := d.isConst(); ok {
			return constant(evalALU(op, alu32, le, c, 0, imm))
		}
		if le && alu32 && imm == 64 {
			return d
		}
		return unknownBits(uint(imm))
	}
	if dc, ok := d.isConst(); ok {
		if sc, ok := s.isConst(); ok {
			return constant(evalALU(op, alu32, le, dc, sc, imm))
		}
	}
	if alu32 {
		d, s = low32(d), low32(s)
		r := rangeALU(op, d, s, 32)
		if r.umax > math.MaxUint32 {
			return unknownBits(32)
		}
		r.sync()
		return r
	}
	r := rangeALU(op, d, s, 64)
	r.sync()
	return r
}

// low32 returns the abstract value of the low 32 bits of v, zero-extended.
func low32(v value) value {
	if c, ok := v.isConst(); ok {
		return constant(c & math.MaxUint32)
	}
	if v.kind == kScalar && v.umax <= math.MaxUint32 {
		return v
	}
	r := unknownBits(32)
	r.tz = min(v.tz, 32)
	return r
}

// rangeALU bounds op on scalar ranges; width is 32 or 64 (inputs already
// reduced to 32 bits when width is 32). A result with umax beyond the width
// is truncated by the caller.
func rangeALU(op asm.ALUOp, d, s value, width uint) value {
	r := unknown()
	mask := uint64(width - 1)
	switch op {
	case asm.Add:
		if hi, c := bits.Add64(d.umax, s.umax, 0); c == 0 {
			r.umin, r.umax = d.umin+s.umin, hi
		}
		if lo, ok := addS(d.smin, s.smin); ok {
			if hi, ok := addS(d.smax, s.smax); ok {
				r.smin, r.smax = lo, hi
			}
		}
		r.tz = min(d.tz, s.tz)
	case asm.Sub:
		if d.umin >= s.umax {
			r.umin, r.umax = d.umin-s.umax, d.umax-s.umin
		}
		if lo, ok := subS(d.smin, s.smax); ok {
			if hi, ok := subS(d.smax, s.smin); ok {
				r.smin, r.smax = lo, hi
			}
		}
		r.tz = min(d.tz, s.tz)
	case asm.Mul:
		if hi, lo := bits.Mul64(d.umax, s.umax); hi == 0 {
			r.umin, r.umax = d.umin*s.umin, lo
		}
		r.tz = min(d.tz+s.tz, 64)
	case asm.Div:
		switch {
		case s.umin > 0:
			r.umin, r.umax = d.umin/s.umax, d.umax/s.umin
		default: // division by zero gives 0
			r.umin, r.umax = 0, d.umax
		}
	case asm.Mod:
		// x % y <= x, and modulo by zero leaves x.
		r.umin, r.umax = 0, d.umax
		if s.umin > 0 {
			r.umax = min(d.umax, s.umax-1)
		}
	case asm.And:
		r.umin, r.umax = 0, min(d.umax, s.umax)
		r.tz = max(d.tz, s.tz)
	case asm.Or:
		r.umin, r.umax = max(d.umin, s.umin), fill(max(d.umax, s.umax))
		r.tz = min(d.tz, s.tz)
	case asm.Xor:
		r.umin, r.umax = 0, fill(max(d.umax, s.umax))
		r.tz = min(d.tz, s.tz)
	case asm.LSh:
		if k, ok := s.isConst(); ok {
			k &= mask
			if d.umax <= math.MaxUint64>>k {
				r.umin, r.umax = d.umin<<k, d.umax<<k
			}
			r.tz = uint8(min(uint64(d.tz)+k, 64))
		}
	case asm.RSh:
		if k, ok := s.isConst(); ok {
			k &= mask
			r.umin, r.umax = d.umin>>k, d.umax>>k
			r.tz = uint8(max(int(d.tz)-int(k), 0))
		} else {
			r.umin, r.umax = 0, d.umax
		}
	case asm.ArSh:
		if k, ok := s.isConst(); ok && width == 64 {
			k &= mask
			r.smin, r.smax = d.smin>>k, d.smax>>k
		}
	case asm.Mov:
		r = s
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		n := uint(32)
		switch op {
		case asm.MovSX8:
			n = 8
		case asm.MovSX16:
			n = 16
		}
		if s.umax < uint64(1)<<(n-1) {
			r = s // already a non-negative n-bit number
		} else if width == 64 {
			r = signedBits(n)
		}
	}
	if width == 32 && r.umax > math.MaxUint32 {
		r = unknownBits(32)
	}
	return r
}

// fill returns the smallest all-ones number that is >= v.
func fill(v uint64) uint64 {
	if v == 0 {
		return 0
	}
	return math.MaxUint64 >> bits.LeadingZeros64(v)
}

func addS(a, b int64) (int64, bool) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, false
	}
	return c, true
}

func subS(a, b int64) (int64, bool) {
	c := a - b
	if (c < a) != (b > 0) {
		return 0, false
	}
	return c, true
}
