package verifier

import (
	"github.com/gpuprobe/gpuprobe/jit"
)

// stackSlots is the number of 8-byte slots in one stack frame.
const stackSlots = jit.StackSize / 8

// slot is one 8-byte stack slot: which bytes were written and, when the
// whole slot was written at once from a register or an immediate, the value
// (a "spill"), so that pointers survive being stored and loaded back. Bytes
// stored from a known number keep that number (kmask, kval: byte b in bits
// 8b..8b+7), so that a map key built on the stack is known at the call.
type slot struct {
	v     value
	kval  uint64 // known bytes' values; bytes outside kmask are 0
	init  uint8  // bit b set: byte b of the slot was written
	kmask uint8  // bit b set: byte b of the slot holds a known number
	spill bool
}

// byteMask widens kmask bit b to byte b of a uint64.
func byteMask(kmask uint8) uint64 {
	var m uint64
	for b := uint(0); b < 8; b++ {
		if kmask&(1<<b) != 0 {
			m |= 0xff << (8 * b)
		}
	}
	return m
}

// joinKnown keeps the bytes known, and equal, in both x and y.
func joinKnown(x, y *slot) (uint64, uint8) {
	k := x.kmask & y.kmask
	for b := uint(0); b < 8; b++ {
		if (x.kval^y.kval)>>(8*b)&0xff != 0 {
			k &^= 1 << b
		}
	}
	return x.kval & byteMask(k), k
}

// stackArea is the stack of one frame.
type stackArea [stackSlots]slot

// emptyStack is the (shared, never written) stack of a fresh frame.
var emptyStack = &stackArea{}

// frame is the state of one function activation. Its stack is shared
// between states until one of them writes it (copy on write).
type frame struct {
	regs     [11]value
	stack    *stackArea
	owned    bool // stack belongs to this frame alone
	fn       int  // index in cfg.funcs
	callsite int  // call instruction that entered this frame (-1: the program entry)
}

// newFrame returns a frame with every register and stack byte unwritten.
func newFrame(fn, callsite int) frame {
	return frame{stack: emptyStack, fn: fn, callsite: callsite}
}

// mut returns the frame's stack for writing, copying it if it is shared.
func (fr *frame) mut() *stackArea {
	if !fr.owned {
		c := *fr.stack
		fr.stack = &c
		fr.owned = true
	}
	return fr.stack
}

// state is the abstract machine state at one point: one frame per active call.
type state struct {
	frames []frame
}

func (s *state) cur() *frame { return &s.frames[len(s.frames)-1] }

// clone copies s (sharing stacks until written), reusing a state of pool.
func (s *state) clone(pool *[]*state) *state {
	var c *state
	if n := len(*pool); n > 0 {
		c = (*pool)[n-1]
		*pool = (*pool)[:n-1]
		c.frames = append(c.frames[:0], s.frames...)
	} else {
		c = &state{frames: append(make([]frame, 0, len(s.frames)+1), s.frames...)}
	}
	for f := range s.frames {
		s.frames[f].owned = false
		c.frames[f].owned = false
	}
	return c
}

// joinFrom merges o into s, widening when asked. It reports whether s changed.
func (s *state) joinFrom(o *state, widening bool) bool {
	changed := false
	merge := join
	if widening {
		merge = widen
	}
	for f := range s.frames {
		a, b := &s.frames[f], &o.frames[f]
		for r := range a.regs {
			if a.regs[r] != b.regs[r] {
				j := merge(a.regs[r], b.regs[r])
				if j != a.regs[r] {
					a.regs[r] = j
					changed = true
				}
			}
		}
		if a.stack == b.stack {
			continue
		}
		for k := range a.stack {
			x, y := &a.stack[k], &b.stack[k]
			if *x == *y {
				continue
			}
			n := slot{init: x.init & y.init}
			n.kval, n.kmask = joinKnown(x, y)
			if x.spill && y.spill {
				n.v = merge(x.v, y.v)
				n.spill = n.v.kind != kUninit
			}
			if n != *x {
				a.mut()[k] = n
				changed = true
			}
		}
	}
	return changed
}

