package ptx

import (
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"
)

// align says what is known at compile time about an address's alignment.
type align int

const (
	alignUnknown align = iota // check at run time
	alignYes                  // naturally aligned
	alignNo                   // misaligned: go byte by byte
)

// staticAlign is what we know of base+off for an access of n bytes by
// instruction i. The frame pointer r10 is 8-byte aligned; other pointers
// are checked at run time, because a misaligned access would fault the
// kernel the probe is in, unless the verifier proved the access aligned
// (Options.Verified) or Options.AssumeAligned.
func (c *compiler) staticAlign(i int, base asm.Register, off int64, n int) align {
	if n == 1 {
		return alignYes
	}
	if base != asm.R10 {
		return c.proven(i)
	}
	if off%int64(n) == 0 {
		return alignYes
	}
	return alignNo
}

// proven is the alignment of the pointer accesses of instruction i (a load,
// store, atomic or helper call) whose base is not r10: known when the
// verifier proved them aligned or the options trust every pointer, else
// checked at run time.
func (c *compiler) proven(i int) align {
	if c.o.AssumeAligned || (c.o.Verified != nil && c.o.Verified.ProvenAligned(i)) {
		return alignYes
	}
	return alignUnknown
}

// stackSlot is the .local address of r10+off when base is the frame
// pointer of the function being compiled: an access to it then skips the
// generic-to-local resolution (r10 is never written, so it always is
// __stack + the function's frame size).
func (c *compiler) stackSlot(base string, off int64) (string, bool) {
	if base != regNames[asm.R10] || c.cur == nil || !c.cur.stack {
		return "", false
	}
	return "[__stack+" + strconv.FormatInt(int64(c.cur.frame)+off, 10) + "]", true
}

var sizeSuffix = map[asm.Size]string{asm.Byte: "8", asm.Half: "16", asm.Word: "32", asm.DWord: "64"}

// load writes dst = *(size *)(base+off), zero- or sign-extended to 64 bits.
// It uses %t8..%t10 and %p4.
func (c *compiler) load(dst, base string, off int64, size asm.Size, signed bool, al align) {
	e := &c.e
	n := size.Sizeof()
	sx := sizeSuffix[size]
	ty := ".u" + sx
	if signed {
		ty = ".s" + sx
	}
	if al == alignYes {
		if a, ok := c.stackSlot(base, off); ok {
			e.op("ld.local", ty, " ", dst, ", ", a)
			return
		}
		e.op("ld", ty, " ", dst, ", ", addr(base, off))
		return
	}
	slow, done := "", ""
	if al == alignUnknown {
		slow, done = c.newLabel(), c.newLabel()
		e.op("add.s64 %t8, ", base, ", ", i64(off))
		e.op("and.b64 %t9, %t8, ", strconv.Itoa(n-1))
		e.op("setp.ne.u64 %p4, %t9, 0")
		e.op("@%p4 bra ", slow)
		e.op("ld", ty, " ", dst, ", [%t8]")
		e.op("bra.uni ", done)
		e.label(slow)
	} else {
		e.op("add.s64 %t8, ", base, ", ", i64(off))
	}
	e.op("ld.u8 %t9, [%t8]")
	for k := 1; k < n; k++ {
		e.op("ld.u8 %t10, [%t8+", strconv.Itoa(k), "]")
		e.op("shl.b64 %t10, %t10, ", strconv.Itoa(8*k))
		e.op("or.b64 %t9, %t9, %t10")
	}
	if signed && n < 8 {
		e.op("cvt.s64.s", sx, " ", dst, ", %t9")
	} else {
		e.op("mov.b64 ", dst, ", %t9")
	}
	if done != "" {
		e.label(done)
	}
}

