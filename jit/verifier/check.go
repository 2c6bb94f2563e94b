package verifier

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// Encodings accepted for a register-indirect call (callx, not in RFC 9669 but
// used by the bpf_conformance suite): older LLVM puts the register number in
// imm, newer LLVM in dst. callxReg returns the register either way.
func callxReg(ins *asm.Instruction) asm.Register {
	if ins.Dst != 0 {
		return ins.Dst
	}
	return asm.Register(ins.Constant)
}

// isCallx reports whether ins is a register-indirect call.
func isCallx(ins *asm.Instruction) bool {
	return ins.OpCode.JumpOp() == asm.Call && ins.OpCode.Class() == asm.JumpClass &&
		ins.OpCode.Source() == asm.RegSource
}

// isGotol reports whether ins is the 32-bit-offset unconditional jump (ja32).
func isGotol(ins *asm.Instruction) bool {
	return ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja
}

// checkInsn checks opcode validity, register numbers and that every field the
// encoding does not use is zero. It returns the reason for a rejection or "".
func checkInsn(ins *asm.Instruction) string {
	op := ins.OpCode
	if op == asm.InvalidOpCode {
		return "invalid opcode"
	}
	raw := uint8(op)
	if ins.Dst > asm.R10 {
		return fmt.Sprintf("invalid destination register r%d", ins.Dst)
	}
	if ins.Src > asm.R10 {
		return fmt.Sprintf("invalid source register r%d", ins.Src)
	}
	if reason := checkFramePointer(ins); reason != "" {
		return reason
	}
	switch cls := op.Class(); cls {
	case asm.LdClass:
		return checkLd(ins, raw)
	case asm.LdXClass:
		if op&^0xff != 0 {
			return fmt.Sprintf("invalid opcode %#02x", raw)
		}
		switch op.Mode() {
		case asm.MemMode:
		case asm.MemSXMode:
			if op.Size() == asm.DWord {
				return fmt.Sprintf("invalid opcode %#02x: there is no sign-extending 64-bit load", raw)
			}
		default:
			return fmt.Sprintf("invalid opcode %#02x: unknown load mode", raw)
		}
		if ins.Constant != 0 {
			return fmt.Sprintf("reserved imm field of a load must be zero, got %d", ins.Constant)
		}
	case asm.StClass:
		if op&^0xff != 0 || op.Mode() != asm.MemMode {
			return fmt.Sprintf("invalid opcode %#02x: unknown store mode", raw)
		}
		if ins.Src != 0 {
			return fmt.Sprintf("reserved src field of a store-immediate must be zero, got %d", ins.Src)
		}
	case asm.StXClass:
		return checkStX(ins, raw)
	case asm.ALUClass, asm.ALU64Class:
		return checkALU(ins, raw)
	case asm.JumpClass, asm.Jump32Class:
		return checkJump(ins, raw)
	}
	return ""
}

// checkFramePointer rejects instructions that write r10, reachable or not.
func checkFramePointer(ins *asm.Instruction) string {
	const reason = "r10 (the frame pointer) is read-only"
	op := ins.OpCode
	switch op.Class() {
	case asm.ALUClass, asm.ALU64Class, asm.LdClass, asm.LdXClass:
		if ins.Dst == asm.R10 {
			return reason
		}
	case asm.StXClass:
		aop := op.AtomicOp()
		fetch := aop == asm.Xchg || aop != asm.InvalidAtomic && aop&0x100 != 0 && aop != asm.CmpXchg
		if op.Mode() == asm.AtomicMode && fetch && ins.Src == asm.R10 {
			return reason + ": a fetching atomic cannot write it"
		}
	}
	return ""
}

func checkLd(ins *asm.Instruction, raw uint8) string {
	op := ins.OpCode
	if op != asm.LoadImmOp(asm.DWord) {
		switch op.Mode() {
		case asm.AbsMode, asm.IndMode:
			return fmt.Sprintf("legacy packet load (opcode %#02x, LD_ABS/LD_IND) is not supported", raw)
		}
		return fmt.Sprintf("invalid opcode %#02x", raw)
	}
	if ins.Offset != 0 {
		return fmt.Sprintf("reserved offset field of LD_IMM64 must be zero, got %d", ins.Offset)
	}
	switch ins.Src {
	case 0, asm.PseudoMapFD, asm.PseudoMapValue:
		return ""
	case asm.PseudoFunc:
		return "LD_IMM64 of a function pointer (src 4) is not supported"
	}
	return fmt.Sprintf("LD_IMM64 with src %d is not supported (only 0, 1 = map, 2 = map value)", ins.Src)
}

func checkStX(ins *asm.Instruction, raw uint8) string {
	op := ins.OpCode
	switch op.Mode() {
	case asm.MemMode:
		if op&^0xff != 0 {
			return fmt.Sprintf("invalid opcode %#02x", raw)
		}
		if ins.Constant != 0 {
			return fmt.Sprintf("reserved imm field of a store must be zero, got %d", ins.Constant)
		}
		return ""
	case asm.AtomicMode:
	default:
		return fmt.Sprintf("invalid opcode %#02x: unknown store mode", raw)
	}
	if sz := op.Size(); sz != asm.Word && sz != asm.DWord {
		return fmt.Sprintf("atomic operations exist at 32 and 64 bits only (opcode %#02x)", raw)
	}
	aop := op.AtomicOp()
	switch aop {
	case asm.AddAtomic, asm.FetchAdd, asm.OrAtomic, asm.FetchOr, asm.AndAtomic, asm.FetchAnd,
		asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg:
	default:
		return fmt.Sprintf("unknown atomic operation %#x", uint32(aop)>>8)
	}
	// Decoded instructions keep the raw imm in Constant; hand-built ones
	// carry the operation in the opcode only.
	if ins.Constant != 0 && ins.Constant != int64(aop>>8) {
		return fmt.Sprintf("atomic imm %#x has reserved bits set", ins.Constant)
	}
	return ""
}

