package ptx

import (
	"github.com/cilium/ebpf/asm"
)

// alu writes an ALU or ALU64 instruction with RFC 9669 semantics.
func (c *compiler) alu(i int, ins *asm.Instruction) error {
	d, err := c.dstReg(i, ins.Dst)
	if err != nil {
		return err
	}
	op := ins.OpCode.ALUOp()
	if op == asm.Swap {
		return c.swap(i, ins, d)
	}
	reg := ins.OpCode.Source() == asm.RegSource
	if !reg && (op == asm.MovSX8 || op == asm.MovSX16 || op == asm.MovSX32) {
		return c.errf(i, "sign-extending move takes a register source")
	}
	if ins.OpCode.Class() == asm.ALU64Class {
		return c.alu64(i, ins, op, d, reg)
	}
	return c.alu32(i, ins, op, d, reg)
}

var alu64Simple = map[asm.ALUOp]string{
	asm.Add: "add.s64 ",
	asm.Sub: "sub.s64 ",
	asm.Mul: "mul.lo.s64 ",
	asm.Or:  "or.b64 ",
	asm.And: "and.b64 ",
	asm.Xor: "xor.b64 ",
}

var shiftOps64 = map[asm.ALUOp]string{
	asm.LSh:  "shl.b64 ",
	asm.RSh:  "shr.u64 ",
	asm.ArSh: "shr.s64 ",
}

func (c *compiler) alu64(i int, ins *asm.Instruction, op asm.ALUOp, d string, reg bool) error {
	e := &c.e
	s := i64(ins.Constant)
	if reg {
		s = regNames[ins.Src]
	}
	if m, ok := alu64Simple[op]; ok {
		e.op(m, d, ", ", d, ", ", s)
		return nil
	}
	if m, ok := shiftOps64[op]; ok {
		if reg {
			e.op("cvt.u32.u64 %w0, ", s)
			e.op("and.b32 %w0, %w0, 63")
			e.op(m, d, ", ", d, ", %w0")
		} else {
			e.op(m, d, ", ", d, ", ", i64(ins.Constant&63))
		}
		return nil
	}
	switch op {
	case asm.Mov:
		e.op("mov.b64 ", d, ", ", s)
	case asm.MovSX8:
		e.op("cvt.s64.s8 ", d, ", ", s)
	case asm.MovSX16:
		e.op("cvt.s64.s16 ", d, ", ", s)
	case asm.MovSX32:
		e.op("cvt.s64.s32 ", d, ", ", s)
	case asm.Neg:
		e.op("neg.s64 ", d, ", ", d)
	case asm.Div:
		if !reg {
			v := uint64(ins.Constant)
			if v == 0 {
				e.op("mov.u64 ", d, ", 0")
			} else {
				e.op("div.u64 ", d, ", ", d, ", ", u64(v))
			}
			return nil
		}
		e.op("setp.eq.u64 %p0, ", s, ", 0")
		e.op("@%p0 mov.u64 ", d, ", 0")
		e.op("@!%p0 div.u64 ", d, ", ", d, ", ", s)
	case asm.Mod:
		if !reg {
			if v := uint64(ins.Constant); v != 0 {
				e.op("rem.u64 ", d, ", ", d, ", ", u64(v))
			}
			return nil
		}
		e.op("setp.ne.u64 %p0, ", s, ", 0")
		e.op("@%p0 rem.u64 ", d, ", ", d, ", ", s)
	case asm.SDiv:
		if !reg {
			switch ins.Constant {
			case 0:
				e.op("mov.u64 ", d, ", 0")
			case -1:
				e.op("neg.s64 ", d, ", ", d)
			default:
				e.op("div.s64 ", d, ", ", d, ", ", s)
			}
			return nil
		}
		// x / 0 = 0; x / -1 = -x (INT_MIN / -1 wraps to INT_MIN).
		e.op("setp.eq.s64 %p0, ", s, ", 0")
		e.op("setp.eq.s64 %p1, ", s, ", -1")
		e.op("or.pred %p2, %p0, %p1")
		e.op("@%p1 neg.s64 ", d, ", ", d)
		e.op("@%p0 mov.u64 ", d, ", 0")
		e.op("@!%p2 div.s64 ", d, ", ", d, ", ", s)
	case asm.SMod:
		if !reg {
			switch ins.Constant {
			case 0:
			case -1:
				e.op("mov.u64 ", d, ", 0")
			default:
				e.op("rem.s64 ", d, ", ", d, ", ", s)
			}
			return nil
		}
		// x % 0 = x; x % -1 = 0 (no trap for INT_MIN % -1).
		e.op("setp.eq.s64 %p0, ", s, ", 0")
		e.op("setp.eq.s64 %p1, ", s, ", -1")
		e.op("or.pred %p2, %p0, %p1")
		e.op("@%p1 mov.u64 ", d, ", 0")
		e.op("@!%p2 rem.s64 ", d, ", ", d, ", ", s)
	default:
		return c.errf(i, "unknown ALU64 operation 0x%x", uint16(op))
	}
	return nil
}

var alu32Simple = map[asm.ALUOp]string{
	asm.Add: "add.s32 ",
	asm.Sub: "sub.s32 ",
	asm.Mul: "mul.lo.s32 ",
	asm.Or:  "or.b32 ",
	asm.And: "and.b32 ",
	asm.Xor: "xor.b32 ",
}

