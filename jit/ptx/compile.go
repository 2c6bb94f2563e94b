package ptx

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// budgetEnded is the value of the budget register after the program was
// ended early (loop budget spent, or the conformance helper "unwind"). It is
// above any real budget, so a caller can tell it from a budget of 0.
const budgetEnded = "0xffffffff"

// fn is one PTX .func: the main program or a bpf-to-bpf subprogram.
type fn struct {
	name       string
	start, end int  // instruction indexes [start, end)
	main       bool // the program's entry
	calls      bool // makes bpf-to-bpf calls
	stack      bool // uses r10
	frame      int  // bytes of its __stack (r10 = __stack + frame), with stack
	backward   bool // has backward jumps
}

// compiler holds the state of one Compile call.
type compiler struct {
	p     *jit.Program
	o     Options
	sm    int
	insns asm.Instructions

	target  []int  // for jumps and local calls: index of the target instruction
	isLabel []bool // instruction is a jump target
	funcs   []*fn
	funcOf  map[int]*fn // entry index -> function

	globals   []Global
	globalSet map[string]bool
	shared    []Shared
	needed    map[string]bool // support routines in use
	uniq      int             // counter for internal labels
	cur       *fn
	slots     map[int64]frameCell // the current function's frame cells kept in registers

	e emitter
}

// Compile translates p into PTX: one .func for the program and one per
// bpf-to-bpf subprogram, with the module-scope globals they need.
func Compile(p *jit.Program, opts Options) (*Func, error) {
	if p == nil {
		return nil, errors.New("ptx: nil program")
	}
	o, sm, err := opts.withDefaults(p)
	if err != nil {
		return nil, err
	}
	c := &compiler{p: p, o: o, sm: sm, insns: p.Insns}
	if err := c.layout(); err != nil {
		return nil, fmt.Errorf("ptx: program %q: %w", p.Name, err)
	}
	var body emitter
	body.b = make([]byte, 0, 48*len(c.insns)+4096)
	for _, f := range c.funcs {
		c.e.b = body.b
		if err := c.genFunc(f); err != nil {
			return nil, fmt.Errorf("ptx: program %q: %w", p.Name, err)
		}
		body.b = c.e.b
	}
	c.e.b = body.b
	c.genSupport()
	body.b = c.e.b
	var decls emitter
	for _, g := range c.globals {
		decls.raw(GlobalDecl(g.Name))
	}
	for _, f := range c.funcs {
		decls.raw(".func (.param .b64 __ret) ", f.name, c.params(f), ";\n")
	}
	for _, name := range supportOrder {
		if c.needed[name] {
			decls.raw(c.supportProto(name), ";\n")
		}
	}
	decls.raw("\n")
	return &Func{
		Name:    c.funcs[0].name,
		Arch:    o.Arch,
		Globals: c.globals,
		Shared:  c.shared,
		Decls:   decls.take(),
		Body:    body.take(),
	}, nil
}

// errf is an error about instruction i, naming its BTF source line if any.
func (c *compiler) errf(i int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if i >= 0 && i < len(c.insns) {
		if src := c.insns[i].Source(); src != nil {
			return fmt.Errorf("insn %d (%s): %s", i, src.String(), msg)
		}
	}
	return fmt.Errorf("insn %d: %s", i, msg)
}