// store writes *(size *)(base+off) = val (a register or an immediate).
// It uses %t8..%t10 and %p4.
func (c *compiler) store(val, base string, off int64, size asm.Size, al align) {
	e := &c.e
	n := size.Sizeof()
	ty := ".u" + sizeSuffix[size]
	if al == alignYes {
		if a, ok := c.stackSlot(base, off); ok {
			e.op("st.local", ty, " ", a, ", ", val)
			return
		}
		e.op("st", ty, " ", addr(base, off), ", ", val)
		return
	}
	slow, done := "", ""
	e.op("add.s64 %t8, ", base, ", ", i64(off))
	if al == alignUnknown {
		slow, done = c.newLabel(), c.newLabel()
		e.op("and.b64 %t9, %t8, ", strconv.Itoa(n-1))
		e.op("setp.ne.u64 %p4, %t9, 0")
		e.op("@%p4 bra ", slow)
		e.op("st", ty, " [%t8], ", val)
		e.op("bra.uni ", done)
		e.label(slow)
	}
	e.op("mov.b64 %t9, ", val)
	for k := 0; k < n; k++ {
		if k == 0 {
			e.op("st.u8 [%t8], %t9")
			continue
		}
		e.op("shr.u64 %t10, %t9, ", strconv.Itoa(8*k))
		e.op("st.u8 [%t8+", strconv.Itoa(k), "], %t10")
	}
	if done != "" {
		e.label(done)
	}
}

func checkSize(s asm.Size) bool {
	_, ok := sizeSuffix[s]
	return ok
}

// ldx writes LDX (MEM and MEMSX modes).
func (c *compiler) ldx(i int, ins *asm.Instruction) error {
	d, err := c.dstReg(i, ins.Dst)
	if err != nil {
		return err
	}
	size := ins.OpCode.Size()
	if !checkSize(size) {
		return c.errf(i, "unknown load size")
	}
	mode := ins.OpCode.Mode()
	if mode != asm.MemMode && mode != asm.MemSXMode {
		return c.errf(i, "unknown load mode 0x%x", uint8(mode))
	}
	signed := mode == asm.MemSXMode
	if signed && size == asm.DWord {
		return c.errf(i, "sign-extending load of 8 bytes is not defined")
	}
	off := int64(ins.Offset)
	if cell, ok := c.frameReg(ins.Src, off, size); ok && !signed {
		c.e.op("mov.b64 ", d, ", ", cell.reg)
		return nil
	}
	al := c.staticAlign(i, ins.Src, off, size.Sizeof())
	if c.inShared(i, al) {
		ty := ".u" + sizeSuffix[size]
		if signed {
			ty = ".s" + sizeSuffix[size]
		}
		c.e.op("ld.shared", ty, " ", d, ", ", c.sharedAddr(i, regNames[ins.Src], off))
		return nil
	}
	c.load(d, regNames[ins.Src], off, size, signed, al)
	return nil
}

// inShared reports whether access i, of alignment al, goes to shared
// memory on every path (a per-block array's value, Result.BlockMapAccess),
// so that it can use the .shared space: ptxas then emits a shared-memory
// instruction rather than a generic one and its window arithmetic.
func (c *compiler) inShared(i int, al align) bool {
	return al == alignYes && c.o.Verified != nil && c.o.Verified.BlockMapOnly(i)
}

// sharedAddr is the .shared address operand of access i at base+off (a
// generic pointer into a per-block value): [symbol+byte] when the verifier
// knows the byte (Result.BlockAddrs), so ptxas needs no window arithmetic;
// otherwise %t8, converted from the generic address.
func (c *compiler) sharedAddr(i int, base string, off int64) string {
	if a, ok := c.o.Verified.BlockAddrs[i]; ok {
		return "[" + c.sharedFor(c.p.Maps[a.Map]) + "+" + strconv.FormatInt(a.Off, 10) + "]"
	}
	c.e.op("cvta.to.shared.u64 %t8, ", base)
	return addr("%t8", off)
}

// sharedAtomicAddr sets %t12, the address of atomic access i that is
// generic in %t12 now, to its .shared address.
func (c *compiler) sharedAtomicAddr(i int) {
	if a, ok := c.o.Verified.BlockAddrs[i]; ok {
		c.e.op("mov.u64 %t12, ", c.sharedFor(c.p.Maps[a.Map]))
		c.e.op("add.u64 %t12, %t12, ", strconv.FormatInt(a.Off, 10))
		return
	}
	c.e.op("cvta.to.shared.u64 %t12, %t12")
}