func checkALU(ins *asm.Instruction, raw uint8) string {
	op := ins.OpCode
	aop := op.ALUOp()
	alu32 := op.Class() == asm.ALUClass
	switch aop {
	case asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh,
		asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh:
	case asm.Neg:
		if op.Source() != asm.ImmSource {
			return fmt.Sprintf("invalid opcode %#02x: neg takes no source register", raw)
		}
		if ins.Src != 0 || ins.Constant != 0 || ins.Offset != 0 {
			return "reserved src, offset and imm fields of neg must be zero"
		}
		return ""
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if op.Source() != asm.RegSource {
			return "movsx takes a source register, not an immediate"
		}
		if alu32 && aop == asm.MovSX32 {
			return "invalid movsx32 with 32-bit sign extension (offset 32 needs ALU64)"
		}
		if ins.Constant != 0 {
			return fmt.Sprintf("reserved imm field of movsx must be zero, got %d", ins.Constant)
		}
		return ""
	case asm.Swap:
		if !alu32 && op.Endianness() == asm.BE {
			return fmt.Sprintf("invalid opcode %#02x: 64-bit byte swap has no source bit", raw)
		}
		if ins.Src != 0 || ins.Offset != 0 {
			return "reserved src and offset fields of a byte swap must be zero"
		}
		switch ins.Constant {
		case 16, 32, 64:
			return ""
		}
		return fmt.Sprintf("byte swap width must be 16, 32 or 64, got %d", ins.Constant)
	default:
		return fmt.Sprintf("invalid ALU opcode %#02x", raw)
	}
	if ins.Offset != 0 {
		return fmt.Sprintf("reserved offset field must be zero, got %d", ins.Offset)
	}
	return checkOperand(ins)
}

func checkJump(ins *asm.Instruction, raw uint8) string {
	op := ins.OpCode
	if op&^0xff != 0 {
		return fmt.Sprintf("invalid opcode %#02x", raw)
	}
	jop := op.JumpOp()
	jmp32 := op.Class() == asm.Jump32Class
	switch jop {
	case asm.InvalidJumpOp:
		return fmt.Sprintf("invalid opcode %#02x: call and exit exist in the 64-bit jump class only", raw)
	case asm.JCOND:
		return "may_goto (JCOND) is not supported"
	case 0xf0:
		return fmt.Sprintf("invalid jump opcode %#02x", raw)
	case asm.Ja:
		if op.Source() != asm.ImmSource {
			return fmt.Sprintf("invalid opcode %#02x: ja takes no source register", raw)
		}
		if ins.Dst != 0 || ins.Src != 0 {
			return "reserved dst and src fields of ja must be zero"
		}
		if jmp32 && ins.Offset != 0 {
			return "reserved offset field of ja32 (gotol) must be zero"
		}
		if !jmp32 && ins.Constant != 0 {
			return fmt.Sprintf("reserved imm field of ja must be zero, got %d", ins.Constant)
		}
		return ""
	case asm.Exit:
		if op.Source() != asm.ImmSource {
			return fmt.Sprintf("invalid opcode %#02x", raw)
		}
		if ins.Dst != 0 || ins.Src != 0 || ins.Offset != 0 || ins.Constant != 0 {
			return "reserved fields of exit must be zero"
		}
		return ""
	case asm.Call:
		if ins.Offset != 0 {
			return fmt.Sprintf("reserved offset field of call must be zero, got %d", ins.Offset)
		}
		if op.Source() == asm.RegSource {
			if ins.Src != 0 {
				return "reserved src field of callx must be zero"
			}
			if ins.Dst != 0 && ins.Constant != 0 || ins.Constant < 0 || ins.Constant > int64(asm.R10) {
				return "callx names its register in dst (or, in the older encoding, imm), not both"
			}
			return ""
		}
		if ins.Dst != 0 {
			return fmt.Sprintf("reserved dst field of call must be zero, got %d", ins.Dst)
		}
		switch ins.Src {
		case 0, asm.PseudoCall:
			return ""
		case asm.PseudoKfuncCall:
			return "kfunc calls are not supported on the GPU"
		}
		return fmt.Sprintf("call with src %d is not supported (0 = helper, 1 = local function)", ins.Src)
	}
	return checkOperand(ins)
}

// checkOperand checks the field an ALU or jump instruction does not use:
// src with an immediate operand, imm with a register one.
func checkOperand(ins *asm.Instruction) string {
	if ins.OpCode.Source() == asm.ImmSource {
		if ins.Src != 0 {
			return fmt.Sprintf("reserved src field must be zero with an immediate operand, got %d", ins.Src)
		}
	} else if ins.Constant != 0 {
		return fmt.Sprintf("reserved imm field must be zero with a register operand, got %d", ins.Constant)
	}
	return ""
}
