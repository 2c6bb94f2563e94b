package verifier

import (
	"math"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// mapFlagRdonlyProg is BPF_F_RDONLY_PROG: programs may not write the map.
const mapFlagRdonlyProg = 1 << 7

// readReg returns register r, rejecting a read before any write.
func (v *verifier) readReg(st *state, i int, r asm.Register) (value, error) {
	x := st.cur().regs[r]
	if x.kind == kUninit {
		return x, v.errorf(i, "r%d is read before it is written", r)
	}
	return x, nil
}

func (v *verifier) writable(i int, r asm.Register) error {
	if r == asm.R10 {
		return v.errorf(i, "r10 (the frame pointer) is read-only")
	}
	return nil
}

// alu executes an ALU or ALU64 instruction.
func (v *verifier) alu(st *state, i int, ins *asm.Instruction) error {
	op := ins.OpCode.ALUOp()
	alu32 := ins.OpCode.Class() == asm.ALUClass
	if err := v.writable(i, ins.Dst); err != nil {
		return err
	}
	fr := st.cur()
	isMov := op == asm.Mov || op == asm.MovSX8 || op == asm.MovSX16 || op == asm.MovSX32
	var src value
	switch {
	case op == asm.Neg || op == asm.Swap:
	case ins.OpCode.Source() == asm.ImmSource:
		src = constant(uint64(ins.Constant))
	default:
		var err error
		if src, err = v.readReg(st, i, ins.Src); err != nil {
			return err
		}
	}
	var dst value
	if !isMov {
		var err error
		if dst, err = v.readReg(st, i, ins.Dst); err != nil {
			return err
		}
	}
	le := ins.OpCode.Endianness() == asm.LE
	res, err := v.aluValue(i, op, alu32, le, dst, src, ins)
	if err != nil {
		return err
	}
	fr.regs[ins.Dst] = res
	return nil
}

// aluValue computes the abstract result of an ALU instruction.
func (v *verifier) aluValue(i int, op asm.ALUOp, alu32, le bool, d, s value, ins *asm.Instruction) (value, error) {
	if op == asm.Mov {
		switch {
		case !alu32:
			return s, nil
		case s.kind == kScalar:
			return low32(s), nil
		}
		return unknownBits(32), nil
	}
	if op == asm.MovSX8 || op == asm.MovSX16 || op == asm.MovSX32 {
		if s.kind == kScalar {
			return scalarALU(op, alu32, le, s, s, 0), nil
		}
		if alu32 {
			return unknownBits(32), nil
		}
		return unknown(), nil
	}
	for _, x := range [2]struct {
		val value
		reg asm.Register
	}{{d, ins.Dst}, {s, ins.Src}} {
		switch x.val.kind {
		case kMapHandle:
			return value{}, v.errorf(i, "arithmetic on the map handle in r%d is not allowed", x.reg)
		case kMapValueNul:
			return value{}, v.errorf(i, "r%d may be NULL here: null-check the result of map_lookup_elem%s before doing arithmetic on it", x.reg, originText(x.val))
		}
	}
	if d.kind == kScalar && (s.kind == kScalar || s.kind == kUninit) {
		return scalarALU(op, alu32, le, d, s, ins.Constant), nil
	}
	// Pointer arithmetic: only 64-bit add and sub of a number keep provenance.
	if !alu32 {
		switch {
		case op == asm.Add && d.isPointer() && s.kind == kScalar:
			return movePtr(d, s, false), nil
		case op == asm.Add && d.kind == kScalar && s.isPointer():
			return movePtr(s, d, false), nil
		case op == asm.Sub && d.isPointer() && s.kind == kScalar:
			return movePtr(d, s, true), nil
		}
	}
	if alu32 {
		return unknownBits(32), nil
	}
	return unknown(), nil
}

// movePtr adds (or subtracts) scalar n to pointer p's offset.
func movePtr(p, n value, sub bool) value {
	lo, hi := n.smin, n.smax
	if sub {
		lo, hi = -n.smax, -n.smin
		if n.smax == math.MinInt64 || n.smin == math.MinInt64 {
			lo, hi = math.MinInt64, math.MaxInt64
		}
	}
	r := p
	if !p.offsetKnown() || lo <= -unbounded || hi >= unbounded {
		r.smin, r.smax = math.MinInt64, math.MaxInt64
	} else {
		r.smin, r.smax = p.smin+lo, p.smax+hi
	}
	r.tz = min(p.tz, n.tz)
	return r
}

// ldImm executes LD_IMM64: a constant, a map handle or a map value address.
func (v *verifier) ldImm(st *state, i int, ins *asm.Instruction) error {
	if err := v.writable(i, ins.Dst); err != nil {
		return err
	}
	fr := st.cur()
	switch ins.Src {
	case 0:
		fr.regs[ins.Dst] = constant(uint64(ins.Constant))
		return nil
	case asm.PseudoMapFD:
		m, err := v.mapRef(i, ins, uint64(ins.Constant))
		if err != nil {
			return err
		}
		fr.regs[ins.Dst] = value{kind: kMapHandle, m: m}
		return nil
	}
	// PseudoMapValue: low half names the map, high half is the offset.
	m, err := v.mapRef(i, ins, uint64(uint32(ins.Constant)))
	if err != nil {
		return err
	}
	off := int64(uint64(ins.Constant) >> 32)
	if vs := int64(v.p.Maps[m].ValueSize); off >= vs {
		return v.errorf(i, "map value address at offset %d is outside the %d-byte value of map %q", off, vs, v.p.Maps[m].Name)
	}
	p := ptr(kMapValue, off)
	p.m = m
	if v.p.Maps[m].Type == jit.MapTypePerBlockArray {
		p.bo = 1 // key 0's value
	}
	fr.regs[ins.Dst] = p
	return nil
}

// mapRef finds the map an LD_IMM64 refers to: by name (Reference), or by
// index in Program.Maps once the references are resolved.
func (v *verifier) mapRef(i int, ins *asm.Instruction, index uint64) (int32, error) {
	if ref := ins.Reference(); ref != "" {
		for k, m := range v.p.Maps {
			if m.Name == ref {
				return int32(k), nil
			}
		}
		return 0, v.errorf(i, "LD_IMM64 references map %q, which the program does not define", ref)
	}
	if index < uint64(len(v.p.Maps)) {
		return int32(index), nil
	}
	return 0, v.errorf(i, "LD_IMM64 references map %d, but the program has %d maps", index, len(v.p.Maps))
}

var sizeBytes = map[asm.Size]int{asm.Byte: 1, asm.Half: 2, asm.Word: 4, asm.DWord: 8}

// load executes LDX (and sign-extending LDX).
func (v *verifier) load(st *state, i int, ins *asm.Instruction) error {
	base, err := v.readReg(st, i, ins.Src)
	if err != nil {
		return err
	}
	if err := v.writable(i, ins.Dst); err != nil {
		return err
	}
	size := sizeBytes[ins.OpCode.Size()]
	got, err := v.access(st, i, ins.Src, base, int64(ins.Offset), size, accRead, nil)
	if err != nil {
		return err
	}
	if ins.OpCode.Mode() == asm.MemSXMode {
		got = signedBits(uint(size * 8))
	}
	st.cur().regs[ins.Dst] = got
	return nil
}

// store executes ST, STX and the atomics.
func (v *verifier) store(st *state, i int, ins *asm.Instruction) error {
	base, err := v.readReg(st, i, ins.Dst)
	if err != nil {
		return err
	}
	size := sizeBytes[ins.OpCode.Size()]
	off := int64(ins.Offset)
	if ins.OpCode.Class() == asm.StClass {
		c := constant(uint64(ins.Constant))
		_, err := v.access(st, i, ins.Dst, base, off, size, accWrite, &c)
		return err
	}
	src, err := v.readReg(st, i, ins.Src)
	if err != nil {
		return err
	}
	if ins.OpCode.Mode() != asm.AtomicMode {
		_, err := v.access(st, i, ins.Dst, base, off, size, accWrite, &src)
		return err
	}
	aop := ins.OpCode.AtomicOp()
	if aop == asm.CmpXchg {
		if _, err := v.readReg(st, i, asm.R0); err != nil {
			return err
		}
	}
	fetches := aop == asm.Xchg || aop == asm.CmpXchg || aop&0x100 != 0
	if fetches && aop != asm.CmpXchg {
		if err := v.writable(i, ins.Src); err != nil {
			return err
		}
	}
	if _, err := v.access(st, i, ins.Dst, base, off, size, accAtomic, nil); err != nil {
		return err
	}
	old := unknownBits(uint(size * 8))
	switch {
	case aop == asm.CmpXchg:
		st.cur().regs[asm.R0] = old
	case fetches:
		st.cur().regs[ins.Src] = old
	}
	return nil
}

type accessMode uint8

const (
	accRead accessMode = iota
	accWrite
	accAtomic // read-modify-write, must be naturally aligned
	accOut    // write by a helper, must be naturally aligned
)

// access checks a memory access of size bytes at base+off through register
// reg, applies stores to the stack, and returns the loaded value.
func (v *verifier) access(st *state, i int, reg asm.Register, base value, off int64, size int, mode accessMode, stored *value) (value, error) {
	switch base.kind {
	case kUninit:
		return value{}, v.errorf(i, "r%d is read before it is written", reg)
	case kScalar:
		return value{}, v.errorf(i, "r%d is a number (%s), not a pointer: it cannot be dereferenced%s", reg, base.describe(), v.mergedHint())
	case kMapHandle:
		return value{}, v.errorf(i, "r%d is a map handle: pass it to a map helper, it cannot be dereferenced", reg)
	case kMapValueNul:
		return value{}, v.errorf(i, "r%d may be NULL here: null-check the result of map_lookup_elem%s before dereferencing it", reg, originText(base))
	}
	verb := "read"
	if mode != accRead {
		verb = "write"
	}
	if !base.offsetKnown() {
		return value{}, v.errorf(i, "%s through r%d, a %s with an unbounded offset: bound the index with a comparison first", verb, reg, base.kind)
	}
	lo, hi := base.smin+off, base.smax+off+int64(size)
	where := func() string { return rangeText(lo, hi, size) }
	if base.kind == kCtx {
		v.ctxAccess[i] = true
	}
	k := accOther
	if base.kind == kMapValue {
		k = accValue
		if v.p.Maps[base.m].Type == jit.MapTypePerBlockArray {
			k = accBlockValue
		}
	}
	v.valAccess[i] |= k
	// Alignment (natural, at most 8), assuming 8-byte aligned regions.
	if size > 1 && min(int(base.tz), tzOfInt(off)) < min(tzOfInt(int64(size)), 3) {
		switch mode {
		case accAtomic:
			return value{}, v.errorf(i, "atomic access at %s is not naturally aligned", where())
		case accOut:
			return value{}, v.errorf(i, "write at %s is not %d-byte aligned", where(), size)
		}
		v.unaligned[i] = true
	}
	switch base.kind {
	case kStack:
		if int(base.frame) >= len(st.frames) {
			return value{}, v.errorf(i, "r%d points into a stack frame that has returned", reg)
		}
		if lo < -jit.StackSize || hi > 0 {
			return value{}, v.errorf(i, "stack access at %s is outside the %d-byte stack [-%d, 0)", where(), jit.StackSize, jit.StackSize)
		}
		fr := &st.frames[base.frame]
		v.stackUse[fr.fn] = min(v.stackUse[fr.fn], lo)
		if mode == accRead || mode == accAtomic {
			v.noteStackRead(i, fr.fn, lo, hi)
		}
		switch {
		case v.outWrite:
			v.outBytes[i] = append(v.outBytes[i], stackRange{fr.fn, lo, hi})
		case v.dataRead:
			v.dataBytes[i] = append(v.dataBytes[i], stackRange{fr.fn, lo, hi})
		case reg != asm.R10 && !v.keyRead:
			v.escaped[fr.fn].set(lo, hi)
		}
		if mode == accRead || mode == accAtomic {
			if o, ok := fr.written(lo, hi); !ok {
				return value{}, v.errorf(i, "stack byte at r10%+d is read before it is written", o)
			}
		}
		exact := base.smin == base.smax
		var got value
		if mode == accRead {
			got = unknownBits(uint(size * 8))
			k, b := stackOff(lo)
			if s := fr.stack[k]; exact && size == 8 && b == 0 && s.spill {
				got = s.v
			}
		}
		if mode != accRead {
			if exact {
				fr.store(lo, size, stored)
			} else {
				fr.clobber(lo, hi)
			}
		}
		return got, nil
	case kCtx:
		if lo < 0 || hi > int64(v.opts.CtxSize) {
			return value{}, v.errorf(i, "context access at %s is outside the %d-byte context", where(), v.opts.CtxSize)
		}
		if mode != accRead && v.opts.CtxReadOnly {
			return value{}, v.errorf(i, "the context is read-only")
		}
	case kMapValue:
		m := v.p.Maps[base.m]
		vs := int64(m.ValueSize)
		if lo < 0 {
			return value{}, v.errorf(i, "map value access at %s is before the start of the value of map %q", where(), m.Name)
		}
		if hi > vs {
			return value{}, v.errorf(i, "map value access at %s exceeds value size %d", where(), vs)
		}
		if mode != accRead && m.Flags&mapFlagRdonlyProg != 0 {
			return value{}, v.errorf(i, "map %q is read-only for programs", m.Name)
		}
		if m.Type == jit.MapTypePerBlockArray {
			at := uint64(base.m)<<32 | uint64(int64(base.bo-1)+lo)
			v.blockAt[i].note(at, base.bo != 0 && base.smin == base.smax)
		}
	}
	return unknownBits(uint(size * 8)), nil
}

func tzOfInt(x int64) int {
	return int(tzOf(uint64(x)))
}
