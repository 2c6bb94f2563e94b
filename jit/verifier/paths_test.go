package verifier

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// diamonds spills, n times, a pointer that is the context on one path and
// r10-8 on the other (slot k at r10-8(k+1)); with deref, it then loads
// every slot back and reads through it.
func diamonds(n int, deref bool) asm.Instructions {
	p := ins(asm.Mov.Reg(asm.R9, asm.R1))
	for k := range n {
		stack, join := fmt.Sprintf("stack%d", k), fmt.Sprintf("join%d", k)
		p = append(p,
			asm.BuiltinFunc(jit.HelperGetLaneID).Call(),
			asm.RSh.Imm(asm.R0, int32(k%32)),
			asm.And.Imm(asm.R0, 1),
			asm.JEq.Imm(asm.R0, 0, stack),
			asm.Mov.Reg(asm.R2, asm.R9),
			asm.Ja.Label(join),
			asm.Mov.Reg(asm.R2, asm.R10).WithSymbol(stack),
			asm.Add.Imm(asm.R2, -8),
			asm.StoreMem(asm.R10, int16(-8*(k+1)), asm.R2, asm.DWord).WithSymbol(join),
		)
	}
	for k := 0; deref && k < n; k++ {
		p = append(p,
			asm.LoadMem(asm.R1, asm.R10, int16(-8*(k+1)), asm.DWord),
			asm.LoadMem(asm.R0, asm.R1, 0, asm.Byte),
		)
	}
	return link(append(p, ret0...))
}

// TestPathBound checks that paths kept apart are bounded per block: 2^n
// paths of different pointers meet, at most maxPaths are kept, and past
// that the pointers are merged (and no longer dereferenceable).
func TestPathBound(t *testing.T) {
	tests := []struct {
		n      int
		deref  bool
		reason string // "" = accepted
	}{
		{3, true, ""}, // 8 paths: all kept apart
		{4, true, "is a number (scalar), not a pointer: it cannot be dereferenced (more than 8 paths with pointers into different regions meet at insn 36"}, // join3,
		{40, false, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("n=%d/deref=%v", tc.n, tc.deref), func(t *testing.T) {
			p := &jit.Program{Insns: diamonds(tc.n, tc.deref)}
			res, err := Verify(p, Options{CtxSize: 16})
			if tc.reason != "" {
				if err == nil || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("got %v, want %q", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if limit := maxPaths * len(p.Insns); res.Steps > limit {
				t.Errorf("%d steps for %d insns: more than %d paths per block", res.Steps, len(p.Insns), maxPaths)
			}
			t.Logf("%d insns: %d steps, %d states", len(p.Insns), res.Steps, res.States)
		})
	}
}
