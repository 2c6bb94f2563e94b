package verifier

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/asm"
)

// Error is a rejection: which instruction, the source line BTF gives for it
// (if any), and why.
type Error struct {
	Index  int    // index in Program.Insns (-1: the program as a whole)
	Raw    int    // offset in raw 8-byte instruction slots (LD_IMM64 takes two)
	Line   string // source location and text from BTF line info, or ""
	Reason string // what is wrong, in words
}

// Error formats the rejection as `insn 12 (foo.c:34 "x = *p"): reason`.
func (e *Error) Error() string {
	switch {
	case e.Index < 0:
		return "program: " + e.Reason
	case e.Line != "":
		return fmt.Sprintf("insn %d (%s): %s", e.Index, e.Line, e.Reason)
	}
	return fmt.Sprintf("insn %d: %s", e.Index, e.Reason)
}

// sourceLine is what cilium/ebpf's btf.Line offers beyond fmt.Stringer.
type sourceLine interface {
	FileName() string
	LineNumber() uint32
}

// lineOf renders the BTF source information of ins, if any. Line 0 is
// clang's mark for code of no source line (spills, hoisted addresses): it
// renders as "", so that lineAt looks further back for a real line.
func lineOf(ins *asm.Instruction) string {
	src := ins.Source()
	if src == nil {
		return ""
	}
	text := strings.TrimSpace(src.String())
	if sl, ok := src.(sourceLine); ok && sl.LineNumber() == 0 {
		return ""
	}
	if sl, ok := src.(sourceLine); ok && sl.FileName() != "" {
		loc := fmt.Sprintf("%s:%d", filepath.Base(sl.FileName()), sl.LineNumber())
		if text == "" {
			return loc
		}
		return fmt.Sprintf("%s %q", loc, text)
	}
	if text == "" {
		return ""
	}
	return fmt.Sprintf("%q", text)
}