// atomicAddr prepares %t12, the generic address of atomic access i of n
// bytes, and returns the state space to use (atomicSpace): converted for a
// known space, which needs no guard; else guarded, branching to plain for
// the stack or a misaligned address.
func (c *compiler) atomicAddr(i, n int, plain string) string {
	space := c.atomicSpace(i)
	switch space {
	case ".shared":
		c.sharedAtomicAddr(i)
	case ".global":
		c.e.op("cvta.to.global.u64 %t12, %t12")
	default:
		c.atomicGuard(i, n, plain)
	}
	return space
}

// atomicSpace is the state space of atomic access i (an atomic
// instruction, or helper 607/608) when the verifier knows it and proved
// it aligned: ".shared" (a per-block array's value) or ".global" (any
// other map value); "" otherwise. A known space needs no guard, and ptxas
// emits a plain RED/ATOM: a generic one also carries a test for a shared
// address and an emulation loop, and the warp waits for the test's
// predicate, so a generic red costs a round trip.
func (c *compiler) atomicSpace(i int) string {
	v := c.o.Verified
	switch {
	case v == nil || c.proven(i) != alignYes:
		return ""
	case v.BlockMapOnly(i):
		return ".shared"
	case v.GlobalMapOnly(i):
		return ".global"
	}
	return ""
}

// deadStore reports whether store i need not be written: the verifier
// found that nothing reads its stack bytes (Result.DeadStores), such as a
// map key it folded. Every warp's leader would otherwise write it to local
// memory, and those lines reach L2 (kernel_phases: 1.3M sectors per
// vectorAdd launch).
func (c *compiler) deadStore(i int) bool {
	return c.o.Verified != nil && c.o.Verified.DeadStore(i)
}

// storeAt writes store instruction i: *(size *)(base+off) = val.
func (c *compiler) storeAt(i int, val string, base asm.Register, off int64, size asm.Size) {
	if cell, ok := c.frameReg(base, off, size); ok {
		if cell.size == 4 && strings.HasPrefix(val, "%") {
			// A register's low 32 bits (an immediate is already
			// truncated by st).
			c.e.op("and.b64 ", cell.reg, ", ", val, ", 4294967295")
		} else {
			c.e.op("mov.b64 ", cell.reg, ", ", val)
		}
		return
	}
	al := c.staticAlign(i, base, off, size.Sizeof())
	if c.inShared(i, al) {
		c.e.op("st.shared.u", sizeSuffix[size], " ", c.sharedAddr(i, regNames[base], off), ", ", val)
		return
	}
	c.store(val, regNames[base], off, size, al)
}

// st writes ST (store of an immediate).
func (c *compiler) st(i int, ins *asm.Instruction) error {
	size := ins.OpCode.Size()
	if !checkSize(size) || ins.OpCode.Mode() != asm.MemMode {
		return c.errf(i, "unknown store encoding")
	}
	var v string
	switch size {
	case asm.DWord:
		v = u64(uint64(ins.Constant))
	case asm.Word:
		v = u32(uint32(ins.Constant))
	case asm.Half:
		v = u32(uint32(uint16(ins.Constant)))
	default:
		v = u32(uint32(uint8(ins.Constant)))
	}
	if ins.Dst > asm.R10 {
		return c.errf(i, "register r%d out of range", ins.Dst)
	}
	if c.deadStore(i) {
		return nil
	}
	c.storeAt(i, v, ins.Dst, int64(ins.Offset), size)
	return nil
}

// stx writes STX (store of a register).
func (c *compiler) stx(i int, ins *asm.Instruction) error {
	size := ins.OpCode.Size()
	if !checkSize(size) || ins.OpCode.Mode() != asm.MemMode {
		return c.errf(i, "unknown store encoding")
	}
	if c.deadStore(i) {
		return nil
	}
	c.storeAt(i, regNames[ins.Src], ins.Dst, int64(ins.Offset), size)
	return nil
}

