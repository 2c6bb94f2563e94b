package ptx

import (
	"github.com/cilium/ebpf/asm"
)

// cmp is how a conditional jump compares: the setp condition and whether
// it is signed.
type cmp struct {
	cond   string
	signed bool
}

var jumpConds = map[asm.JumpOp]cmp{
	asm.JEq:  {"eq", false},
	asm.JNE:  {"ne", false},
	asm.JGT:  {"gt", false},
	asm.JGE:  {"ge", false},
	asm.JLT:  {"lt", false},
	asm.JLE:  {"le", false},
	asm.JSGT: {"gt", true},
	asm.JSGE: {"ge", true},
	asm.JSLT: {"lt", true},
	asm.JSLE: {"le", true},
}

// jump writes a JMP or JMP32 instruction.
func (c *compiler) jump(i int, ins *asm.Instruction) error {
	e := &c.e
	op := ins.OpCode.JumpOp()
	switch op {
	case asm.Exit:
		e.op("bra.uni $Lexit")
		return nil
	case asm.Call:
		return c.call(i, ins)
	case asm.Ja:
		if ins.OpCode.Source() == asm.RegSource {
			return c.errf(i, "ja takes no source register")
		}
		c.branch(i, "")
		return nil
	case asm.JCOND:
		return c.errf(i, "may_goto (JCOND) is not supported")
	}
	if v := c.o.Verified; v != nil {
		// The verifier found that every run takes this jump the same
		// way (a NULL check of a pointer it knows is a map value, a
		// compare of known numbers): no compare, and ptxas sees the
		// pointer without a select against NULL.
		if taken, ok := v.Decided[i]; ok {
			if _, known := jumpConds[op]; known || op == asm.JSet {
				if taken {
					c.branch(i, "")
				}
				return nil
			}
		}
	}
	reg := ins.OpCode.Source() == asm.RegSource
	is32 := ins.OpCode.Class() == asm.Jump32Class
	a := regNames[ins.Dst]
	var b string
	if is32 {
		e.op("cvt.u32.u64 %w0, ", a)
		a = "%w0"
		if reg {
			e.op("cvt.u32.u64 %w1, ", regNames[ins.Src])
			b = "%w1"
		}
	} else if reg {
		b = regNames[ins.Src]
	}
	if op == asm.JSet {
		if is32 {
			if !reg {
				b = u32(uint32(ins.Constant))
			}
			e.op("and.b32 %w2, ", a, ", ", b)
			e.op("setp.ne.u32 %p0, %w2, 0")
		} else {
			if !reg {
				b = u64(uint64(ins.Constant))
			}
			e.op("and.b64 %t0, ", a, ", ", b)
			e.op("setp.ne.u64 %p0, %t0, 0")
		}
		c.branch(i, "%p0")
		return nil
	}
	cc, ok := jumpConds[op]
	if !ok {
		return c.errf(i, "unknown jump operation 0x%x", uint8(op))
	}
	ty := "u64"
	switch {
	case is32 && cc.signed:
		ty = "s32"
	case is32:
		ty = "u32"
	case cc.signed:
		ty = "s64"
	}
	if !reg {
		switch ty {
		case "u64":
			b = u64(uint64(ins.Constant))
		case "s64":
			b = i64(ins.Constant)
		case "u32":
			b = u32(uint32(ins.Constant))
		case "s32":
			b = i32(int32(ins.Constant))
		}
	}
	e.op("setp.", cc.cond, ".", ty, " %p0, ", a, ", ", b)
	c.branch(i, "%p0")
	return nil
}

// branch jumps to the target of instruction i when pred holds ("" for
// always). A backward jump spends one unit of the loop budget; when none is
// left the program ends with r0 = 0.
func (c *compiler) branch(i int, pred string) {
	e := &c.e
	t := label(c.target[i])
	if c.target[i] > i {
		if pred == "" {
			e.op("bra.uni ", t)
		} else {
			e.op("@", pred, " bra ", t)
		}
		return
	}
	if pred == "" {
		e.op("setp.eq.u32 %p1, %bud, 0")
		e.op("@%p1 bra $Lend")
		e.op("sub.u32 %bud, %bud, 1")
		e.op("bra ", t)
		return
	}
	e.op("setp.eq.and.u32 %p1, %bud, 0, ", pred)
	e.op("@%p1 bra $Lend")
	e.op("@", pred, " sub.u32 %bud, %bud, 1")
	e.op("@", pred, " bra ", t)
}

// call writes a helper call or a bpf-to-bpf call.
func (c *compiler) call(i int, ins *asm.Instruction) error {
	e := &c.e
	if ins.OpCode.Source() == asm.RegSource {
		return c.callx(i, ins)
	}
	switch ins.Src {
	case asm.PseudoCall:
		callee := c.funcOf[c.target[i]]
		if callee == nil {
			return c.errf(i, "call to insn %d, which starts no function", c.target[i])
		}
		e.op("st.u32 [%budp], %bud")
		e.raw("\t{\n\t.param .b64 a1;\n\t.param .b64 a2;\n\t.param .b64 a3;\n\t.param .b64 a4;\n\t.param .b64 a5;\n\t.param .b64 bp;\n\t.param .b64 rv;\n")
		e.op("st.param.b64 [a1], %r1")
		e.op("st.param.b64 [a2], %r2")
		e.op("st.param.b64 [a3], %r3")
		e.op("st.param.b64 [a4], %r4")
		e.op("st.param.b64 [a5], %r5")
		e.op("st.param.b64 [bp], %budp")
		e.op("call (rv), ", callee.name, ", (a1, a2, a3, a4, a5, bp)")
		e.op("ld.param.b64 %r0, [rv]")
		e.raw("\t}\n")
		e.op("ld.u32 %bud, [%budp]")
		e.op("setp.eq.u32 %p1, %bud, ", budgetEnded)
		e.op("@%p1 bra $Lend")
		return nil
	case asm.R0:
		return c.helper(i, int32(ins.Constant))
	}
	return c.errf(i, "call with src %d (kfuncs are not supported)", ins.Src)
}

// conformanceHelpers are the helper ids that callx may dispatch to when
// Options.Conformance is set.
var conformanceHelpers = []int32{5}

// callx calls the helper whose id is in register dst. Only the
// conformance suite's helpers can be reached this way; any other id ends
// the program with r0 = 0.
func (c *compiler) callx(i int, ins *asm.Instruction) error {
	if !c.o.Conformance {
		return c.errf(i, "call through a register (callx) is not supported")
	}
	if ins.Dst > asm.R10 {
		return c.errf(i, "callx register r%d out of range", ins.Dst)
	}
	e := &c.e
	done := c.newLabel()
	for _, id := range conformanceHelpers {
		next := c.newLabel()
		e.op("setp.ne.u64 %p3, ", regNames[ins.Dst], ", ", i64(int64(id)))
		e.op("@%p3 bra ", next)
		if err := c.helper(i, id); err != nil {
			return err
		}
		e.op("bra.uni ", done)
		e.label(next)
	}
	e.op("bra.uni $Lend")
	e.label(done)
	return nil
}
