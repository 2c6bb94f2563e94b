package verifier

import (
	"fmt"
	"math"

	"github.com/cilium/ebpf/asm"
)

// rangeText renders the bytes [lo, hi) of an access of size bytes.
func rangeText(lo, hi int64, size int) string {
	if hi-lo == int64(size) {
		return fmt.Sprintf("offset %d size %d", lo, size)
	}
	return fmt.Sprintf("offsets %d..%d size %d", lo, hi-int64(size), size)
}

// branch executes a conditional jump: it narrows the operands on each edge,
// settles NULL checks, and drops edges that cannot be taken.
func (v *verifier) branch(ctx int32, i int, st *state) error {
	ins := &v.p.Insns[i]
	jop := ins.OpCode.JumpOp()
	j32 := ins.OpCode.Class() == asm.Jump32Class
	d, err := v.readReg(st, i, ins.Dst)
	if err != nil {
		return err
	}
	regSrc := ins.OpCode.Source() == asm.RegSource
	var s value
	if regSrc {
		if s, err = v.readReg(st, i, ins.Src); err != nil {
			return err
		}
	} else if j32 {
		s = constant(uint64(uint32(ins.Constant)))
	} else {
		s = constant(uint64(ins.Constant))
	}
	taken, fall := st, st.clone(&v.pool)
	okT, okF := true, true
	switch {
	case !j32 && d.kind == kMapValueNul && isNull(s) && (jop == asm.JEq || jop == asm.JNE || jop == asm.JGT):
		nullIfTaken := jop == asm.JEq
		settle(taken, ins.Dst, d, nullIfTaken)
		settle(fall, ins.Dst, d, !nullIfTaken)
	case !j32 && regSrc && s.kind == kMapValueNul && isNull(d) && (jop == asm.JEq || jop == asm.JNE):
		nullIfTaken := jop == asm.JEq
		settle(taken, ins.Src, s, nullIfTaken)
		settle(fall, ins.Src, s, !nullIfTaken)
	case !j32 && (jop == asm.JEq || jop == asm.JNE) && (d.kind == kMapValue && isNull(s) || regSrc && s.kind == kMapValue && isNull(d)):
		// A map value pointer is never NULL.
		okT, okF = jop == asm.JNE, jop == asm.JEq
	case d.kind == kScalar && s.kind == kScalar:
		dT, sT := narrow(jop, j32, d, s, true)
		dF, sF := narrow(jop, j32, d, s, false)
		okT = !dT.empty() && !sT.empty()
		okF = !dF.empty() && !sF.empty()
		if okT {
			taken.cur().regs[ins.Dst] = dT
			if regSrc {
				taken.cur().regs[ins.Src] = sT
			}
		}
		if okF {
			fall.cur().regs[ins.Dst] = dF
			if regSrc {
				fall.cur().regs[ins.Src] = sF
			}
		}
	}
	if okT {
		v.edges[i] |= edgeTaken
	}
	if okF {
		v.edges[i] |= edgeFall
	}
	if okT {
		v.flow(ctx, v.g.target[i], taken)
	} else {
		v.pool = append(v.pool, taken)
	}
	if okF {
		v.flow(ctx, i+1, fall)
	} else {
		v.pool = append(v.pool, fall)
	}
	return nil
}

// settle applies the outcome of a NULL check of register r holding p.
func settle(st *state, r asm.Register, p value, null bool) {
	if p.id != 0 {
		st.settleNull(p.id, null)
		return
	}
	if null {
		st.cur().regs[r] = constant(0)
		return
	}
	p.kind, p.origin = kMapValue, 0
	st.cur().regs[r] = p
}

