package verifier

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf/asm"
)

// maxRawInsns bounds the size of a program (raw 8-byte slots), as Linux does.
const maxRawInsns = 1_000_000

// cfg is the control-flow skeleton of a program: raw offsets, jump targets,
// functions and the instructions that start basic blocks.
type cfg struct {
	insns   asm.Instructions
	raw     []int  // raw offset of each instruction
	target  []int  // jump or local-call target (instruction index), -1 if none
	fn      []int  // index in funcs of the function holding each instruction
	start   []bool // instruction starts a basic block
	loop    []bool // instruction is the target of a backward jump
	funcs   []Func
	back    []Edge
	rawSize int
}

// branches reports whether ins transfers control other than falling through
// (jumps, exit). Calls return, so they do not count.
func branches(ins *asm.Instruction) bool {
	if !ins.OpCode.Class().IsJump() {
		return false
	}
	return ins.OpCode.JumpOp() != asm.Call
}

// isJump reports whether ins is a ja or a conditional jump.
func isJump(ins *asm.Instruction) bool {
	if !ins.OpCode.Class().IsJump() {
		return false
	}
	switch ins.OpCode.JumpOp() {
	case asm.Call, asm.Exit:
		return false
	}
	return true
}

// isLocalCall reports whether ins calls a bpf-to-bpf function.
func isLocalCall(ins *asm.Instruction) bool {
	return ins.OpCode.JumpOp() == asm.Call && ins.OpCode.Source() == asm.ImmSource &&
		ins.Src == asm.PseudoCall && ins.OpCode.Class() == asm.JumpClass
}

// buildCFG checks every instruction's encoding and the program's shape.
func buildCFG(insns asm.Instructions) (*cfg, error) {
	n := len(insns)
	if n == 0 {
		return nil, &Error{Index: -1, Reason: "program has no instructions"}
	}
	g := &cfg{
		insns:  insns,
		raw:    make([]int, n),
		target: make([]int, n),
		fn:     make([]int, n),
		start:  make([]bool, n),
		loop:   make([]bool, n),
	}
	off := 0
	for i := range insns {
		g.raw[i] = off
		off += int(insns[i].Width())
		if off > maxRawInsns {
			return nil, g.errorf(i, "program is longer than %d instructions", maxRawInsns)
		}
	}
	g.rawSize = off
	for i := range insns {
		if reason := checkInsn(&insns[i]); reason != "" {
			return nil, g.errorf(i, "%s", reason)
		}
	}
	// Resolve jump and call targets.
	entries := map[int]bool{0: true}
	for i := range insns {
		ins := &insns[i]
		g.target[i] = -1
		var rel int64
		switch {
		case isJump(ins) && isGotol(ins):
			rel = ins.Constant
		case isJump(ins):
			rel = int64(ins.Offset)
		case isLocalCall(ins):
			rel = ins.Constant
		default:
			continue
		}
		if err := g.unresolved(i); err != nil {
			return nil, err
		}
		t, err := g.resolve(i, rel)
		if err != nil {
			return nil, err
		}
		g.target[i] = t
		if isLocalCall(ins) {
			entries[t] = true
		}
	}
	// Functions: each call target starts one, and runs to the next.
	starts := make([]int, 0, len(entries))
	for e := range entries {
		starts = append(starts, e)
	}
	sort.Ints(starts)
	for k, s := range starts {
		end := n
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		name := insns[s].Symbol()
		g.funcs = append(g.funcs, Func{Start: s, End: end, Name: name})
		for i := s; i < end; i++ {
			g.fn[i] = k
		}
	}
	for _, f := range g.funcs {
		last := &insns[f.End-1]
		if !branches(last) || last.OpCode.JumpOp() != asm.Exit && !isUncondJump(last) {
			if f.End == n {
				return nil, g.errorf(f.End-1, "execution can fall off the end of the program: the last instruction must be exit or ja")
			}
			return nil, g.errorf(f.End-1, "execution can fall through into the function at insn %d: end each function with exit or ja", f.End)
		}
	}
	// Jumps stay inside their function; blocks and back edges.
	g.start[0] = true
	for i := range insns {
		ins := &insns[i]
		t := g.target[i]
		if isLocalCall(ins) {
			g.start[t] = true
			if i+1 < n {
				g.start[i+1] = true // return site
			}
			continue
		}
		if isCallx(ins) || ins.IsBuiltinCall() {
			continue
		}
		if branches(ins) && i+1 < n {
			g.start[i+1] = true
		}
		if t < 0 {
			continue
		}
		if g.fn[t] != g.fn[i] {
			return nil, g.errorf(i, "jump from the function at insn %d into the function at insn %d", g.funcs[g.fn[i]].Start, g.funcs[g.fn[t]].Start)
		}
		g.start[t] = true
		if t <= i {
			g.loop[t] = true
			g.back = append(g.back, Edge{From: i, To: t})
		}
	}
	return g, nil
}

func isUncondJump(ins *asm.Instruction) bool {
	return isJump(ins) && ins.OpCode.JumpOp() == asm.Ja
}

// resolve turns a relative jump (in raw slots, from the next slot) into an
// instruction index.
func (g *cfg) resolve(i int, rel int64) (int, error) {
	t := int64(g.raw[i]) + 1 + rel
	if t < 0 || t >= int64(g.rawSize) {
		return 0, g.errorf(i, "jump target %+d is outside the program (%d instructions)", rel, g.rawSize)
	}
	k := sort.SearchInts(g.raw, int(t))
	if k == len(g.raw) || g.raw[k] != int(t) {
		return 0, g.errorf(i, "jump target %+d lands in the middle of the LD_IMM64 at insn %d", rel, k-1)
	}
	return k, nil
}

// unresolved catches jumps and calls built with a label (asm DSL) that were
// never linked: their offset is still the -1 placeholder.
func (g *cfg) unresolved(i int) error {
	ins := &g.insns[i]
	ref := ins.Reference()
	if ref == "" {
		return nil
	}
	placeholder := ins.Offset == -1
	if isGotol(ins) || isLocalCall(ins) {
		placeholder = ins.Constant == -1
	}
	if !placeholder {
		return nil
	}
	for k := range g.insns {
		if g.insns[k].Symbol() == ref && k != i {
			return g.errorf(i, "reference to %q is not linked (offset is still -1): link the instructions first", ref)
		}
	}
	return nil
}

// errorf builds an *Error for instruction i.
func (g *cfg) errorf(i int, format string, args ...any) *Error {
	e := &Error{Index: i, Reason: fmt.Sprintf(format, args...)}
	if i >= 0 && i < len(g.insns) {
		e.Raw = g.raw[i]
		e.Line = g.lineAt(i)
	}
	return e
}

// lineAt finds the BTF line of instruction i: BTF marks the first
// instruction of each source line, so look back to the closest mark.
func (g *cfg) lineAt(i int) string {
	for k := i; k >= 0; k-- {
		if l := lineOf(&g.insns[k]); l != "" {
			return l
		}
		if k != i && g.insns[k].Symbol() != "" {
			break
		}
	}
	return ""
}