// layout resolves jump targets, splits the program into functions, and
// marks the instructions that need a label.
func (c *compiler) layout() error {
	n := len(c.insns)
	if n == 0 {
		return errors.New("no instructions")
	}
	raw := make([]int, n+1)
	for i := range c.insns {
		raw[i+1] = raw[i] + int(c.insns[i].Width())
	}
	rawToIdx := make([]int32, raw[n])
	for i := range rawToIdx {
		rawToIdx[i] = -1
	}
	for i := range c.insns {
		rawToIdx[raw[i]] = int32(i)
	}
	var symbols map[string]int
	c.target = make([]int, n)
	c.isLabel = make([]bool, n)
	entries := []int{0}
	for i := range c.insns {
		ins := &c.insns[i]
		c.target[i] = -1
		cls := ins.OpCode.Class()
		if !cls.IsJump() {
			continue
		}
		op := ins.OpCode.JumpOp()
		local := op == asm.Call && ins.Src == asm.PseudoCall && ins.OpCode.Source() == asm.ImmSource
		if op == asm.Exit || (op == asm.Call && !local) {
			continue
		}
		off := int64(ins.Offset)
		if local || (cls == asm.Jump32Class && op == asm.Ja) {
			off = ins.Constant
		}
		t := -1
		if ref := ins.Reference(); ref != "" && off == -1 {
			if symbols == nil {
				symbols = make(map[string]int)
				for k := range c.insns {
					if s := c.insns[k].Symbol(); s != "" {
						symbols[s] = k
					}
				}
			}
			idx, ok := symbols[ref]
			if !ok {
				return c.errf(i, "jump to unknown symbol %q", ref)
			}
			t = idx
		} else {
			r := int64(raw[i]) + 1 + off
			if r < 0 || r >= int64(raw[n]) || rawToIdx[r] < 0 {
				return c.errf(i, "jump offset %d leads to raw slot %d, outside the program or inside an instruction", off, r)
			}
			t = int(rawToIdx[r])
		}
		c.target[i] = t
		if local {
			entries = append(entries, t)
		} else {
			c.isLabel[t] = true
		}
	}
	sort.Ints(entries)
	c.funcOf = make(map[int]*fn)
	for k, s := range entries {
		if k > 0 && entries[k-1] == s {
			continue
		}
		f := &fn{start: s, main: s == 0}
		if f.main {
			f.name = c.o.Prefix
		} else {
			f.name = c.o.Prefix + "_sub" + strconv.Itoa(s)
		}
		if len(c.funcs) > 0 {
			c.funcs[len(c.funcs)-1].end = s
		}
		c.funcs = append(c.funcs, f)
		c.funcOf[s] = f
	}
	c.funcs[len(c.funcs)-1].end = n
	for _, f := range c.funcs {
		if err := c.checkFunc(f); err != nil {
			return err
		}
	}
	return nil
}

// checkFunc checks that jumps stay inside f and that f does not fall
// through its last instruction.
func (c *compiler) checkFunc(f *fn) error {
	for i := f.start; i < f.end; i++ {
		ins := &c.insns[i]
		if ins.Dst == asm.R10 || (ins.Src == asm.R10 && !ins.OpCode.IsDWordLoad() && !ins.OpCode.Class().IsJump()) ||
			(ins.OpCode.Class().IsJump() && ins.OpCode.Source() == asm.RegSource && ins.Src == asm.R10) {
			f.stack = true
		}
		t := c.target[i]
		if t < 0 {
			continue
		}
		if ins.IsFunctionCall() {
			f.calls = true
			continue
		}
		if t < f.start || t >= f.end {
			return c.errf(i, "jump to insn %d leaves the function that starts at insn %d", t, f.start)
		}
		if t <= i {
			f.backward = true
		}
	}
	last := &c.insns[f.end-1]
	op := last.OpCode.JumpOp()
	uncond := op == asm.Exit || (op == asm.Ja && last.OpCode.Class().IsJump())
	if !uncond {
		return c.errf(f.end-1, "the function that starts at insn %d falls through its last instruction", f.start)
	}
	return nil
}

// params is the parameter list of f's .func.
func (c *compiler) params(f *fn) string {
	if f.main {
		return "(.param .b64 __ctx, .param .b64 __len)"
	}
	return "(.param .b64 __a1, .param .b64 __a2, .param .b64 __a3, .param .b64 __a4, .param .b64 __a5, .param .b64 __budp)"
}

// label names the label of instruction i.
func label(i int) string { return "$L" + strconv.Itoa(i) }

// newLabel returns a fresh internal label.
func (c *compiler) newLabel() string {
	c.uniq++
	return "$X" + strconv.Itoa(c.uniq)
}

