package bpfasm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"
)

// Raw is one 8-byte instruction slot exactly as it is encoded (RFC 9669 §3).
type Raw struct {
	Op  uint8 // opcode byte
	Dst uint8 // destination register (low nibble of byte 1)
	Src uint8 // source register (high nibble of byte 1)
	Off int16 // signed offset
	Imm int32 // signed immediate
}

// put writes r little-endian into b[0:8].
func (r Raw) put(b []byte) {
	b[0] = r.Op
	b[1] = r.Dst&0xf | r.Src<<4
	binary.LittleEndian.PutUint16(b[2:4], uint16(r.Off))
	binary.LittleEndian.PutUint32(b[4:8], uint32(r.Imm))
}

// rawAt decodes the slot at b[8*i:].
func rawAt(b []byte, i int) Raw {
	s := b[8*i : 8*i+8]
	return Raw{
		Op:  s[0],
		Dst: s[1] & 0xf,
		Src: s[1] >> 4,
		Off: int16(binary.LittleEndian.Uint16(s[2:4])),
		Imm: int32(binary.LittleEndian.Uint32(s[4:8])),
	}
}

// Encode returns the little-endian bytes of slots.
func Encode(slots []Raw) []byte {
	b := make([]byte, 8*len(slots))
	for i, r := range slots {
		r.put(b[8*i:])
	}
	return b
}

// Decode checks every reserved field of the little-endian instruction
// stream b (see Check) and decodes it into cilium/ebpf instructions.
func Decode(b []byte) (asm.Instructions, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("no instructions")
	}
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("instruction stream is %d bytes, not a multiple of 8 (trailing bytes at offset %d)", len(b), len(b)-len(b)%8)
	}
	if err := Check(b); err != nil {
		return nil, err
	}
	var insns asm.Instructions
	r := bytes.NewReader(b)
	for slot := 0; r.Len() > 0; {
		var ins asm.Instruction
		if err := ins.Unmarshal(r, binary.LittleEndian, "linux"); err != nil {
			return nil, fmt.Errorf("insn %d (byte offset %d): %w", slot, 8*slot, err)
		}
		insns = append(insns, ins)
		slot += int(ins.Width())
	}
	return insns, nil
}

// Check validates the opcode and the reserved fields of every slot of the
// little-endian instruction stream b, as RFC 9669 defines them: unknown
// opcodes, registers above r10 and non-zero fields that an opcode does not
// use are errors naming the slot index ("insn N").
func Check(b []byte) error {
	n := len(b) / 8
	for i := 0; i < n; i++ {
		r := rawAt(b, i)
		if r.Op == 0x18 { // LDDW takes two slots
			if i+1 >= n {
				return fmt.Errorf("insn %d: lddw is missing its second slot", i)
			}
			if err := checkLDDW(r, rawAt(b, i+1)); err != nil {
				return fmt.Errorf("insn %d: %w", i, err)
			}
			i++
			continue
		}
		if err := checkSlot(r); err != nil {
			return fmt.Errorf("insn %d (%s): %w", i, hexSlot(r), err)
		}
	}
	return nil
}

// hexSlot renders a slot as its eight bytes, the way -- raw sections do.
func hexSlot(r Raw) string {
	var b [8]byte
	r.put(b[:])
	parts := make([]string, 8)
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(parts, " ")
}

func checkLDDW(r, next Raw) error {
	switch r.Src {
	case 0, uint8(asm.PseudoMapFD), uint8(asm.PseudoMapValue), uint8(asm.PseudoFunc):
	default:
		return fmt.Errorf("lddw: unsupported src %d (0 = imm64, 1 = map, 2 = map value, 4 = function)", r.Src)
	}
	if r.Dst > 10 {
		return fmt.Errorf("lddw: dst register r%d does not exist", r.Dst)
	}
	if r.Off != 0 {
		return fmt.Errorf("lddw: reserved offset is %d, must be 0", r.Off)
	}
	if next.Op != 0 || next.Dst != 0 || next.Src != 0 || next.Off != 0 {
		return fmt.Errorf("lddw: second slot must have opcode, registers and offset 0 (got %s)", hexSlot(next))
	}
	return nil
}

