package verifier

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// btfLine is a source line as cilium/ebpf's btf.Line offers it.
type btfLine struct {
	file, text string
	num        uint32
}

func (l btfLine) String() string     { return l.text }
func (l btfLine) FileName() string   { return l.file }
func (l btfLine) LineNumber() uint32 { return l.num }

// TestLineZero checks that a rejection at an instruction whose BTF line is
// 0 (clang's mark for code of no source line) names the closest real line
// before it, not "file.c:0".
func TestLineZero(t *testing.T) {
	tests := []struct {
		name  string
		first asm.Instruction
		want  string
	}{
		{"real line before", asm.Mov.Imm(asm.R1, 0).WithSource(btfLine{"/src/p.c", "x = *p;", 12}),
			`insn 1 (p.c:12 "x = *p;"): r1 is a number (scalar 0), not a pointer: it cannot be dereferenced`},
		{"only line 0", asm.Mov.Imm(asm.R1, 0).WithSource(btfLine{"/src/p.c", "", 0}),
			`insn 1: r1 is a number (scalar 0), not a pointer: it cannot be dereferenced`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &jit.Program{Insns: ins(
				tc.first,
				asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord).WithSource(btfLine{"/src/p.c", "", 0}),
				asm.Return())}
			_, err := Verify(p, Options{})
			var ve *Error
			if !errors.As(err, &ve) || err.Error() != tc.want {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
