package verifier

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// program1000 builds a 1000-instruction probe shaped like real ones: map
// lookups with NULL checks, stack keys, bounded indexing into values,
// helper calls, branches and a counted loop.
func program1000() asm.Instructions {
	var p asm.Instructions
	p = append(p,
		asm.Mov.Imm(asm.R6, 0),
		stdw(asm.R10, -16, 0),
		stdw(asm.R10, -24, 0),
		stdw(asm.R10, -32, 0),
	)
	for k := 0; len(p) < 960; k++ {
		skip := fmt.Sprintf("skip%d", k)
		p = append(p,
			asm.StoreImm(asm.R10, -4, int64(k%4), asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, skip),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.BuiltinFunc(jit.HelperGetLaneID).Call(),
			asm.And.Imm(asm.R0, 1),
			asm.LSh.Imm(asm.R0, 3),
			asm.Add.Reg(asm.R7, asm.R0),
			asm.LoadMem(asm.R1, asm.R7, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R7, 0, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.R10),
			asm.Add.Imm(asm.R1, -16),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -24),
			asm.Mov.Reg(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, -32),
			asm.BuiltinFunc(jit.HelperGetThreadIdx).Call(),
			asm.LoadMem(asm.R1, asm.R10, -16, asm.DWord),
			asm.Add.Reg(asm.R6, asm.R1),
			asm.JGT.Imm(asm.R6, 1000, skip),
			asm.Mul.Imm(asm.R6, 3),
			asm.Xor.Imm(asm.R6, 0x55).WithSymbol(skip),
		)
	}
	p = append(p,
		asm.Mov.Imm(asm.R1, 0),
		asm.Add.Reg(asm.R6, asm.R1).WithSymbol("loop"),
		asm.Add.Imm(asm.R1, 1),
		asm.JLT.Imm(asm.R1, 64, "loop"),
	)
	for len(p) < 998 {
		p = append(p, asm.Add.Imm(asm.R6, 1))
	}
	p = append(p, asm.Mov.Reg(asm.R0, asm.R6), asm.Return())
	return link(p)
}

func TestProgram1000(t *testing.T) {
	p := &jit.Program{Insns: program1000(), Maps: testMaps}
	if len(p.Insns) != 1000 {
		t.Fatalf("%d instructions, want 1000", len(p.Insns))
	}
	res, err := Verify(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.BackEdges) != 1 || len(res.Unreachable) != 0 {
		t.Fatalf("back edges %v, unreachable %v", res.BackEdges, res.Unreachable)
	}
	t.Logf("%d steps, %d block states", res.Steps, res.States)
}

// BenchmarkVerify1000 verifies a 1000-instruction program (the target is
// well under 1 ms).
func BenchmarkVerify1000(b *testing.B) {
	p := &jit.Program{Insns: program1000(), Maps: testMaps}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(p, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