// addGlobal declares a module-scope u64 global once and returns its name.
func (c *compiler) addGlobal(kind GlobalKind, mapName string) string {
	var name string
	switch kind {
	case GlobalMap:
		name = c.o.Prefix + "_map_" + Sanitize(mapName)
	case GlobalMailbox:
		name = c.o.Prefix + "_mailbox"
	case GlobalLaunchID:
		name = c.o.Prefix + "_launch_id"
	case GlobalMapLanes:
		name = c.o.Prefix + "_map_" + Sanitize(mapName) + "_lanes"
	case GlobalClock:
		name = c.o.Prefix + "_clock"
	case GlobalMailboxLocks:
		name = c.o.Prefix + "_mailbox_locks"
	}
	if c.globalSet == nil {
		c.globalSet = make(map[string]bool)
	}
	if !c.globalSet[name] {
		c.globalSet[name] = true
		c.globals = append(c.globals, Global{Name: name, Kind: kind, Map: mapName})
	}
	return name
}

// GlobalDecl is the module-scope declaration of global name (Func.Globals):
// a u64 in the constant space. The injector writes it once, before the
// first launch, and the code never stores to it, so its loads go through
// the constant cache, which a kernel's own streaming loads do not evict
// (and which ptxas can use as an operand), not through L1.
func GlobalDecl(name string) string {
	return ".const .align 8 .u64 " + name + ";\n"
}

// loadGlobal loads global g (see GlobalDecl) into register reg.
func (c *compiler) loadGlobal(reg, g string) {
	c.e.op("ld.const.u64 ", reg, ", [", g, "]")
}

// frameSize is the bytes of f's __stack: what the verifier found the
// function uses below r10 (every access, direct or through a pointer, is
// in [r10-StackSize, r10)), rounded up to 8, or the whole eBPF stack
// without the verifier's result. The driver reserves a kernel's local
// memory for every thread that can be resident, so a probe's 512 bytes,
// one frame per inlined site, would cost every kernel it patches that
// much per thread.
func (c *compiler) frameSize(f *fn) int {
	if v := c.o.Verified; v != nil {
		for _, vf := range v.Funcs {
			if vf.Start == f.start {
				return max(8, (vf.StackSize+7)&^7)
			}
		}
	}
	return jit.StackSize
}

// genFunc writes one .func.
func (c *compiler) genFunc(f *fn) error {
	c.cur = f
	f.frame = c.frameSize(f)
	e := &c.e
	e.raw(".func (.param .b64 __ret) ", f.name, c.params(f), "\n{\n")
	if f.stack {
		// Only functions that use r10 get a frame: the probe's local
		// memory adds to that of the kernel it is injected into.
		e.raw("\t.local .align 8 .b8 __stack[", strconv.Itoa(f.frame), "];\n")
	}
	e.raw("\t.reg .b64 %r<11>;\n\t.reg .b64 %t<16>;\n\t.reg .b32 %w<16>;\n\t.reg .pred %p<8>;\n")
	e.raw("\t.reg .b64 %h<16>;\n\t.reg .b32 %g<16>;\n\t.reg .pred %q<8>;\n")
	e.raw("\t.reg .b32 %bud;\n\t.reg .b64 %budp;\n")
	c.slots = c.promoteSlots(f)
	if len(c.slots) > 0 {
		e.raw("\t.reg .b64 %fs<", strconv.Itoa(len(c.slots)), ">;\n")
	}
	if f.main && f.calls {
		e.raw("\t.local .align 4 .b32 __budslot;\n")
	}
	if f.main {
		e.op("ld.param.b64 %r1, [__ctx]")
		e.op("ld.param.b64 %r2, [__len]")
		for _, r := range []int{0, 3, 4, 5, 6, 7, 8, 9} {
			e.op("mov.u64 ", regNames[r], ", 0")
		}
		e.op("mov.u32 %bud, ", strconv.Itoa(c.o.LoopBudget))
		if f.calls {
			e.op("mov.u64 %t0, __budslot")
			e.op("cvta.local.u64 %budp, %t0")
		}
	} else {
		for r := 1; r <= 5; r++ {
			e.op("ld.param.b64 ", regNames[r], ", [__a", strconv.Itoa(r), "]")
		}
		for _, r := range []int{0, 6, 7, 8, 9} {
			e.op("mov.u64 ", regNames[r], ", 0")
		}
		e.op("ld.param.b64 %budp, [__budp]")
		e.op("ld.u32 %bud, [%budp]")
	}
	if f.stack {
		e.op("mov.u64 %t0, __stack")
		e.op("cvta.local.u64 %r10, %t0")
		e.op("add.u64 %r10, %r10, ", strconv.Itoa(f.frame))
	}
	for i := f.start; i < f.end; i++ {
		if c.isLabel[i] {
			e.label(label(i))
		}
		if c.o.Comments {
			c.commentInsn(i)
		}
		if err := c.insn(i); err != nil {
			return err
		}
	}
	e.label("$Lend")
	e.op("mov.u64 %r0, 0")
	e.op("mov.u32 %bud, ", budgetEnded)
	e.label("$Lexit")
	if !f.main {
		e.op("st.u32 [%budp], %bud")
	}
	e.op("st.param.b64 [__ret], %r0")
	e.op("ret")
	e.raw("}\n\n")
	return nil
}

