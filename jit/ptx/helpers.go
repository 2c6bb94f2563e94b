package ptx

import (
	"math"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// helper writes the inline code of a helper call. Arguments are in r1..r5;
// the result goes to r0; r1..r5 are left as they are (eBPF code may not
// read them after a call).
func (c *compiler) helper(i int, id int32) error {
	e := &c.e
	switch jit.HelperID(id) {
	case jit.HelperMapLookupElem, jit.HelperMapUpdateElem, jit.HelperMapDeleteElem:
		return c.mapHelper(i, jit.HelperID(id))
	case jit.HelperPerfEventOutput:
		return c.perfEventOutput(i)
	case jit.HelperTracePrintk:
		// payload: the format string (fmt_size bytes, at most the ABI's
		// MaxLen); args r1..r5 go as they are (r3..r5 are the values to
		// format).
		e.op("min.u64 %h2, %r2, ", u64(argBytes(jit.HelperTracePrintk, 0)))
		c.hostCall(id, "%r1", "%h2", "0", "0", false)
	case jit.HelperPuts:
		// payload: the string up to its NUL, at most the ABI's MaxLen.
		c.hostCall(id, "%r1", u64(argBytes(jit.HelperPuts, 0)), "0", "0", true)
	case jit.HelperGetCurrentPidTgid:
		e.op("mov.u64 %r0, ", u64(c.o.PidTgid))
	case jit.HelperGetGlobalTimer:
		e.op("mov.u64 %r0, %globaltimer")
	case jit.HelperGetBlockIdx:
		c.xyz(i, "%ctaid")
	case jit.HelperGetBlockDim:
		c.xyz(i, "%ntid")
	case jit.HelperGetThreadIdx:
		c.xyz(i, "%tid")
	case jit.HelperGetGridDim:
		c.xyz(i, "%nctaid")
	case jit.HelperGPUMembar:
		e.op("membar.sys")
		e.op("mov.u64 %r0, 0")
	case jit.HelperFenceGPU:
		if c.sm >= 70 {
			e.op("fence.acq_rel.gpu")
		} else {
			e.op("membar.gl")
		}
		e.op("mov.u64 %r0, 0")
	case jit.HelperAtomicMaxU64:
		c.atomicMinMax(i, "max")
	case jit.HelperAtomicMinU64:
		c.atomicMinMax(i, "min")
	case jit.HelperExit:
		// The thread ends here: the rest of the kernel does not run for it.
		e.op("exit")
	case jit.HelperGetSMID:
		c.special("%smid")
	case jit.HelperGetWarpID:
		c.special("%warpid")
	case jit.HelperGetLaneID:
		c.special("%laneid")
	case jit.HelperWarpIsLeader:
		e.op("activemask.b32 %g0")
		e.op("neg.s32 %g1, %g0")
		e.op("and.b32 %g1, %g1, %g0")
		e.op("mov.u32 %g2, %lanemask_eq")
		e.op("setp.eq.u32 %q0, %g1, %g2")
		e.op("selp.u64 %r0, 1, 0, %q0")
	case jit.HelperWarpSumU64:
		c.warpReduce("add")
	case jit.HelperWarpMinU64:
		c.warpReduce("min")
	case jit.HelperWarpMaxU64:
		c.warpReduce("max")
	case jit.HelperWarpActiveCount:
		e.op("activemask.b32 %g0")
		e.op("popc.b32 %g1, %g0")
		e.op("cvt.u64.u32 %r0, %g1")
	case jit.HelperWarpActiveMask:
		e.op("activemask.b32 %g0")
		e.op("cvt.u64.u32 %r0, %g0")
	case jit.HelperBlockLinearID:
		// (z*ny + y)*nx + x in 64 bits: grids reach 2^31 x 2^16 x 2^16.
		c.special64("%h0", "%ctaid.z")
		c.special64("%h1", "%nctaid.y")
		c.special64("%h2", "%ctaid.y")
		e.op("mad.lo.u64 %h0, %h0, %h1, %h2")
		c.special64("%h1", "%nctaid.x")
		c.special64("%h2", "%ctaid.x")
		e.op("mad.lo.u64 %r0, %h0, %h1, %h2")
	case jit.HelperGridBlocks:
		c.product3("%nctaid")
	case jit.HelperBlockThreads:
		c.product3("%ntid")
	case jit.HelperGetLaunchID:
		g := c.addGlobal(GlobalLaunchID, "")
		c.loadGlobal("%r0", g)
	case jit.HelperKtimeGetNs:
		if c.o.Conformance {
			// bpf_conformance's "unwind" has id 5 too: it returns its
			// argument, and a zero result ends the program (r0 = 0).
			e.op("mov.b64 %r0, %r1")
			e.op("setp.eq.u64 %q0, %r0, 0")
			e.op("@%q0 bra $Lend")
			break
		}
		c.ktime()
	default:
		return c.errf(i, "unknown helper %d", id)
	}
	return nil
}

// argBytes is the most bytes helper id reads through argument a (0 for
// r1) by the ABI table: a string's or a size argument's bound.
func argBytes(id jit.HelperID, a int) uint64 {
	sig, _ := jit.HelperSignature(id)
	acc, _ := sig.ArgAccess(a, math.MaxUint64, nil)
	return acc.Bytes
}

// ktime writes bpf_ktime_get_ns: r0 = %globaltimer + the offset
// CLOCK_MONOTONIC − %globaltimer (an i64) that the collector keeps current
// at the address in the GlobalClock global, or %globaltimer unchanged while
// that global is 0 (no clock region). The offset is read with a sys-scope
// relaxed load: the host rewrites it while kernels run, and a weak load
// could be served from a stale L1 line.
func (c *compiler) ktime() {
	e := &c.e
	g := c.addGlobal(GlobalClock, "")
	c.loadGlobal("%h0", g)
	e.op("mov.u64 %r0, %globaltimer")
	e.op("setp.ne.u64 %q0, %h0, 0")
	e.op("@%q0 ld.relaxed.sys.u64 %h1, [%h0]")
	e.op("@%q0 add.s64 %r0, %r0, %h1")
}

// special writes r0 = a 32-bit special register.
func (c *compiler) special(reg string) { c.special64("%r0", reg) }

// special64 writes dst = a 32-bit special register, zero-extended.
func (c *compiler) special64(dst, reg string) {
	c.e.op("mov.u32 %g0, ", reg)
	c.e.op("cvt.u64.u32 ", dst, ", %g0")
}

// product3 writes r0 = x*y*z of a special register vector, in 64 bits.
func (c *compiler) product3(reg string) {
	c.special64("%h0", reg+".x")
	c.special64("%h1", reg+".y")
	e := &c.e
	e.op("mul.lo.u64 %h0, %h0, %h1")
	c.special64("%h1", reg+".z")
	e.op("mul.lo.u64 %r0, %h0, %h1")
}

// xyz writes the x, y and z of a special register vector through the
// three pointers in r1, r2 and r3, and r0 = 0; into the registers that
// hold those frame slots when the verifier placed them (StackOuts).
func (c *compiler) xyz(i int, reg string) {
	e := &c.e
	var outs [3]int64
	known := false
	if v := c.o.Verified; v != nil {
		outs, known = v.StackOuts[i]
	}
	for k, comp := range []string{".x", ".y", ".z"} {
		if cell, ok := c.slots[outs[k]]; known && ok && cell.size == 8 {
			c.special64(cell.reg, reg+comp)
			continue
		}
		c.special64("%h0", reg+comp)
		r := regNames[1+k]
		c.store("%h0", r, 0, asm.DWord, c.proven(i))
	}
	e.op("mov.u64 %r0, 0")
}

// warpReduce writes r0 = op(r1) over the active lanes of the warp.
// redux.sync (sm_80+) works on 32 bits, so a u64 sum adds four 16-bit
// chunks (each sum fits in 21 bits) and a u64 min/max reduces the high
// words first, then the low words of the lanes that hold the extreme high
// word. Before sm_80, a loop shuffles each active lane's value in turn.
func (c *compiler) warpReduce(op string) {
	e := &c.e
	e.op("activemask.b32 %g0")
	e.op("mov.b64 {%g1, %g2}, %r1")
	if c.sm >= 80 {
		switch op {
		case "add":
			e.op("and.b32 %g3, %g1, 0xffff")
			e.op("shr.u32 %g4, %g1, 16")
			e.op("and.b32 %g5, %g2, 0xffff")
			e.op("shr.u32 %g6, %g2, 16")
			e.op("redux.sync.add.u32 %g3, %g3, %g0")
			e.op("redux.sync.add.u32 %g4, %g4, %g0")
			e.op("redux.sync.add.u32 %g5, %g5, %g0")
			e.op("redux.sync.add.u32 %g6, %g6, %g0")
			e.op("cvt.u64.u32 %r0, %g3")
			for k, g := range []string{"%g4", "%g5", "%g6"} {
				e.op("cvt.u64.u32 %h0, ", g)
				e.op("shl.b64 %h0, %h0, ", i64(int64(16*(k+1))))
				e.op("add.s64 %r0, %r0, %h0")
			}
		case "min", "max":
			other := "0xffffffff"
			if op == "max" {
				other = "0"
			}
			e.op("redux.sync.", op, ".u32 %g3, %g2, %g0")
			e.op("setp.eq.u32 %q0, %g2, %g3")
			e.op("selp.b32 %g4, %g1, ", other, ", %q0")
			e.op("redux.sync.", op, ".u32 %g5, %g4, %g0")
			e.op("mov.b64 %r0, {%g5, %g3}")
		}
		return
	}
	loop, done := c.newLabel(), c.newLabel()
	e.op("mov.b32 %g7, %g0")
	switch op {
	case "add":
		e.op("mov.u64 %r0, 0")
	case "min":
		e.op("mov.u64 %r0, -1")
	case "max":
		e.op("mov.u64 %r0, 0")
	}
	e.label(loop)
	e.op("setp.eq.u32 %q0, %g7, 0")
	e.op("@%q0 bra ", done)
	e.op("neg.s32 %g3, %g7")
	e.op("and.b32 %g3, %g3, %g7")
	e.op("xor.b32 %g7, %g7, %g3")
	e.op("bfind.u32 %g4, %g3")
	e.op("shfl.sync.idx.b32 %g5, %g1, %g4, 31, %g0")
	e.op("shfl.sync.idx.b32 %g6, %g2, %g4, 31, %g0")
	e.op("mov.b64 %h0, {%g5, %g6}")
	switch op {
	case "add":
		e.op("add.s64 %r0, %r0, %h0")
	default:
		e.op(op, ".u64 %r0, %r0, %h0")
	}
	e.op("bra ", loop)
	e.label(done)
}

// atomicMinMax writes helpers 607/608: *r1 = op(*r1, r2) with a red (no
// value returned, the warp does not wait) on a global or shared address;
// a .local (stack) or misaligned address takes a plain load/op/store, as
// mem.go's atomics do (PTX atomics are undefined on .local, and the stack
// is private to the thread). atomicGuard drops the tests the verifier's
// facts about r1 (instruction i) make needless.
func (c *compiler) atomicMinMax(i int, op string) {
	e := &c.e
	al := c.proven(i)
	plain, done := c.newLabel(), c.newLabel()
	e.op("mov.b64 %t12, %r1")
	space := c.atomicAddr(i, 8, plain)
	e.op("red", space, ".", op, ".u64 [%t12], %r2")
	e.op("bra.uni ", done)
	e.label(plain)
	c.load("%t13", "%t12", 0, asm.DWord, false, al)
	e.op(op, ".u64 %t13, %t13, %r2")
	c.store("%t13", "%t12", 0, asm.DWord, al)
	e.label(done)
	e.op("mov.u64 %r0, 0")
}
