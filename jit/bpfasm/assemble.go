package bpfasm

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"
)

// Line is the source of one assembled instruction; Assemble attaches it to
// each instruction with asm.Instruction.WithSource.
type Line struct {
	Num  int    // 1-based line number in the assembly text
	Text string // the instruction as written, without comment
}

// String renders the line as `line 12: add32 %r0, 1`.
func (l Line) String() string { return fmt.Sprintf("line %d: %s", l.Num, l.Text) }

// Error is an assembly error at one line of the input.
type Error struct {
	Line   int    // 1-based line number
	Text   string // the offending line, without comment
	Reason string // what is wrong
}

// Error reads like `line 3 "ldxq %r0, %r1": unknown mnemonic "ldxq"`.
func (e *Error) Error() string {
	return fmt.Sprintf("line %d %q: %s", e.Line, e.Text, e.Reason)
}

type fixup struct {
	slot  int    // slot holding the jump or call
	label string // target label
	imm   bool   // the target goes into imm (ja32, call local) instead of offset
	line  int
	text  string
}

type assembler struct {
	slots   []Raw
	lines   []Line // one per slot
	labels  map[string]int
	fixups  []fixup
	curLine Line
}

// Assemble translates the bpf_conformance text assembly in src (mnemonics
// such as mov32, lddw, ldxh, stxdw, jeq, ja32, call, lock fetch add, be16,
// movsx832; labels `name:`; comments after '#') into instructions. A jump
// to the label `exit` that is not defined goes to the first exit
// instruction. Every error is an *Error naming the line.
func Assemble(src string) (asm.Instructions, error) {
	a := &assembler{labels: map[string]int{}}
	firstExit := -1
	for n, text := range strings.Split(src, "\n") {
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		text = strings.TrimSpace(text)
		for text != "" {
			head, rest, _ := strings.Cut(text, " ")
			if !strings.HasSuffix(head, ":") {
				break
			}
			label := strings.TrimSuffix(head, ":")
			if !isIdent(label) {
				return nil, &Error{n + 1, text, fmt.Sprintf("invalid label name %q", label)}
			}
			if _, dup := a.labels[label]; dup {
				return nil, &Error{n + 1, text, fmt.Sprintf("label %q is defined twice", label)}
			}
			a.labels[label] = len(a.slots)
			text = strings.TrimSpace(rest)
		}
		if text == "" {
			continue
		}
		a.curLine = Line{Num: n + 1, Text: text}
		before := len(a.slots)
		if err := a.instruction(text); err != nil {
			return nil, &Error{n + 1, text, err.Error()}
		}
		if firstExit < 0 && len(a.slots) > before && a.slots[before].Op == 0x95 {
			firstExit = before
		}
	}
	if len(a.slots) == 0 {
		return nil, errors.New("no instructions")
	}
	if _, ok := a.labels["exit"]; !ok && firstExit >= 0 {
		a.labels["exit"] = firstExit
	}
	for _, f := range a.fixups {
		target, ok := a.labels[f.label]
		if !ok {
			return nil, &Error{f.line, f.text, fmt.Sprintf("undefined label %q", f.label)}
		}
		rel := target - f.slot - 1
		if f.imm {
			a.slots[f.slot].Imm = int32(rel)
		} else {
			if rel < math.MinInt16 || rel > math.MaxInt16 {
				return nil, &Error{f.line, f.text, fmt.Sprintf("label %q is %d slots away, beyond a 16-bit offset (use ja32)", f.label, rel)}
			}
			a.slots[f.slot].Off = int16(rel)
		}
	}
	insns, err := Decode(Encode(a.slots))
	if err != nil {
		return nil, err
	}
	slot := 0
	for i := range insns {
		insns[i] = insns[i].WithSource(a.lines[slot])
		slot += int(insns[i].Width())
	}
	return insns, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

func (a *assembler) emit(r Raw) int {
	a.slots = append(a.slots, r)
	a.lines = append(a.lines, a.curLine)
	return len(a.slots) - 1
}

// splitOperands splits "a, b, c" into trimmed operands.
func splitOperands(rest string) []string {
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return nil
	}
	parts := strings.Split(rest, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func want(mn string, ops []string, n int) error {
	if len(ops) != n {
		return fmt.Errorf("%s takes %d operand(s), got %d", mn, n, len(ops))
	}
	for i, op := range ops {
		if op == "" {
			return fmt.Errorf("%s: operand %d is empty", mn, i+1)
		}
	}
	return nil
}

var aluOps = map[string]struct {
	op  uint8
	off int16
}{
	"add": {0x00, 0}, "sub": {0x10, 0}, "mul": {0x20, 0}, "div": {0x30, 0}, "sdiv": {0x30, 1},
	"or": {0x40, 0}, "and": {0x50, 0}, "lsh": {0x60, 0}, "rsh": {0x70, 0}, "neg": {0x80, 0},
	"mod": {0x90, 0}, "smod": {0x90, 1}, "xor": {0xa0, 0}, "mov": {0xb0, 0}, "arsh": {0xc0, 0},
}

var jmpOps = map[string]uint8{
	"jeq": 0x10, "jgt": 0x20, "jge": 0x30, "jset": 0x40, "jne": 0x50, "jsgt": 0x60, "jsge": 0x70,
	"jlt": 0xa0, "jle": 0xb0, "jslt": 0xc0, "jsle": 0xd0,
}

var memSizes = map[string]uint8{"b": 0x10, "h": 0x08, "w": 0x00, "dw": 0x18}

var atomicOps = map[string]int32{"add": 0x00, "or": 0x40, "and": 0x50, "xor": 0xa0, "xchg": 0xe1, "cmpxchg": 0xf1}

func (a *assembler) instruction(text string) error {
	mn, rest, _ := strings.Cut(text, " ")
	mn = strings.ToLower(mn)
	ops := splitOperands(rest)

	switch {
	case mn == "exit":
		if err := want(mn, ops, 0); err != nil {
			return err
		}
		a.emit(Raw{Op: 0x95})
		return nil
	case mn == "lddw":
		if err := want(mn, ops, 2); err != nil {
			return err
		}
		dst, err := reg(ops[0])
		if err != nil {
			return err
		}
		v, err := imm64(ops[1])
		if err != nil {
			return err
		}
		a.emit(Raw{Op: 0x18, Dst: dst, Imm: int32(uint32(v))})
		a.emit(Raw{Imm: int32(uint32(v >> 32))})
		return nil
	case mn == "call":
		return a.call(ops)
	case mn == "callx":
		if err := want(mn, ops, 1); err != nil {
			return err
		}
		r, err := reg(ops[0])
		if err != nil {
			return err
		}
		a.emit(Raw{Op: 0x8d, Dst: r})
		return nil
	case mn == "ja" || mn == "ja32" || mn == "gotol":
		if err := want(mn, ops, 1); err != nil {
			return err
		}
		if mn == "ja" {
			return a.jumpTarget(a.emit(Raw{Op: 0x05}), ops[0], false)
		}
		return a.jumpTarget(a.emit(Raw{Op: 0x06}), ops[0], true)
	case mn == "lock":
		return a.lock(rest)
	case strings.HasPrefix(mn, "movsx"):
		return a.movsx(mn, ops)
	}
	if w, ok := endian(mn); ok {
		if err := want(mn, ops, 1); err != nil {
			return err
		}
		dst, err := reg(ops[0])
		if err != nil {
			return err
		}
		var op uint8
		switch {
		case strings.HasPrefix(mn, "le"):
			op = 0xd4
		case strings.HasPrefix(mn, "be"):
			op = 0xdc
		default:
			op = 0xd7
		}
		a.emit(Raw{Op: op, Dst: dst, Imm: w})
		return nil
	}
	if strings.HasPrefix(mn, "ldx") || strings.HasPrefix(mn, "stx") || strings.HasPrefix(mn, "st") {
		if ok, err := a.mem(mn, ops); ok || err != nil {
			return err
		}
	}
	base, cls := mn, uint8(0x07)
	switch {
	case strings.HasSuffix(mn, "32"):
		base, cls = strings.TrimSuffix(mn, "32"), 0x04
	case strings.HasSuffix(mn, "64"):
		base = strings.TrimSuffix(mn, "64")
	}
	if alu, ok := aluOps[base]; ok {
		return a.alu(mn, alu.op|cls, alu.off, ops)
	}
	if j, ok := jmpOps[base]; ok && !strings.HasSuffix(mn, "64") {
		jcls := uint8(0x05)
		if cls == 0x04 {
			jcls = 0x06
		}
		return a.cond(mn, j|jcls, ops)
	}
	return fmt.Errorf("unknown mnemonic %q", mn)
}

// endian recognises le16..le64, be16..be64, swap16..swap64, bswap16..bswap64.
func endian(mn string) (int32, bool) {
	for _, p := range []string{"le", "be", "bswap", "swap"} {
		if w, ok := strings.CutPrefix(mn, p); ok {
			switch w {
			case "16":
				return 16, true
			case "32":
				return 32, true
			case "64":
				return 64, true
			}
		}
	}
	return 0, false
}

func (a *assembler) alu(mn string, op uint8, off int16, ops []string) error {
	if op&0xf0 == 0x80 { // neg
		if err := want(mn, ops, 1); err != nil {
			return err
		}
		dst, err := reg(ops[0])
		if err != nil {
			return err
		}
		a.emit(Raw{Op: op, Dst: dst})
		return nil
	}
	if err := want(mn, ops, 2); err != nil {
		return err
	}
	dst, err := reg(ops[0])
	if err != nil {
		return err
	}
	if strings.HasPrefix(ops[1], "%") {
		src, err := reg(ops[1])
		if err != nil {
			return err
		}
		a.emit(Raw{Op: op | 0x08, Dst: dst, Src: src, Off: off})
		return nil
	}
	v, err := imm32(ops[1])
	if err != nil {
		return err
	}
	a.emit(Raw{Op: op, Dst: dst, Off: off, Imm: v})
	return nil
}

func (a *assembler) movsx(mn string, ops []string) error {
	forms := map[string]Raw{
		"movsx832": {Op: 0xbc, Off: 8}, "movsx1632": {Op: 0xbc, Off: 16},
		"movsx864": {Op: 0xbf, Off: 8}, "movsx1664": {Op: 0xbf, Off: 16}, "movsx3264": {Op: 0xbf, Off: 32},
	}
	r, ok := forms[mn]
	if !ok {
		return fmt.Errorf("unknown mnemonic %q (sign-extending moves are movsx832, movsx1632, movsx864, movsx1664, movsx3264)", mn)
	}
	if err := want(mn, ops, 2); err != nil {
		return err
	}
	var err error
	if r.Dst, err = reg(ops[0]); err != nil {
		return err
	}
	if r.Src, err = reg(ops[1]); err != nil {
		return err
	}
	a.emit(r)
	return nil
}

func (a *assembler) cond(mn string, op uint8, ops []string) error {
	if err := want(mn, ops, 3); err != nil {
		return err
	}
	dst, err := reg(ops[0])
	if err != nil {
		return err
	}
	r := Raw{Op: op, Dst: dst}
	if strings.HasPrefix(ops[1], "%") {
		if r.Src, err = reg(ops[1]); err != nil {
			return err
		}
		r.Op |= 0x08
	} else if r.Imm, err = imm32(ops[1]); err != nil {
		return err
	}
	return a.jumpTarget(a.emit(r), ops[2], false)
}

// jumpTarget sets a relative target (+N / -N) now, or records a label fixup.
func (a *assembler) jumpTarget(slot int, target string, inImm bool) error {
	if strings.HasPrefix(target, "+") || strings.HasPrefix(target, "-") {
		v, err := strconv.ParseInt(target, 0, 64)
		if err != nil {
			return fmt.Errorf("jump offset %q is not a number", target)
		}
		if inImm {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("jump offset %s does not fit in 32 bits", target)
			}
			a.slots[slot].Imm = int32(v)
			return nil
		}
		if v < math.MinInt16 || v > math.MaxInt16 {
			return fmt.Errorf("jump offset %s does not fit in 16 bits", target)
		}
		a.slots[slot].Off = int16(v)
		return nil
	}
	if !isIdent(target) {
		return fmt.Errorf("jump target %q is neither +N/-N nor a label", target)
	}
	a.fixups = append(a.fixups, fixup{slot: slot, label: target, imm: inImm, line: a.curLine.Num, text: a.curLine.Text})
	return nil
}

func (a *assembler) call(ops []string) error {
	switch {
	case len(ops) == 1 && strings.HasPrefix(ops[0], "%"):
		r, err := reg(ops[0])
		if err != nil {
			return err
		}
		a.emit(Raw{Op: 0x8d, Dst: r})
		return nil
	case len(ops) == 1:
		fields := strings.Fields(ops[0])
		mode, target := "helper", ops[0]
		if len(fields) == 2 {
			mode, target = fields[0], fields[1]
		} else if len(fields) != 1 {
			return fmt.Errorf("call takes `call N`, `call helper N`, `call local LABEL` or `call %%rN`")
		}
		switch mode {
		case "helper":
			v, err := imm32(target)
			if err != nil {
				return err
			}
			a.emit(Raw{Op: 0x85, Imm: v})
			return nil
		case "local":
			return a.jumpTarget(a.emit(Raw{Op: 0x85, Src: 1}), target, true)
		case "runtime":
			return fmt.Errorf("runtime (kfunc) calls are not supported")
		}
		return fmt.Errorf("unknown call mode %q (helper or local)", mode)
	}
	return fmt.Errorf("call takes 1 operand, got %d", len(ops))
}

func (a *assembler) mem(mn string, ops []string) (bool, error) {
	var cls, mode uint8
	var sz string
	switch {
	case strings.HasPrefix(mn, "ldxs"):
		cls, mode, sz = 0x01, 0x80, mn[4:]
		if sz == "dw" {
			return true, fmt.Errorf("there is no sign-extending 64-bit load %q", mn)
		}
	case strings.HasPrefix(mn, "ldx"):
		cls, mode, sz = 0x01, 0x60, mn[3:]
	case strings.HasPrefix(mn, "stx"):
		cls, mode, sz = 0x03, 0x60, mn[3:]
	default:
		cls, mode, sz = 0x02, 0x60, mn[2:]
	}
	size, ok := memSizes[sz]
	if !ok {
		return false, nil
	}
	if err := want(mn, ops, 2); err != nil {
		return true, err
	}
	r := Raw{Op: cls | mode | size}
	var err error
	switch cls {
	case 0x01:
		if r.Dst, err = reg(ops[0]); err != nil {
			return true, err
		}
		r.Src, r.Off, err = memOperand(ops[1])
	case 0x02:
		if r.Dst, r.Off, err = memOperand(ops[0]); err != nil {
			return true, err
		}
		r.Imm, err = imm32(ops[1])
	default:
		if r.Dst, r.Off, err = memOperand(ops[0]); err != nil {
			return true, err
		}
		r.Src, err = reg(ops[1])
	}
	if err != nil {
		return true, err
	}
	a.emit(r)
	return true, nil
}

// lock parses `lock [fetch] OP[32] [%rD+off], %rS`.
func (a *assembler) lock(rest string) error {
	ops := splitOperands(rest)
	if len(ops) != 2 || ops[1] == "" {
		return fmt.Errorf("invalid number of operands for lock: want `lock [fetch] op [%%rD+off], %%rS`")
	}
	words := strings.Fields(ops[0])
	fetch := false
	if len(words) > 0 && words[0] == "fetch" {
		fetch, words = true, words[1:]
	}
	if len(words) != 2 {
		return fmt.Errorf("invalid number of operands for lock: want `lock [fetch] op [%%rD+off], %%rS`")
	}
	name, size := words[0], uint8(0x18)
	if n, ok := strings.CutSuffix(name, "32"); ok {
		name, size = n, 0x00
	} else {
		name = strings.TrimSuffix(name, "64")
	}
	imm, ok := atomicOps[name]
	if !ok {
		return fmt.Errorf("unknown atomic operation %q (add, or, and, xor, xchg, cmpxchg)", words[0])
	}
	if fetch {
		if imm == 0xe1 || imm == 0xf1 {
			return fmt.Errorf("%s always fetches; drop `fetch`", name)
		}
		imm |= 0x01
	}
	dst, off, err := memOperand(words[1])
	if err != nil {
		return err
	}
	src, err := reg(ops[1])
	if err != nil {
		return err
	}
	a.emit(Raw{Op: 0xc3 | size, Dst: dst, Src: src, Off: off, Imm: imm})
	return nil
}