func (c *compiler) commentInsn(i int) {
	ins := c.insns[i]
	text := strconv.Itoa(i) + ": " + fmt.Sprint(ins)
	if f := c.facts(i); f != "" {
		text += "   [" + f + "]"
	}
	if src := ins.Source(); src != nil {
		text += "   ; " + src.String()
	}
	c.e.comment(text)
}

// facts lists what the verifier proved about instruction i that changes
// its code (for Options.Comments): folded or frame-loaded keys, dead
// stores, frame slots in registers, known shared bytes, state spaces,
// decided jumps.
func (c *compiler) facts(i int) string {
	v := c.o.Verified
	if v == nil {
		return ""
	}
	var fs []string
	if k, ok := v.ConstKeys[i]; ok {
		fs = append(fs, "key "+strconv.FormatUint(k, 10)+" folded")
	} else if off, ok := v.StackKeys[i]; ok {
		fs = append(fs, "key at r10"+strconv.FormatInt(off, 10))
	}
	if v.DeadStore(i) {
		fs = append(fs, "dead store: not written")
	}
	ins := &c.insns[i]
	base := ins.Dst
	switch ins.OpCode.Class() {
	case asm.LdXClass:
		base = ins.Src
	case asm.StClass, asm.StXClass:
	default:
		base = asm.R0
	}
	if cell, ok := c.slots[int64(ins.Offset)]; ok && base == asm.R10 {
		fs = append(fs, "slot in "+cell.reg)
	}
	if a, ok := v.BlockAddrs[i]; ok {
		fs = append(fs, "shared "+c.p.Maps[a.Map].Name+"+"+strconv.FormatInt(a.Off, 10))
	} else if v.BlockMapOnly(i) {
		fs = append(fs, "shared")
	} else if v.GlobalMapOnly(i) {
		fs = append(fs, "global")
	}
	if taken, ok := v.Decided[i]; ok {
		fs = append(fs, map[bool]string{true: "always taken", false: "never taken"}[taken])
	}
	return strings.Join(fs, "; ")
}

// insn writes the code of instruction i.
func (c *compiler) insn(i int) error {
	ins := &c.insns[i]
	if ins.OpCode == asm.InvalidOpCode {
		return c.errf(i, "invalid opcode")
	}
	if ins.Dst > asm.R10 || ins.Src > asm.R10 && !ins.OpCode.IsDWordLoad() && !ins.IsFunctionCall() {
		return c.errf(i, "register out of range (dst r%d, src r%d)", ins.Dst, ins.Src)
	}
	switch cls := ins.OpCode.Class(); {
	case cls.IsALU():
		return c.alu(i, ins)
	case cls.IsJump():
		return c.jump(i, ins)
	case cls == asm.LdClass:
		return c.ldImm(i, ins)
	case cls == asm.LdXClass:
		return c.ldx(i, ins)
	case cls == asm.StClass:
		return c.st(i, ins)
	case cls == asm.StXClass:
		if ins.OpCode.Mode() == asm.AtomicMode {
			return c.atomic(i, ins)
		}
		return c.stx(i, ins)
	}
	return c.errf(i, "unknown opcode 0x%x", uint32(ins.OpCode))
}

// dstReg returns the PTX name of ins.Dst for writing; r10 is read-only.
func (c *compiler) dstReg(i int, r asm.Register) (string, error) {
	if r >= asm.R10 {
		return "", c.errf(i, "r%d is read-only or not a register", r)
	}
	return regNames[r], nil
}
