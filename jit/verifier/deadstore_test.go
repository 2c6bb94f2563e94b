package verifier

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// lookupAt looks up map m with the key at r10+off.
func lookupAt(m string, off int32) asm.Instructions {
	return cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference(m)), stackPtr(asm.R2, off), ins(asm.FnMapLookupElem.Call()))
}

// TestDeadStores: a store to the frame is dead when no run reads its
// bytes before they are overwritten or the function returns; a known key
// of an array lookup (which the compiler folds) is not a read, any other
// read is (loads, keys of host maps and unknown keys, helper buffers,
// strings up to the frame's end, reads on one branch only).
func TestDeadStores(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
		dead  []int
	}{
		{"known key of an array lookup", cat(ins(asm.StoreImm(asm.R10, -4, 1, asm.Word)), lookupAt("arr", -4), ret0), []int{0}},
		{"known key of a host map", cat(ins(stdw(asm.R10, -8, 1)), lookupAt("hash", -8), ret0), nil},
		{"unknown key", cat(ins(call(jit.HelperKtimeGetNs), asm.StoreMem(asm.R10, -4, asm.R0, asm.Word)), lookupAt("arr", -4), ret0), nil},
		{"never read", ins(stdw(asm.R10, -8, 1), asm.Mov.Imm(asm.R0, 0), asm.Return()), []int{0}},
		{"overwritten before the read", ins(stdw(asm.R10, -8, 1), stdw(asm.R10, -8, 2),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()), []int{0}},
		{"half overwritten", ins(stdw(asm.R10, -8, 1), asm.StoreImm(asm.R10, -8, 2, asm.Word),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()), nil},
		{"read on one branch", ins(stdw(asm.R10, -8, 1), call(jit.HelperKtimeGetNs), asm.JEq.Imm(asm.R0, 0, "out"),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return()), nil},
		{"read through a pointer", cat(ins(stdw(asm.R10, -16, 1)), stackPtr(asm.R3, -16),
			ins(asm.LoadMem(asm.R0, asm.R3, 0, asm.DWord), asm.Return())), nil},
		{"string read up to its NUL", cat(ins(asm.StoreImm(asm.R10, -8, 'a', asm.Byte), asm.StoreImm(asm.R10, -7, 0, asm.Byte)),
			stackPtr(asm.R1, -8), ins(call(jit.HelperPuts)), ret0), nil},
		{"key then record in the same slot", cat(ins(asm.StoreImm(asm.R10, -8, 0, asm.Word)), lookupAt("arr", -8),
			ins(stdw(asm.R10, -8, 7)), stackPtr(asm.R4, -8), ins(asm.LoadMapPtr(asm.R2, 0).WithReference("ring"),
				asm.Mov.Imm(asm.R1, 0), asm.Mov.Imm(asm.R3, 0), asm.Mov.Imm(asm.R5, 8), asm.FnPerfEventOutput.Call()), ret0),
			[]int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := verifyOK(t, testMaps, tt.insns); !slices.Equal(res.DeadStores, tt.dead) {
				t.Fatalf("DeadStores = %v, want %v", res.DeadStores, tt.dead)
			}
		})
	}
}

// TestStackEscaped: frame bytes escape when a run reaches them through a
// pointer other than r10 (a copy of r10, a helper's buffer, a key the
// compiler loads through its pointer); a folded key, a key loaded from the
// frame and plain r10+off accesses do not.
func TestStackEscaped(t *testing.T) {
	tests := []struct {
		name   string
		insns  asm.Instructions
		lo, hi int64
		want   bool
	}{
		{"spill at r10-8", ins(stdw(asm.R10, -8, 1), asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()), -8, 0, false},
		{"folded key", cat(ins(asm.StoreImm(asm.R10, -4, 1, asm.Word)), lookupAt("arr", -4), ret0), -4, 0, false},
		{"key loaded from the frame", cat(ins(call(jit.HelperKtimeGetNs), asm.StoreMem(asm.R10, -4, asm.R0, asm.Word)),
			lookupAt("arr", -4), ret0), -4, 0, false},
		{"host map key", cat(ins(stdw(asm.R10, -8, 1)), lookupAt("hash", -8), ret0), -8, 0, true},
		{"copy of r10", cat(ins(stdw(asm.R10, -16, 1)), stackPtr(asm.R3, -16),
			ins(asm.LoadMem(asm.R0, asm.R3, 0, asm.DWord), asm.Return())), -16, -8, true},
		{"ring record at a known offset and size (StackData)", cat(ins(stdw(asm.R10, -8, 7)), stackPtr(asm.R4, -8), ins(asm.LoadMapPtr(asm.R2, 0).WithReference("ring"),
			asm.Mov.Imm(asm.R1, 0), asm.Mov.Imm(asm.R3, 0), asm.Mov.Imm(asm.R5, 8), asm.FnPerfEventOutput.Call()), ret0), -8, 0, false},
		{"ring record of 4 bytes", cat(ins(stdw(asm.R10, -8, 7)), stackPtr(asm.R4, -8), ins(asm.LoadMapPtr(asm.R2, 0).WithReference("ring"),
			asm.Mov.Imm(asm.R1, 0), asm.Mov.Imm(asm.R3, 0), asm.Mov.Imm(asm.R5, 4), asm.FnPerfEventOutput.Call()), ret0), -8, 0, true},
		{"other bytes of a frame with a buffer", cat(ins(stdw(asm.R10, -16, 3), stdw(asm.R10, -8, 7)), stackPtr(asm.R4, -8),
			ins(asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.Mov.Imm(asm.R1, 0), asm.Mov.Imm(asm.R3, 0),
				asm.Mov.Imm(asm.R5, 8), asm.FnPerfEventOutput.Call(), asm.LoadMem(asm.R0, asm.R10, -16, asm.DWord), asm.Return())),
			-16, -8, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verifyOK(t, testMaps, tt.insns).StackEscaped(0, tt.lo, tt.hi); got != tt.want {
				t.Fatalf("StackEscaped(0, %d, %d) = %v, want %v", tt.lo, tt.hi, got, tt.want)
			}
		})
	}
}