var atomicOps = map[asm.AtomicOp]string{
	asm.AddAtomic: "add", asm.FetchAdd: "add",
	asm.AndAtomic: "and", asm.FetchAnd: "and",
	asm.OrAtomic: "or", asm.FetchOr: "or",
	asm.XorAtomic: "xor", asm.FetchXor: "xor",
	asm.Xchg: "exch", asm.CmpXchg: "cas",
}

// atomic writes the atomic read-modify-write operations. PTX atomics are
// undefined on .local memory, so an address in the thread's stack (always
// when the base is r10; found with isspacep.local otherwise), or a
// misaligned one, takes a plain load/modify/store path: the stack is
// private to the thread, so that is still atomic for everyone who can see
// it.
func (c *compiler) atomic(i int, ins *asm.Instruction) error {
	aop := ins.OpCode.AtomicOp()
	name, ok := atomicOps[aop]
	if !ok {
		return c.errf(i, "unsupported atomic operation %v", aop)
	}
	size := ins.OpCode.Size()
	if size != asm.Word && size != asm.DWord {
		return c.errf(i, "atomic operations are 32 or 64 bits wide")
	}
	if ins.Src >= asm.R10 && aop != asm.AddAtomic && aop != asm.AndAtomic && aop != asm.OrAtomic && aop != asm.XorAtomic {
		return c.errf(i, "atomic fetch into r%d", ins.Src)
	}
	if ins.Src > asm.R10 {
		return c.errf(i, "register r%d out of range", ins.Src)
	}
	fetch := aop&asm.FetchAdd&^asm.AddAtomic != 0
	e := &c.e
	off := int64(ins.Offset)
	base := regNames[ins.Dst]
	s := regNames[ins.Src]
	e.op("add.s64 %t12, ", base, ", ", i64(off))
	plain, done := c.newLabel(), c.newLabel()
	if ins.Dst != asm.R10 {
		space := c.atomicAddr(i, size.Sizeof(), plain)
		if size == asm.DWord {
			c.atomic64(space, name, fetch, s)
		} else {
			c.atomic32(space, name, fetch, s)
		}
		e.op("bra.uni ", done)
	}
	e.label(plain)
	al := c.staticAlign(i, ins.Dst, off, size.Sizeof())
	c.load("%t13", "%t12", 0, size, false, al)
	switch name {
	case "add", "and", "or", "xor":
		e.op(map[string]string{"add": "add.s64", "and": "and.b64", "or": "or.b64", "xor": "xor.b64"}[name], " %t14, %t13, ", s)
		c.store("%t14", "%t12", 0, size, al)
		if fetch {
			e.op("mov.b64 ", s, ", %t13")
		}
	case "exch":
		c.store(s, "%t12", 0, size, al)
		e.op("mov.b64 ", s, ", %t13")
	case "cas":
		if size == asm.DWord {
			e.op("setp.eq.u64 %p6, %t13, %r0")
		} else {
			e.op("cvt.u32.u64 %w4, %r0")
			e.op("cvt.u32.u64 %w5, %t13")
			e.op("setp.eq.u32 %p6, %w5, %w4")
		}
		skip := c.newLabel()
		e.op("@!%p6 bra ", skip)
		c.store(s, "%t12", 0, size, al)
		e.label(skip)
		e.op("mov.b64 %r0, %t13")
	}
	e.label(done)
	return nil
}

// atomicGuard branches to plain when the address in %t12 of instruction
// i's atomic cannot take a PTX atomic: on the stack (.local, where atomics
// are undefined) or misaligned. The verifier's facts drop either test: a
// pointer into a map value on every path is never on the stack, and a
// proven-aligned access needs no alignment test.
func (c *compiler) atomicGuard(i, n int, plain string) {
	e := &c.e
	local := c.o.Verified == nil || !c.o.Verified.MapValueOnly(i)
	aligned := c.proven(i) == alignYes
	if local {
		e.op("isspacep.local %p6, %t12")
	}
	if !aligned {
		e.op("and.b64 %t13, %t12, ", strconv.Itoa(n-1))
		if local {
			e.op("setp.ne.or.u64 %p6, %t13, 0, %p6")
		} else {
			e.op("setp.ne.u64 %p6, %t13, 0")
		}
	}
	if local || !aligned {
		e.op("@%p6 bra ", plain)
	}
}