var shiftOps32 = map[asm.ALUOp]string{
	asm.LSh:  "shl.b32 ",
	asm.RSh:  "shr.u32 ",
	asm.ArSh: "shr.s32 ",
}

// alu32 computes on the low 32 bits in %w0 (dst) and %w1 (src) and
// zero-extends the result into dst.
func (c *compiler) alu32(i int, ins *asm.Instruction, op asm.ALUOp, d string, reg bool) error {
	e := &c.e
	imm := int32(ins.Constant)
	si, su := i32(imm), u32(uint32(imm))
	if reg {
		e.op("cvt.u32.u64 %w1, ", regNames[ins.Src])
		si, su = "%w1", "%w1"
	}
	switch op {
	case asm.Mov:
		if reg {
			e.op("cvt.u64.u32 ", d, ", %w1")
		} else {
			e.op("mov.u64 ", d, ", ", su)
		}
		return nil
	case asm.MovSX8:
		e.op("cvt.s32.s8 %w0, %w1")
	case asm.MovSX16:
		e.op("cvt.s32.s16 %w0, %w1")
	case asm.MovSX32:
		return c.errf(i, "movsx32 is only defined for ALU64")
	default:
		e.op("cvt.u32.u64 %w0, ", d)
	}
	if m, ok := alu32Simple[op]; ok {
		e.op(m, "%w0, %w0, ", si)
	} else if m, ok := shiftOps32[op]; ok {
		if reg {
			e.op("and.b32 %w1, %w1, 31")
			e.op(m, "%w0, %w0, %w1")
		} else {
			e.op(m, "%w0, %w0, ", u32(uint32(imm)&31))
		}
	} else {
		switch op {
		case asm.MovSX8, asm.MovSX16:
		case asm.Neg:
			e.op("neg.s32 %w0, %w0")
		case asm.Div:
			if !reg {
				if imm == 0 {
					e.op("mov.u32 %w0, 0")
				} else {
					e.op("div.u32 %w0, %w0, ", su)
				}
				break
			}
			e.op("setp.eq.u32 %p0, %w1, 0")
			e.op("@%p0 mov.u32 %w0, 0")
			e.op("@!%p0 div.u32 %w0, %w0, %w1")
		case asm.Mod:
			if !reg {
				if imm != 0 {
					e.op("rem.u32 %w0, %w0, ", su)
				}
				break
			}
			e.op("setp.ne.u32 %p0, %w1, 0")
			e.op("@%p0 rem.u32 %w0, %w0, %w1")
		case asm.SDiv:
			if !reg {
				switch imm {
				case 0:
					e.op("mov.u32 %w0, 0")
				case -1:
					e.op("neg.s32 %w0, %w0")
				default:
					e.op("div.s32 %w0, %w0, ", si)
				}
				break
			}
			e.op("setp.eq.s32 %p0, %w1, 0")
			e.op("setp.eq.s32 %p1, %w1, -1")
			e.op("or.pred %p2, %p0, %p1")
			e.op("@%p1 neg.s32 %w0, %w0")
			e.op("@%p0 mov.u32 %w0, 0")
			e.op("@!%p2 div.s32 %w0, %w0, %w1")
		case asm.SMod:
			if !reg {
				switch imm {
				case 0:
				case -1:
					e.op("mov.u32 %w0, 0")
				default:
					e.op("rem.s32 %w0, %w0, ", si)
				}
				break
			}
			e.op("setp.eq.s32 %p0, %w1, 0")
			e.op("setp.eq.s32 %p1, %w1, -1")
			e.op("or.pred %p2, %p0, %p1")
			e.op("@%p1 mov.u32 %w0, 0")
			e.op("@!%p2 rem.s32 %w0, %w0, %w1")
		default:
			return c.errf(i, "unknown ALU operation 0x%x", uint16(op))
		}
	}
	e.op("cvt.u64.u32 ", d, ", %w0")
	return nil
}

// swap writes the byte-order conversions: to little endian (a truncation
// on the GPU, which is little-endian), to big endian, and the unconditional
// ALU64 bswap.
func (c *compiler) swap(i int, ins *asm.Instruction, d string) error {
	e := &c.e
	bits := ins.Constant
	if bits != 16 && bits != 32 && bits != 64 {
		return c.errf(i, "byte swap width %d, want 16, 32 or 64", bits)
	}
	doSwap := ins.OpCode.Class() == asm.ALU64Class || ins.OpCode.Endianness() == asm.BE
	if !doSwap {
		switch bits {
		case 16:
			e.op("and.b64 ", d, ", ", d, ", 0xffff")
		case 32:
			e.op("and.b64 ", d, ", ", d, ", 0xffffffff")
		}
		return nil
	}
	switch bits {
	case 16:
		e.op("cvt.u32.u64 %w0, ", d)
		e.op("prmt.b32 %w0, %w0, 0, 0x4401")
		e.op("cvt.u64.u32 ", d, ", %w0")
	case 32:
		e.op("cvt.u32.u64 %w0, ", d)
		e.op("prmt.b32 %w0, %w0, 0, 0x0123")
		e.op("cvt.u64.u32 ", d, ", %w0")
	case 64:
		e.op("mov.b64 {%w0, %w1}, ", d)
		e.op("prmt.b32 %w2, %w0, 0, 0x0123")
		e.op("prmt.b32 %w3, %w1, 0, 0x0123")
		e.op("mov.b64 ", d, ", {%w3, %w2}")
	}
	return nil
}