// each replaces every register and spilled value v of every frame for
// which match(v) holds by fn(v).
func (s *state) each(match func(v value) bool, fn func(v value) value) {
	for f := range s.frames {
		fr := &s.frames[f]
		for r := range fr.regs {
			if match(fr.regs[r]) {
				fr.regs[r] = fn(fr.regs[r])
			}
		}
		for k := range fr.stack {
			if sl := &fr.stack[k]; sl.spill && match(sl.v) {
				fr.mut()[k].v = fn(sl.v)
			}
		}
	}
}

// forgetID unlinks older copies of a lookup result when the lookup runs again.
func (s *state) forgetID(id int32) {
	s.each(func(v value) bool { return v.kind == kMapValueNul && v.id == id },
		func(v value) value {
			v.id = 0
			return v
		})
}

// settleNull marks every copy of lookup result id as NULL or as non-NULL.
func (s *state) settleNull(id int32, null bool) {
	s.each(func(v value) bool { return v.kind == kMapValueNul && v.id == id },
		func(v value) value {
			if null {
				return constant(0)
			}
			v.kind, v.id, v.origin = kMapValue, 0, 0
			return v
		})
}

// dropFrame turns pointers into frames at depth >= d into plain scalars:
// they dangle once the frame returns.
func (s *state) dropFrame(d int) {
	s.each(func(v value) bool { return v.kind == kStack && int(v.frame) >= d },
		func(value) value { return unknown() })
}

// stackOff converts a frame offset in [-512, 0) to slot and byte.
func stackOff(off int64) (int, uint) {
	o := off + jit.StackSize
	return int(o / 8), uint(o % 8)
}

// written reports whether all bytes [lo, hi) of frame f's stack were written.
// It returns the first unwritten offset otherwise.
func (fr *frame) written(lo, hi int64) (int64, bool) {
	for o := lo; o < hi; o++ {
		k, b := stackOff(o)
		if fr.stack[k].init&(1<<b) == 0 {
			return o, false
		}
	}
	return 0, true
}

// store records a write of size bytes at constant offset off; v is the
// stored value when it is known (register or immediate), nil otherwise.
func (fr *frame) store(off int64, size int, v *value) {
	k, b := stackOff(off)
	c, known := uint64(0), v != nil && v.kind == kScalar && v.umin == v.umax
	if known {
		c = v.umin
	}
	if size == 8 && b == 0 && v != nil {
		n := slot{v: *v, init: 0xff, spill: true}
		if known {
			n.kval, n.kmask = c, 0xff
		}
		if fr.stack[k] != n {
			fr.mut()[k] = n
		}
		return
	}
	for j := 0; j < size; j++ {
		k, b := stackOff(off + int64(j))
		n := fr.stack[k]
		if n.spill {
			n.spill, n.v = false, value{}
		}
		n.init |= 1 << b
		n.kval &^= 0xff << (8 * b)
		n.kmask &^= 1 << b
		if known {
			n.kval |= (c >> (8 * j) & 0xff) << (8 * b)
			n.kmask |= 1 << b
		}
		if n != fr.stack[k] {
			fr.mut()[k] = n
		}
	}
}

// known returns the size bytes at constant offset off as a little-endian
// number when every one of them holds a known number (size at most 8).
func (fr *frame) known(off int64, size int) (uint64, bool) {
	var c uint64
	for j := 0; j < size; j++ {
		k, b := stackOff(off + int64(j))
		s := &fr.stack[k]
		if s.kmask&(1<<b) == 0 {
			return 0, false
		}
		c |= (s.kval >> (8 * b) & 0xff) << (8 * j)
	}
	return c, true
}

// clobber records a write somewhere in [lo, hi) whose exact place is unknown:
// spilled values and known bytes there are no longer reliable; no byte
// becomes written.
func (fr *frame) clobber(lo, hi int64) {
	for o := lo; o < hi; o++ {
		k, b := stackOff(o)
		if s := fr.stack[k]; !s.spill && s.kmask&(1<<b) == 0 {
			continue
		}
		s := &fr.mut()[k]
		if s.spill {
			s.spill, s.v = false, value{}
		}
		s.kval &^= 0xff << (8 * b)
		s.kmask &^= 1 << b
	}
}
