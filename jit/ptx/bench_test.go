package ptx

import (
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// program1000 is a 1000-instruction program of the usual probe mix: ALU32
// and ALU64 arithmetic, stack stores and loads, forward branches, a
// division and a helper call per block.
func program1000() *jit.Program {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R0, 0),
		asm.Mov.Imm(asm.R6, 1),
	}
	for blk := 0; len(insns) < 990; blk++ {
		off := int16(-8 * (blk%32 + 1))
		insns = append(insns,
			asm.Add.Imm(asm.R6, int32(blk)),
			asm.Mul.Imm(asm.R6, 3),
			asm.Mov.Reg(asm.R7, asm.R6),
			asm.RSh.Imm(asm.R7, 5),
			asm.Xor.Reg32(asm.R7, asm.R6),
			asm.StoreMem(asm.R10, off, asm.R7, asm.DWord),
			asm.LoadMem(asm.R8, asm.R10, off, asm.DWord),
			asm.Div.Reg(asm.R8, asm.R6),
			asm.Add.Reg(asm.R0, asm.R8),
			asm.Instruction{OpCode: asm.JGT.Op(asm.ImmSource), Dst: asm.R0, Constant: 1000, Offset: 2},
			asm.Add.Imm(asm.R0, 7),
			asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Constant: int64(jit.HelperGetSMID)},
			asm.Mov.Reg(asm.R0, asm.R6),
		)
	}
	for len(insns) < 999 {
		insns = append(insns, asm.Add.Imm(asm.R0, 1))
	}
	insns = append(insns, asm.Return())
	return &jit.Program{Name: "bench1000", Section: "kprobe/bench", Kind: jit.ProbeEntry, Insns: insns}
}

// BenchmarkCompile1000 verifies and compiles a 1000-instruction program
// (the target: at most 1 ms together).
func BenchmarkCompile1000(b *testing.B) {
	p := program1000()
	if len(p.Insns) != 1000 {
		b.Fatalf("program has %d instructions", len(p.Insns))
	}
	if _, err := verifier.Verify(p, verifier.Options{}); err != nil {
		b.Fatalf("verifier: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := verifier.Verify(p, verifier.Options{}); err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(p, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileOnly1000 is the compiler alone.
func BenchmarkCompileOnly1000(b *testing.B) {
	p := program1000()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(p, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
