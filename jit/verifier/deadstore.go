package verifier

import (
	"sort"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// stackBits is one bit per byte of a stack frame (byte r10+off is bit
// off+jit.StackSize).
type stackBits [jit.StackSize / 64]uint64

// stackRange is the frame bytes [lo, hi) (offsets from r10) of function fn.
type stackRange struct {
	fn     int
	lo, hi int64
}

func (b *stackBits) set(lo, hi int64) {
	for o := max(lo, -jit.StackSize); o < min(hi, 0); o++ {
		k := o + jit.StackSize
		b[k/64] |= 1 << (k % 64)
	}
}

func (b *stackBits) any(lo, hi int64) bool {
	for o := max(lo, -jit.StackSize); o < min(hi, 0); o++ {
		k := o + jit.StackSize
		if b[k/64]&(1<<(k%64)) != 0 {
			return true
		}
	}
	return false
}

// noteStackRead records that instruction i reads bytes [lo, hi) of function
// fn's frame (a key read is kept apart, in keyBytes, until the end).
func (v *verifier) noteStackRead(i, fn int, lo, hi int64) {
	r := stackRange{fn, lo, hi}
	reads := v.stackReads
	if v.keyRead {
		reads = v.keyBytes
	}
	if k := reads[i]; len(k) == 0 || k[len(k)-1] != r {
		reads[i] = append(k, r)
	}
}

// deadStores lists the stores at r10+off whose bytes no run reads before
// they are overwritten or the function returns (Result.DeadStores): a
// backward liveness of frame bytes over each function's basic blocks. A
// bpf-to-bpf call counts as reading every byte of the caller's frame that
// any instruction of another function reads through a pointer.
func (v *verifier) deadStores(r *Result) []int {
	n := len(v.p.Insns)
	gen := make(map[int]*stackBits)
	cross := make([]stackBits, len(v.g.funcs)) // frame bytes read from other functions
	add := func(i int, s stackRange) {
		if v.g.fn[i] != s.fn {
			cross[s.fn].set(s.lo, s.hi)
			return
		}
		b := gen[i]
		if b == nil {
			b = new(stackBits)
			gen[i] = b
		}
		b.set(s.lo, s.hi)
	}
	for i, ranges := range v.stackReads {
		for _, s := range ranges {
			add(i, s)
		}
	}
	for i, ranges := range v.keyBytes {
		if v.keyHow(r, i) == keyFolded {
			continue // the compiler folds this key
		}
		for _, s := range ranges {
			add(i, s)
		}
	}
	// step turns the live bytes after instruction i into those before it.
	step := func(i int, live *stackBits) {
		ins := &v.p.Insns[i]
		if off, size, ok := directStore(ins); ok {
			live.clear(off, off+size)
		}
		if g := gen[i]; g != nil {
			live.or(g)
		}
		if isLocalCall(ins) {
			live.or(&cross[v.g.fn[i]])
		}
	}
	// Basic blocks: [starts[b], starts[b+1]) within a function.
	var starts []int
	for i := 0; i < n; i++ {
		if i == 0 || v.g.start[i] || v.g.fn[i] != v.g.fn[i-1] {
			starts = append(starts, i)
		}
	}
	blockOf := make(map[int]int, len(starts))
	for b, s := range starts {
		blockOf[s] = b
	}
	end := func(b int) int {
		if b+1 < len(starts) {
			return starts[b+1]
		}
		return n
	}
	liveIn := make([]stackBits, len(starts))
	liveOut := func(b int) stackBits {
		var out stackBits
		last := end(b) - 1
		ins := &v.p.Insns[last]
		succ := func(j int) {
			if j >= 0 && j < n && v.g.fn[j] == v.g.fn[last] {
				if sb, ok := blockOf[j]; ok {
					out.or(&liveIn[sb])
				}
			}
		}
		switch {
		case ins.OpCode.Class().IsJump() && ins.OpCode.JumpOp() == asm.Exit:
		case isJump(ins):
			succ(v.g.target[last])
			if ins.OpCode.JumpOp() != asm.Ja {
				succ(last + 1)
			}
		default:
			succ(last + 1)
		}
		return out
	}
	for changed := true; changed; {
		changed = false
		for b := len(starts) - 1; b >= 0; b-- {
			live := liveOut(b)
			for i := end(b) - 1; i >= starts[b]; i-- {
				step(i, &live)
			}
			if live != liveIn[b] {
				liveIn[b], changed = live, true
			}
		}
	}
	var dead []int
	for b := range starts {
		live := liveOut(b)
		for i := end(b) - 1; i >= starts[b]; i-- {
			if off, size, ok := directStore(&v.p.Insns[i]); ok && v.reached[i] && !live.any(off, off+size) {
				dead = append(dead, i)
			}
			step(i, &live)
		}
	}
	sort.Ints(dead)
	return dead
}

// How the compiler gets the key of a map helper call (keyHow).
const (
	keyThroughPointer = iota // a load through r2 (or a host call copies it)
	keyFolded                // a known number: no read at all
	keyFromFrame             // a load from the caller's own frame slot
)

// keyHow says how the compiler reads call i's key; it must match
// jit/ptx's arrayKey.
func (v *verifier) keyHow(r *Result, i int) int {
	m := v.keyMap[i]
	if m.state != keyConst || !v.p.Maps[m.val].DeviceArray() {
		return keyThroughPointer
	}
	if _, ok := r.ConstKeys[i]; ok {
		return keyFolded
	}
	if off, ok := r.StackKeys[i]; ok && off%4 == 0 {
		return keyFromFrame
	}
	return keyThroughPointer
}

// escapes returns, per function, the frame bytes accessed through a
// pointer other than r10 (Result.StackEscaped): those seen by access, and
// the keys the compiler reads through their pointer.
func (v *verifier) escapes(r *Result) []stackBits {
	esc := v.escaped
	for i, ranges := range v.keyBytes {
		if v.keyHow(r, i) != keyThroughPointer {
			continue
		}
		for _, s := range ranges {
			esc[s.fn].set(s.lo, s.hi)
		}
	}
	for i, ranges := range v.dataBytes {
		if _, ok := r.StackData[i]; ok {
			continue
		}
		for _, s := range ranges {
			esc[s.fn].set(s.lo, s.hi)
		}
	}
	for i, ranges := range v.outBytes {
		if _, ok := r.StackOuts[i]; ok {
			continue
		}
		for _, s := range ranges {
			esc[s.fn].set(s.lo, s.hi)
		}
	}
	return esc
}

// directStore returns the frame bytes a plain store at r10+off writes.
func directStore(ins *asm.Instruction) (off, size int64, ok bool) {
	cls := ins.OpCode.Class()
	if ins.Dst != asm.R10 || (cls != asm.StClass && cls != asm.StXClass) || ins.OpCode.Mode() != asm.MemMode {
		return 0, 0, false
	}
	return int64(ins.Offset), int64(ins.OpCode.Size().Sizeof()), true
}

func (b *stackBits) clear(lo, hi int64) {
	for o := max(lo, -jit.StackSize); o < min(hi, 0); o++ {
		k := o + jit.StackSize
		b[k/64] &^= 1 << (k % 64)
	}
}

func (b *stackBits) or(o *stackBits) {
	for k := range b {
		b[k] |= o[k]
	}
}
