package record

import "fmt"

// StackHeaderSize is the size of a Stack record without its words.
const StackHeaderSize = 32

// MaxStackWords bounds the words of one Stack record (a ring slot of
// 64 KiB could hold more; no producer writes that many).
const MaxStackWords = 255

// StackFlags are the flags of a Stack record.
type StackFlags uint8

// Stack flags.
const (
	// StackLast marks the last part of a stack.
	StackLast StackFlags = 1
	// StackNativeCut: the native walk stopped at its depth bound, not at
	// the end of the frame chain.
	StackNativeCut StackFlags = 2
	// StackPythonCut: the Python walk stopped at its depth bound.
	StackPythonCut StackFlags = 4
	// StackPythonUnknown: the thread runs a CPython whose layout the shim
	// does not know (or could not verify): no Python frames.
	StackPythonUnknown StackFlags = 8

	knownStackFlags = StackLast | StackNativeCut | StackPythonCut | StackPythonUnknown
)

// Stack is one part of the launching thread's stack of a sampled launch
// (type 15, 32 + 8 × words bytes). The shim writes the parts of a stack
// into the launch ring on the launching thread just before the launch
// record of launch_id, so they precede it; a stack longer than a ring
// slot is cut into parts numbered from 0, the last flagged StackLast.
// Words are native return addresses (innermost first, the shim's own
// frames left out), then two words per Python frame (innermost first):
// the code object's address and the frame's instruction pointer
// (CPython 3.11+: the _Py_CODEUNIT address of the last instruction run;
// 3.10: f_lasti, the index of that code unit), resolved by the collector
// from the process's memory:
//
//	offset  0  prefix {u16 type = 15, u16 version = 1, u32 size = 32 + 8 × (native + 2 × python)}
//	offset  8  u64 launch_id    the launch record this stack belongs to
//	offset 16  u32 pid          process id (tgid)
//	offset 20  u32 tid          the launching thread
//	offset 24  u8  part         index of this part, from 0
//	offset 25  u8  flags        StackFlags
//	offset 26  u8  native       native frames in this part
//	offset 27  u8  python       Python frames in this part
//	offset 28  u16 py_version   the interpreter's major << 8 | minor (0x030b: 3.11); 0 without Python
//	offset 30  u16 reserved     zero
//	offset 32  u64 words[native + 2 × python]
type Stack struct {
	LaunchID  uint64
	PID       uint32
	TID       uint32
	Part      uint8
	Flags     StackFlags
	PyVersion uint16
	Native    []uint64 // return addresses, innermost first
	Python    []PyFrame
}

// PyFrame is one Python frame of a Stack record.
type PyFrame struct {
	Code  uint64 // PyCodeObject address
	Instr uint64 // instruction pointer (3.11+) or f_lasti (3.10)
}

// Decode fills s from the record in b; its slices are reused.
func (s *Stack) Decode(b []byte) error {
	p, err := ParsePrefix(b)
	if err != nil {
		return err
	}
	if p.Type != TypeStack {
		return &DecodeError{Type: TypeStack, Field: "type", Offset: 0, Reason: fmt.Sprintf("is %s, not %s", p.Type, TypeStack)}
	}
	if p.Version != Version {
		return &DecodeError{Type: TypeStack, Field: "version", Offset: 2, Reason: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	}
	if p.Size < StackHeaderSize {
		return &DecodeError{Type: TypeStack, Field: "size", Offset: 4, Reason: fmt.Sprintf("must be ≥ %d, got %d", StackHeaderSize, p.Size)}
	}
	nat, py := int(b[26]), int(b[27])
	if words := nat + 2*py; words > MaxStackWords || int(p.Size) != StackHeaderSize+8*words {
		return &DecodeError{Type: TypeStack, Field: "size", Offset: 4,
			Reason: fmt.Sprintf("must be %d for %d native and %d Python frames, got %d", StackHeaderSize+8*words, nat, py, p.Size)}
	}
	fl := StackFlags(b[25])
	if fl&^knownStackFlags != 0 {
		return &DecodeError{Type: TypeStack, Field: "flags", Offset: 25, Reason: fmt.Sprintf("unknown flags %#x", uint8(fl&^knownStackFlags))}
	}
	if le16(b, 30) != 0 {
		return &DecodeError{Type: TypeStack, Field: "reserved", Offset: 30, Reason: "must be zero"}
	}
	*s = Stack{LaunchID: le64(b, 8), PID: le32(b, 16), TID: le32(b, 20), Part: b[24], Flags: fl,
		PyVersion: le16(b, 28), Native: s.Native[:0], Python: s.Python[:0]}
	off := StackHeaderSize
	for range nat {
		s.Native = append(s.Native, le64(b, off))
		off += 8
	}
	for range py {
		s.Python = append(s.Python, PyFrame{Code: le64(b, off), Instr: le64(b, off+8)})
		off += 16
	}
	return nil
}

// Append appends the encoded record to b.
func (s *Stack) Append(b []byte) []byte {
	size := StackHeaderSize + 8*(len(s.Native)+2*len(s.Python))
	b, r := grow(b, size)
	putPrefix(r, TypeStack, size)
	put64(r, 8, s.LaunchID)
	put32(r, 16, s.PID)
	put32(r, 20, s.TID)
	r[24], r[25] = s.Part, uint8(s.Flags)
	r[26], r[27] = uint8(len(s.Native)), uint8(len(s.Python))
	put16(r, 28, s.PyVersion)
	off := StackHeaderSize
	for _, a := range s.Native {
		put64(r, off, a)
		off += 8
	}
	for _, f := range s.Python {
		put64(r, off, f.Code)
		put64(r, off+8, f.Instr)
		off += 16
	}
	return b
}