// atomic64 writes a 64-bit atomic on [%t12] in state space space ("" for
// generic, ".shared" or ".global").
func (c *compiler) atomic64(space, name string, fetch bool, s string) {
	e := &c.e
	atom := "atom" + space + "."
	switch name {
	case "cas":
		e.op(atom, "cas.b64 %r0, [%t12], %r0, ", s)
	case "exch":
		e.op(atom, "exch.b64 ", s, ", [%t12], ", s)
	default:
		ty := ".b64"
		if name == "add" {
			ty = ".u64"
		}
		if fetch {
			e.op(atom, name, ty, " ", s, ", [%t12], ", s)
		} else if name == "add" {
			c.warpAdd(space, "64", s)
		} else {
			e.op("red", space, ".", name, ty, " [%t12], ", s)
		}
	}
}

// warpAdd writes a non-fetching atomic add of s (a register of bits
// wide) to [%t12] aggregated over the warp: when every active lane adds
// the same value to the same address (match.all), the lowest lane adds
// value × lanes once, so a warp costs one L2 atomic instead of 32 on one
// address (nvcc aggregates such atomicAdds itself; ptxas does not).
// Otherwise each lane adds its own.
func (c *compiler) warpAdd(space, bits, s string) {
	e := &c.e
	one, done := c.newLabel(), c.newLabel()
	e.op("activemask.b32 %w7")
	e.op("match.all.sync.b64 %w8|%p7, %t12, %w7")
	if bits == "64" {
		e.op("match.all.sync.b64 %w8|%p5, ", s, ", %w7")
	} else {
		e.op("match.all.sync.b32 %w8|%p5, ", s, ", %w7")
	}
	e.op("and.pred %p7, %p7, %p5")
	e.op("@!%p7 bra ", one)
	e.op("mov.u32 %w9, %lanemask_lt")
	e.op("and.b32 %w9, %w9, %w7")
	e.op("setp.ne.u32 %p5, %w9, 0")
	e.op("@%p5 bra ", done)
	e.op("popc.b32 %w9, %w7")
	if bits == "64" {
		e.op("cvt.u64.u32 %t15, %w9")
		e.op("mul.lo.u64 %t15, %t15, ", s)
		e.op("red", space, ".add.u64 [%t12], %t15")
	} else {
		e.op("mul.lo.u32 %w9, %w9, ", s)
		e.op("red", space, ".add.u32 [%t12], %w9")
	}
	e.op("bra.uni ", done)
	e.label(one)
	e.op("red", space, ".add.u", bits, " [%t12], ", s)
	e.label(done)
}

// atomic32 is atomic64 on 32 bits.
func (c *compiler) atomic32(space, name string, fetch bool, s string) {
	e := &c.e
	atom := "atom" + space + "."
	e.op("cvt.u32.u64 %w4, ", s)
	switch name {
	case "cas":
		e.op("cvt.u32.u64 %w5, %r0")
		e.op(atom, "cas.b32 %w6, [%t12], %w5, %w4")
		e.op("cvt.u64.u32 %r0, %w6")
	case "exch":
		e.op(atom, "exch.b32 %w6, [%t12], %w4")
		e.op("cvt.u64.u32 ", s, ", %w6")
	default:
		ty := ".b32"
		if name == "add" {
			ty = ".u32"
		}
		if fetch {
			e.op(atom, name, ty, " %w6, [%t12], %w4")
			e.op("cvt.u64.u32 ", s, ", %w6")
		} else if name == "add" {
			c.warpAdd(space, "32", "%w4")
		} else {
			e.op("red", space, ".", name, ty, " [%t12], %w4")
		}
	}
}
