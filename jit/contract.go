package jit

import "fmt"

// MaxSize bounds the value of an ArgSize argument: the verifier refuses a
// call whose size it cannot bound by this, so that a helper's copy stays
// small whatever the program computes.
const MaxSize = 1 << 16

// Contract says in words what helper argument a (0 for r1) touches, as
// ArgAccess computes it; ok is false when the argument is not a pointer
// the helper reads or writes. docs/gpu-programs.md lists every helper's
// contracts (jit's TestContractDocs checks the two agree).
func (s Signature) Contract(a int) (text string, ok bool) {
	if a < 0 || a >= len(s.Args) {
		return "", false
	}
	mapReg := 0
	for k, at := range s.Args {
		if at == ArgMap || at == ArgRingbuf {
			mapReg = k + 1
		}
	}
	switch s.Args[a] {
	case ArgMapKey:
		return fmt.Sprintf("reads the key size of the map in r%d", mapReg), true
	case ArgMapValue:
		return fmt.Sprintf("reads the value size of the map in r%d", mapReg), true
	case ArgMem:
		if s.MaxLen > 0 {
			return fmt.Sprintf("reads r%d bytes, at most %d", a+2, s.MaxLen), true
		}
		return fmt.Sprintf("reads r%d bytes (r%d at most %d)", a+2, a+2, MaxSize), true
	case ArgString:
		return fmt.Sprintf("reads up to its first NUL, included, at most %d bytes", s.MaxLen), true
	case ArgOut8:
		return "writes 8 bytes", true
	case ArgAtomic8:
		return "reads and writes 8 bytes, 8-byte aligned, at once", true
	}
	return "", false
}
