package verifier

import (
	"fmt"
	"math"
	"math/bits"
)

// kind is the type of an abstract register or stack value.
type kind uint8

const (
	kUninit      kind = iota // never written on some path
	kScalar                  // a number (possibly a pointer that lost its provenance)
	kStack                   // pointer into a stack frame
	kCtx                     // pointer into the context (r1 at entry)
	kMapValue                // pointer into a map value
	kMapValueNul             // map value pointer or NULL (result of map_lookup_elem)
	kMapHandle               // map reference from LD_IMM64
)

func (k kind) String() string {
	switch k {
	case kUninit:
		return "uninitialised"
	case kScalar:
		return "scalar"
	case kStack:
		return "stack pointer"
	case kCtx:
		return "context pointer"
	case kMapValue:
		return "map value pointer"
	case kMapValueNul:
		return "map value pointer or NULL"
	case kMapHandle:
		return "map handle"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// unbounded is the magnitude beyond which a pointer offset counts as unknown.
const unbounded = 1 << 30

// value is the abstract value of a register or of a spilled stack slot.
//
// For scalars, [umin, umax] and [smin, smax] bound the value as unsigned and
// signed 64-bit numbers. For pointers, [smin, smax] bound the offset from the
// start of the region. tz is a count of trailing bits known to be zero (of
// the scalar, or of the pointer's offset), used to prove alignment.
type value struct {
	kind   kind
	frame  uint8 // kStack: call depth of the frame pointed into
	tz     uint8 // known trailing zero bits (0..64)
	m      int32 // kMapValue, kMapValueNul, kMapHandle: index in Program.Maps
	id     int32 // kMapValueNul: links copies of one lookup result (0 = none)
	origin int32 // kMapValueNul: index of the lookup call (-1 = several)
	bo     int32 // kMapValue of a per-block array: 1 + where the value starts in the block's copy of the map (0: not known)
	umin   uint64
	umax   uint64
	smin   int64
	smax   int64
}

var uninitValue = value{}

// constant returns the scalar c.
func constant(c uint64) value {
	return value{kind: kScalar, umin: c, umax: c, smin: int64(c), smax: int64(c), tz: tzOf(c)}
}

// unknown returns a scalar about which nothing is known.
func unknown() value {
	return value{kind: kScalar, umin: 0, umax: math.MaxUint64, smin: math.MinInt64, smax: math.MaxInt64}
}

// unknownBits returns a scalar known to fit in the low n bits (zero-extended).
func unknownBits(n uint) value {
	if n >= 64 {
		return unknown()
	}
	max := uint64(1)<<n - 1
	return value{kind: kScalar, umin: 0, umax: max, smin: 0, smax: int64(max)}
}

// signedBits returns a scalar that is a sign-extended n-bit number.
func signedBits(n uint) value {
	if n >= 64 {
		return unknown()
	}
	v := unknown()
	v.smin = -(int64(1) << (n - 1))
	v.smax = int64(1)<<(n-1) - 1
	return v
}

func tzOf(c uint64) uint8 {
	return uint8(bits.TrailingZeros64(c)) // 64 for c == 0
}

// ptr returns a pointer of kind k at constant offset off.
func ptr(k kind, off int64) value {
	return value{kind: k, smin: off, smax: off, tz: tzOf(uint64(off))}
}

// isConst reports whether v is a scalar with a single possible value.
func (v value) isConst() (uint64, bool) {
	if v.kind == kScalar && v.umin == v.umax {
		return v.umin, true
	}
	return 0, false
}

func (v value) isPointer() bool {
	switch v.kind {
	case kStack, kCtx, kMapValue, kMapValueNul, kMapHandle:
		return true
	}
	return false
}

// offsetKnown reports whether a pointer's offset is bounded.
func (v value) offsetKnown() bool {
	return v.smin > -unbounded && v.smax < unbounded
}

// sync tightens the signed and unsigned ranges of a scalar against each other.
func (v *value) sync() {
	if v.kind != kScalar {
		return
	}
	// Both ranges describe the same set of bit patterns.
	if v.umax <= math.MaxInt64 { // unsigned range is all non-negative
		v.smin = max(v.smin, int64(v.umin))
		v.smax = min(v.smax, int64(v.umax))
	} else if v.umin > math.MaxInt64 { // all negative as signed
		v.smin = max(v.smin, int64(v.umin))
		v.smax = min(v.smax, int64(v.umax))
	}
	if v.smin >= 0 {
		v.umin = max(v.umin, uint64(v.smin))
		v.umax = min(v.umax, uint64(v.smax))
	} else if v.smax < 0 {
		v.umin = max(v.umin, uint64(v.smin))
		v.umax = min(v.umax, uint64(v.smax))
	}
	if v.tz > 0 && v.tz < 64 {
		// Known trailing zeros: the bounds are multiples of 1<<tz.
		m := uint64(1)<<v.tz - 1
		if v.umin&m != 0 {
			if v.umin > math.MaxUint64-m {
				v.umin, v.umax = 1, 0 // empty
				return
			}
			v.umin = (v.umin + m) &^ m
		}
		v.umax &^= m
		if v.smin&int64(m) != 0 && v.smin <= math.MaxInt64-int64(m) {
			v.smin = (v.smin + int64(m)) &^ int64(m)
		}
		v.smax &^= int64(m)
	}
	if v.umin == v.umax {
		v.tz = max(v.tz, tzOf(v.umin))
	}
}

// empty reports whether a scalar's ranges are contradictory (no value fits).
func (v value) empty() bool {
	return v.kind == kScalar && (v.umin > v.umax || v.smin > v.smax)
}

// join returns the least abstract value that covers both a and b.
func join(a, b value) value {
	if a == b {
		return a
	}
	if a.kind == kUninit || b.kind == kUninit {
		return uninitValue
	}
	// NULL joined with a map value is "map value or NULL".
	if isNull(a) && (b.kind == kMapValue || b.kind == kMapValueNul) {
		a, b = b, a
	}
	if isNull(b) && (a.kind == kMapValue || a.kind == kMapValueNul) {
		r := a
		r.kind = kMapValueNul
		if a.kind == kMapValue {
			r.id, r.origin = 0, -1
		}
		return r
	}
	if a.kind == kMapValue && b.kind == kMapValueNul {
		a, b = b, a
	}
	if a.kind == kMapValueNul && b.kind == kMapValue && a.m == b.m {
		b.kind, b.id, b.origin = kMapValueNul, 0, -1
	}
	if a.kind != b.kind {
		return unknown()
	}
	switch a.kind {
	case kStack:
		if a.frame != b.frame {
			return unknown()
		}
	case kMapValue, kMapValueNul, kMapHandle:
		if a.m != b.m {
			return unknown()
		}
	}
	r := a
	r.umin, r.umax = min(a.umin, b.umin), max(a.umax, b.umax)
	r.smin, r.smax = min(a.smin, b.smin), max(a.smax, b.smax)
	r.tz = min(a.tz, b.tz)
	if a.id != b.id {
		r.id = 0
	}
	if a.origin != b.origin {
		r.origin = -1
	}
	if a.bo != b.bo {
		r.bo = 0
	}
	return r
}

// widen returns old joined with cur, where every bound that moved jumps to
// its extreme, so that loops reach a fixed point in a few steps.
func widen(old, cur value) value {
	j := join(old, cur)
	if j.kind != old.kind || j == old {
		return j
	}
	if j.umin < old.umin {
		j.umin = 0
	}
	if j.umax > old.umax {
		j.umax = math.MaxUint64
	}
	if j.smin < old.smin {
		j.smin = math.MinInt64
	}
	if j.smax > old.smax {
		j.smax = math.MaxInt64
	}
	if j.tz < old.tz {
		j.tz = 0
	}
	return j
}

// isNull reports whether v is the scalar 0.
func isNull(v value) bool {
	c, ok := v.isConst()
	return ok && c == 0
}

// describe renders a value for error messages.
func (v value) describe() string {
	switch v.kind {
	case kScalar:
		if c, ok := v.isConst(); ok {
			return fmt.Sprintf("scalar %d", int64(c))
		}
		return "scalar"
	case kStack, kCtx, kMapValue, kMapValueNul:
		return v.kind.String() + " " + v.offsets()
	}
	return v.kind.String()
}

// offsets renders a pointer's offset range.
func (v value) offsets() string {
	if !v.offsetKnown() {
		return "(unbounded offset)"
	}
	if v.smin == v.smax {
		return fmt.Sprintf("(offset %d)", v.smin)
	}
	return fmt.Sprintf("(offset %d..%d)", v.smin, v.smax)
}
