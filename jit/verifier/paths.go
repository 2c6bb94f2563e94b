package verifier

import "fmt"

// Path-sensitive joins. Where paths meet, their states are joined into one,
// except where that would turn a pointer into a number: a register (or
// spilled slot) that points into the stack on one path and into a map
// value on another, or that is a stack pointer on one and NULL on the
// other. Linux's verifier explores such paths apart, and so does this one:
// each block keeps up to maxPaths states, and an incoming state joins the
// first one whose pointers it shares (pathFor). Every access is then
// checked on each path against the one region it points into there, and
// the facts for the compiler (Result.MapValueAccess, Unaligned, ...) are
// the union over all paths, as before.
//
// Termination: a block has at most maxPaths states, each of which only
// grows (and widens at loop heads), so the analysis still reaches a fixed
// point. Past maxPaths, a state joins the block's last one, losing the
// pointer as before.

// maxPaths bounds the states kept apart at one block entry (per call chain).
const maxPaths = 8

// pathFor returns the key, among the states stored for k's block, that
// should take st: the first state that joins st without losing a pointer,
// else a new one while fewer than maxPaths exist, else the last.
func (v *verifier) pathFor(k key, st *state) key {
	if !loses(v.block(k).st, st) {
		return k
	}
	more := v.paths[k]
	for p := range more {
		if !loses(more[p].st, st) {
			k.path = int32(p + 1)
			return k
		}
	}
	if v.paths == nil {
		v.paths = make(map[key][]block)
	}
	if len(more)+1 < maxPaths {
		v.paths[k] = append(more, block{})
	} else if v.merged < 0 {
		v.merged = int(k.insn)
	}
	k.path = int32(len(v.paths[k]))
	return k
}

// mergedHint explains a pointer that became a number because more than
// maxPaths paths met: "" if none did.
func (v *verifier) mergedHint() string {
	if v.merged < 0 {
		return ""
	}
	return fmt.Sprintf(" (more than %d paths with pointers into different regions meet at insn %d: past that, their pointers are merged into numbers)", maxPaths, v.merged)
}

// loses reports whether joining a and b would turn a pointer into a number
// (see lossyJoin): in a register or a spilled stack slot, of any frame.
func loses(a, b *state) bool {
	for f := range a.frames {
		x, y := &a.frames[f], &b.frames[f]
		for r := range x.regs {
			if lossyJoin(x.regs[r], y.regs[r]) {
				return true
			}
		}
		if x.stack == y.stack {
			continue
		}
		for k := range x.stack {
			s, t := &x.stack[k], &y.stack[k]
			if s.spill && t.spill && lossyJoin(s.v, t.v) {
				return true
			}
		}
	}
	return false
}

// lossyJoin reports whether x and y are pointers, or a pointer and NULL,
// but their join is not a pointer: they point into different regions
// (kinds, frames or maps), or NULL meets a pointer other than a map
// value's (which joins into "map value or NULL").
func lossyJoin(x, y value) bool {
	if x == y || !x.isPointer() && !y.isPointer() {
		return false
	}
	if (x.isPointer() || isNull(x)) && (y.isPointer() || isNull(y)) {
		return !join(x, y).isPointer()
	}
	return false
}