// field reports a non-zero reserved field.
func field(name string, v int64) error {
	if v != 0 {
		return fmt.Errorf("reserved field %s is %d, must be 0", name, v)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkSlot(r Raw) error {
	if r.Dst > 10 {
		return fmt.Errorf("dst register r%d does not exist", r.Dst)
	}
	if r.Src > 10 {
		return fmt.Errorf("src register r%d does not exist", r.Src)
	}
	cls := r.Op & 0x07
	switch cls {
	case 0x00: // LD
		return fmt.Errorf("opcode 0x%02x: legacy packet loads and LD modes other than lddw are not supported", r.Op)
	case 0x01: // LDX
		mode, size := r.Op&0xe0, r.Op&0x18
		switch {
		case mode == 0x60:
		case mode == 0x80 && size != 0x18:
		default:
			return fmt.Errorf("opcode 0x%02x: unknown load mode", r.Op)
		}
		return field("imm", int64(r.Imm))
	case 0x02: // ST
		if r.Op&0xe0 != 0x60 {
			return fmt.Errorf("opcode 0x%02x: unknown store mode", r.Op)
		}
		return field("src", int64(r.Src))
	case 0x03: // STX
		mode, size := r.Op&0xe0, r.Op&0x18
		switch mode {
		case 0x60:
			return field("imm", int64(r.Imm))
		case 0xc0:
			if size != 0x00 && size != 0x18 {
				return fmt.Errorf("opcode 0x%02x: atomics are 32 or 64 bits wide", r.Op)
			}
			switch r.Imm {
			case 0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xa0, 0xa1, 0xe1, 0xf1:
				return nil
			}
			return fmt.Errorf("opcode 0x%02x: unknown atomic operation imm 0x%x", r.Op, uint32(r.Imm))
		}
		return fmt.Errorf("opcode 0x%02x: unknown store mode", r.Op)
	case 0x04, 0x07: // ALU, ALU64
		return checkALU(r, cls == 0x07)
	default: // JMP, JMP32
		return checkJump(r, cls == 0x06)
	}
}

func checkALU(r Raw, is64 bool) error {
	op, x := r.Op&0xf0, r.Op&0x08 != 0
	switch op {
	case 0xd0: // END
		if is64 && x {
			return fmt.Errorf("opcode 0x%02x: unknown byte swap", r.Op)
		}
		if r.Imm != 16 && r.Imm != 32 && r.Imm != 64 {
			return fmt.Errorf("byte swap width imm is %d, must be 16, 32 or 64", r.Imm)
		}
		return firstErr(field("src", int64(r.Src)), field("offset", int64(r.Off)))
	case 0x80: // NEG
		if x {
			return fmt.Errorf("opcode 0x%02x: neg takes no source register", r.Op)
		}
		return firstErr(field("src", int64(r.Src)), field("offset", int64(r.Off)), field("imm", int64(r.Imm)))
	case 0xe0, 0xf0:
		return fmt.Errorf("opcode 0x%02x: unknown ALU operation", r.Op)
	}
	switch {
	case r.Off == 0:
	case (op == 0x30 || op == 0x90) && r.Off == 1: // sdiv, smod
	case op == 0xb0 && x && (r.Off == 8 || r.Off == 16 || (is64 && r.Off == 32)): // movsx
	default:
		return fmt.Errorf("reserved field offset is %d, must be 0", r.Off)
	}
	if x {
		return field("imm", int64(r.Imm))
	}
	return field("src", int64(r.Src))
}

func checkJump(r Raw, is32 bool) error {
	op, x := r.Op&0xf0, r.Op&0x08 != 0
	switch op {
	case 0x00: // JA
		if x {
			return fmt.Errorf("opcode 0x%02x: ja takes no source register", r.Op)
		}
		if is32 { // gotol: the target is in imm
			return firstErr(field("dst", int64(r.Dst)), field("src", int64(r.Src)), field("offset", int64(r.Off)))
		}
		return firstErr(field("dst", int64(r.Dst)), field("src", int64(r.Src)), field("imm", int64(r.Imm)))
	case 0x80: // CALL
		if is32 {
			return fmt.Errorf("opcode 0x%02x: call is not a JMP32 operation", r.Op)
		}
		if x { // callx: the helper id is in dst
			return firstErr(field("src", int64(r.Src)), field("offset", int64(r.Off)), field("imm", int64(r.Imm)))
		}
		if r.Src == 2 {
			return fmt.Errorf("kfunc calls (src 2) are not supported")
		}
		if r.Src > 2 {
			return fmt.Errorf("call: src is %d, must be 0 (helper) or 1 (local function)", r.Src)
		}
		if r.Src == 0 && (r.Imm < 0 || r.Imm >= 1<<28) {
			return fmt.Errorf("call: helper id %d is out of range", r.Imm)
		}
		return firstErr(field("dst", int64(r.Dst)), field("offset", int64(r.Off)))
	case 0x90: // EXIT
		if is32 || x {
			return fmt.Errorf("opcode 0x%02x: unknown exit encoding", r.Op)
		}
		return firstErr(field("dst", int64(r.Dst)), field("src", int64(r.Src)), field("offset", int64(r.Off)), field("imm", int64(r.Imm)))
	case 0xe0, 0xf0:
		return fmt.Errorf("opcode 0x%02x: unknown jump operation", r.Op)
	}
	if x {
		return field("imm", int64(r.Imm))
	}
	return field("src", int64(r.Src))
}

// ParseHex parses the text of a -- raw section: each line is either one
// instruction slot as a 64-bit number (0x prefix; the opcode is the low
// byte), or up to eight hex bytes in memory order ("07 00 01 00 ..."). Text
// after '#' is a comment. Errors name the 1-based line.
func ParseHex(text string) ([]byte, error) {
	var out []byte
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		for _, f := range fields {
			if strings.HasPrefix(f, "0x") || strings.HasPrefix(f, "0X") {
				v, err := strconv.ParseUint(f[2:], 16, 64)
				if err != nil {
					return nil, fmt.Errorf("line %d: %q is not a 64-bit hex word", n+1, f)
				}
				out = binary.LittleEndian.AppendUint64(out, v)
				continue
			}
			if len(f) != 2 {
				return nil, fmt.Errorf("line %d: %q is neither a 0x word nor a hex byte", n+1, f)
			}
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not a hex byte", n+1, f)
			}
			out = append(out, byte(v))
		}
	}
	return out, nil
}