// narrow returns d and s narrowed by the knowledge that "d op s" is cond.
// An empty result means the edge cannot be taken.
func narrow(op asm.JumpOp, j32 bool, d, s value, cond bool) (value, value) {
	if dc, ok := d.isConst(); ok {
		if sc, ok := s.isConst(); ok {
			if compare(op, j32, dc, sc) != cond {
				return emptyValue(), emptyValue()
			}
			return d, s
		}
	}
	if j32 {
		// 32-bit compares equal 64-bit ones when both sides fit: unsigned
		// in 32 bits, signed in 31.
		fits := d.umax <= math.MaxUint32 && s.umax <= math.MaxUint32
		if isSigned(op) {
			fits = d.umax <= math.MaxInt32 && s.umax <= math.MaxInt32
		}
		if !fits {
			return d, s
		}
	}
	if !cond {
		neg, ok := negated[op]
		if !ok { // JSet false: d & s == 0
			return d, s
		}
		op = neg
	}
	switch op {
	case asm.JEq:
		r := d
		r.umin, r.umax = max(d.umin, s.umin), min(d.umax, s.umax)
		r.smin, r.smax = max(d.smin, s.smin), min(d.smax, s.smax)
		r.tz = max(d.tz, s.tz)
		r.sync()
		return r, r
	case asm.JNE:
		if c, ok := s.isConst(); ok {
			d = exclude(d, c)
		} else if c, ok := d.isConst(); ok {
			s = exclude(s, c)
		}
	case asm.JGT, asm.JGE, asm.JSGT, asm.JSGE:
		var ok bool
		if d, s, ok = order(op, d, s); !ok {
			return emptyValue(), emptyValue()
		}
	case asm.JLT, asm.JLE, asm.JSLT, asm.JSLE:
		// d < s is s > d.
		var ok bool
		if s, d, ok = order(mirrored[op], s, d); !ok {
			return emptyValue(), emptyValue()
		}
	case asm.JSet:
		if _, ok := s.isConst(); ok && d.umin == 0 {
			d.umin = 1 // d & c != 0 needs d != 0
		}
	}
	d.sync()
	s.sync()
	return d, s
}

// negated is the jump that is taken when op is not (JSet has none).
var negated = map[asm.JumpOp]asm.JumpOp{
	asm.JEq: asm.JNE, asm.JNE: asm.JEq,
	asm.JGT: asm.JLE, asm.JLE: asm.JGT,
	asm.JGE: asm.JLT, asm.JLT: asm.JGE,
	asm.JSGT: asm.JSLE, asm.JSLE: asm.JSGT,
	asm.JSGE: asm.JSLT, asm.JSLT: asm.JSGE,
}

// mirrored is the jump with the operands swapped, for the "less" jumps.
var mirrored = map[asm.JumpOp]asm.JumpOp{
	asm.JLT: asm.JGT, asm.JLE: asm.JGE,
	asm.JSLT: asm.JSGT, asm.JSLE: asm.JSGE,
}

// order narrows d and s by "d op s", op one of JGT, JGE, JSGT and JSGE; it
// returns false when no values satisfy it.
func order(op asm.JumpOp, d, s value) (value, value, bool) {
	switch op {
	case asm.JGT:
		if s.umin == math.MaxUint64 || d.umax == 0 {
			return d, s, false
		}
		d.umin = max(d.umin, s.umin+1)
		s.umax = min(s.umax, d.umax-1)
	case asm.JGE:
		d.umin = max(d.umin, s.umin)
		s.umax = min(s.umax, d.umax)
	case asm.JSGT:
		if s.smin == math.MaxInt64 || d.smax == math.MinInt64 {
			return d, s, false
		}
		d.smin = max(d.smin, s.smin+1)
		s.smax = min(s.smax, d.smax-1)
	case asm.JSGE:
		d.smin = max(d.smin, s.smin)
		s.smax = min(s.smax, d.smax)
	}
	return d, s, true
}

// exclude removes c from the ends of v's ranges.
func exclude(v value, c uint64) value {
	if v.umin == c && v.umin < v.umax {
		v.umin++
	} else if v.umax == c && v.umin < v.umax {
		v.umax--
	} else if v.umin == c && v.umax == c {
		return emptyValue()
	}
	if v.smin == int64(c) && v.smin < v.smax {
		v.smin++
	} else if v.smax == int64(c) && v.smin < v.smax {
		v.smax--
	}
	v.sync()
	return v
}

func emptyValue() value {
	return value{kind: kScalar, umin: 1, umax: 0, smin: 1, smax: 0}
}

func isSigned(op asm.JumpOp) bool {
	switch op {
	case asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE:
		return true
	}
	return false
}

// compare evaluates a conditional jump on concrete values.
func compare(op asm.JumpOp, j32 bool, a, b uint64) bool {
	if j32 {
		a, b = uint64(uint32(a)), uint64(uint32(b))
		sa, sb := int64(int32(a)), int64(int32(b))
		return cmp(op, a, b, sa, sb)
	}
	return cmp(op, a, b, int64(a), int64(b))
}

func cmp(op asm.JumpOp, a, b uint64, sa, sb int64) bool {
	switch op {
	case asm.JEq:
		return a == b
	case asm.JNE:
		return a != b
	case asm.JGT:
		return a > b
	case asm.JGE:
		return a >= b
	case asm.JLT:
		return a < b
	case asm.JLE:
		return a <= b
	case asm.JSGT:
		return sa > sb
	case asm.JSGE:
		return sa >= sb
	case asm.JSLT:
		return sa < sb
	case asm.JSLE:
		return sa <= sb
	case asm.JSet:
		return a&b != 0
	}
	return true
}
