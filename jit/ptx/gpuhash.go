package ptx

import (
	"strconv"

	"github.com/gpuprobe/gpuprobe/jit"
)

// funcHashop is the support routine of GPU hash maps (1501):
// (table, key, value, flags, op, key size, value size, slots - 1,
// max_entries) -> lookup: the value's address or 0; update, delete: 0 or
// -errno. One routine serves every hash map of a program: the map's shape
// comes in the arguments.
const funcHashop = "hashop"

// errBUSY is what an update returns when another thread's claim of the
// slot it needs stays unpublished for jit.HashSpinLimit rereads.
const errBUSY = 16

// Operation codes of funcHashop: the helper ids.
const (
	hashLookup = uint64(jit.HelperMapLookupElem)
	hashUpdate = uint64(jit.HelperMapUpdateElem)
	hashDelete = uint64(jit.HelperMapDeleteElem)
)

// gpuHashOp writes a map helper on GPU hash map m: a call of funcHashop
// on the table in the map's region, or, while the map is not attached,
// NULL (lookup) or -ENOENT.
func (c *compiler) gpuHashOp(id jit.HelperID, m *jit.Map) {
	e := &c.e
	l := jit.GPUHashLayout(m)
	g := c.addGlobal(GlobalMap, m.Name)
	c.loadGlobal("%h2", g)
	done, attached := c.newLabel(), c.newLabel()
	e.op("setp.ne.u64 %q1, %h2, 0")
	e.op("@%q1 bra ", attached)
	if id == jit.HelperMapLookupElem {
		e.op("mov.u64 %r0, 0")
	} else {
		e.op("mov.u64 %r0, ", i64(-errNOENT))
	}
	e.op("bra.uni ", done)
	e.label(attached)
	e.op("add.s64 %h2, %h2, ", u64(dataOffset))
	val, flags := "0", "0"
	if id == jit.HelperMapUpdateElem {
		val, flags = "%r3", "%r4"
	}
	c.callFunc(c.need(funcHashop), "%r0", "%h2", "%r2", val, flags, u64(uint64(id)),
		u64(uint64(m.KeySize)), u64(uint64(m.ValueSize)), u64(uint64(l.Slots-1)), u64(uint64(m.MaxEntries)))
	e.label(done)
}

// genHashop writes funcHashop (the algorithm of jit/gpuhash.go). Params:
// tbl=%x20 key=%x21 val=%x22 flags=%x23 op=%x24 ksize=%x25 vsize=%x26
// mask=%x27 maxe=%x28. Registers: %x2 stride, %x3 value offset, %x6 hash,
// %x7 probe, %x8 probes allowed, %x9 spins, %x10 the slot, %y2 its state.
func (c *compiler) genHashop() {
	e := &c.e
	e.op("add.s64 %x0, %x25, 7")
	e.op("and.b64 %x0, %x0, -8")
	e.op("add.s64 %x1, %x26, 7")
	e.op("and.b64 %x1, %x1, -8")
	e.op("add.s64 %x3, %x0, ", strconv.Itoa(jit.HashKeyAt))
	e.op("add.s64 %x2, %x3, %x1")
	e.op("add.s64 %x8, %x27, 1")
	e.op("min.u64 %x8, %x8, ", strconv.Itoa(jit.HashProbeLimit))
	e.op("mov.u64 %x9, 0")
	e.op("setp.eq.u64 %z1, %x24, ", u64(hashUpdate))
	e.op("setp.eq.u64 %z2, %x24, ", u64(hashLookup))
	e.op("setp.eq.and.u64 %z3, %x23, 2, %z1") // BPF_EXIST update
	e.op("setp.gt.u64 %z0, %x23, 2")
	e.op("and.pred %z0, %z0, %z1")
	e.op("@%z0 bra $Linval")
	c.genHashKey()
	e.op("mov.u64 %x7, 0")
	e.label("$Lprobe")
	e.op("setp.ge.u64 %z0, %x7, %x8")
	e.op("@%z0 bra $Lexhausted")
	e.op("add.s64 %x10, %x6, %x7")
	e.op("and.b64 %x10, %x10, %x27")
	e.op("add.s64 %x10, %x10, 1")
	e.op("mad.lo.u64 %x10, %x10, %x2, %x20")
	e.label("$Lreread")
	e.op("ld.acquire.gpu.u32 %y2, [%x10]")
	e.op("setp.eq.u32 %z0, %y2, ", strconv.Itoa(jit.HashSlotEmpty))
	e.op("@%z0 bra $Lempty")
	e.op("setp.eq.u32 %z0, %y2, ", strconv.Itoa(jit.HashSlotBusy))
	e.op("@%z0 bra $Lbusy")
	c.genHashCompare()
	e.op("setp.eq.u32 %z0, %y2, ", strconv.Itoa(jit.HashSlotDeleted))
	e.op("@%z0 bra $Ldeleted")
	c.genHashLive()
	c.genHashClaim("$Ldeleted", jit.HashSlotDeleted)
	c.genHashClaim("$Lempty", jit.HashSlotEmpty)
	e.label("$Lbusy")
	// Lookups and deletes pass a slot being claimed (its insert has not
	// happened yet); an update waits for the key, which may be its own.
	e.op("@!%z1 bra $Lnext")
	e.op("add.s64 %x9, %x9, 1")
	e.op("setp.gt.u64 %z0, %x9, ", strconv.Itoa(jit.HashSpinLimit))
	e.op("@%z0 bra $Lebusy")
	e.op("nanosleep.u32 32")
	e.op("bra $Lreread")
	e.label("$Lnext")
	e.op("add.s64 %x7, %x7, 1")
	e.op("bra $Lprobe")
	e.label("$Lexhausted")
	e.op("@%z2 bra $Lnull")
	e.op("@!%z1 bra $Lenoent")
	e.op("@%z3 bra $Lenoent")
	e.label("$Lfull")
	e.op("red.add.u64 [%x20+", strconv.Itoa(jit.HashFullAt), "], 1")
	c.hashRet("$Le2big", -errE2BIG)
	c.hashRet("$Linval", -errINVAL)
	c.hashRet("$Lenoent", -errNOENT)
	c.hashRet("$Leexist", -errEXIST)
	c.hashRet("$Lebusy", -errBUSY)
	c.hashRet("$Lnull", 0)
	c.hashRet("$Lok", 0)
}

// genHashKey writes %x6 = jit.HashKey of the key's %x25 bytes at %x21.
func (c *compiler) genHashKey() {
	e := &c.e
	e.op("mov.u32 %y0, 2166136261")
	e.op("mov.u64 %x4, 0")
	e.label("$Lhash")
	e.op("setp.ge.u64 %z0, %x4, %x25")
	e.op("@%z0 bra $Lmix")
	e.op("add.s64 %x5, %x21, %x4")
	e.op("ld.u8 %x11, [%x5]")
	e.op("cvt.u32.u64 %y1, %x11")
	e.op("xor.b32 %y0, %y0, %y1")
	e.op("mul.lo.u32 %y0, %y0, 16777619")
	e.op("add.s64 %x4, %x4, 1")
	e.op("bra $Lhash")
	e.label("$Lmix")
	for _, s := range []struct {
		shift int
		mul   string
	}{{16, "2146121005"}, {15, "2221713035"}, {16, ""}} {
		e.op("shr.u32 %y1, %y0, ", strconv.Itoa(s.shift))
		e.op("xor.b32 %y0, %y0, %y1")
		if s.mul != "" {
			e.op("mul.lo.u32 %y0, %y0, ", s.mul)
		}
	}
	e.op("cvt.u64.u32 %x6, %y0")
}

// genHashCompare falls through when the key of slot %x10 is the key at
// %x21 and branches to $Lnext otherwise.
func (c *compiler) genHashCompare() {
	e := &c.e
	e.op("mov.u64 %x4, 0")
	e.label("$Lcmp")
	e.op("setp.ge.u64 %z0, %x4, %x25")
	e.op("@%z0 bra $Lmatch")
	e.op("add.s64 %x5, %x21, %x4")
	e.op("ld.u8 %x11, [%x5]")
	e.op("add.s64 %x5, %x10, %x4")
	e.op("ld.u8 %x12, [%x5+", strconv.Itoa(jit.HashKeyAt), "]")
	e.op("setp.ne.u64 %z0, %x11, %x12")
	e.op("@%z0 bra $Lnext")
	e.op("add.s64 %x4, %x4, 1")
	e.op("bra $Lcmp")
	e.label("$Lmatch")
}

// genHashLive writes the operations on the live slot %x10 of the key.
func (c *compiler) genHashLive() {
	e := &c.e
	e.op("add.s64 %x13, %x10, %x3")
	e.op("@%z2 bra $Lfound")
	e.op("@%z1 bra $Loverwrite")
	e.op("atom.cas.b32 %y5, [%x10], ", strconv.Itoa(jit.HashSlotLive), ", ", strconv.Itoa(jit.HashSlotDeleted))
	e.op("setp.ne.u32 %z0, %y5, ", strconv.Itoa(jit.HashSlotLive))
	e.op("@%z0 bra $Lreread")
	e.op("red.add.s32 [%x20+", strconv.Itoa(jit.HashCountAt), "], -1")
	e.op("bra $Lok")
	e.label("$Loverwrite")
	// A plain copy, as Linux and bpftime overwrite a value: concurrent
	// readers may see a mix of the two values.
	e.op("setp.eq.u64 %z0, %x23, 1")
	e.op("@%z0 bra $Leexist")
	c.callFunc(c.o.Prefix+"_"+funcMemcpy, "", "%x13", "%x22", "%x26")
	e.op("bra $Lok")
	e.label("$Lfound")
	e.op("st.param.b64 [__ret], %x13")
	e.op("ret")
}

// genHashClaim writes label: the operations on slot %x10 in state from
// (Empty, or a tombstone of the key): lookups and deletes miss, an update
// claims the slot with a compare-and-swap (a lost race rereads it),
// reserves an entry under max_entries, fills the slot and publishes it.
func (c *compiler) genHashClaim(label string, from int) {
	e := &c.e
	e.label(label)
	e.op("@%z2 bra $Lnull")
	e.op("@!%z1 bra $Lenoent")
	e.op("@%z3 bra $Lenoent")
	e.op("atom.cas.b32 %y5, [%x10], ", strconv.Itoa(from), ", ", strconv.Itoa(jit.HashSlotBusy))
	e.op("setp.ne.u32 %z0, %y5, ", strconv.Itoa(from))
	e.op("@%z0 bra $Lreread")
	// Only the claim's winner reserves an entry, so that the lanes that
	// lost the race never push the count over max_entries. Over it, the
	// slot goes back to its old state: while it was Busy no update
	// passed it, so no key was placed beyond it.
	e.op("atom.add.u32 %y5, [%x20+", strconv.Itoa(jit.HashCountAt), "], 1")
	e.op("cvt.u64.u32 %x14, %y5")
	e.op("setp.ge.u64 %z0, %x14, %x28")
	e.op("@%z0 red.add.s32 [%x20+", strconv.Itoa(jit.HashCountAt), "], -1")
	e.op("@%z0 st.release.gpu.u32 [%x10], ", strconv.Itoa(from))
	e.op("@%z0 bra $Lfull")
	if from == jit.HashSlotEmpty {
		e.op("add.s64 %x13, %x10, ", strconv.Itoa(jit.HashKeyAt))
		c.callFunc(c.o.Prefix+"_"+funcMemcpy, "", "%x13", "%x21", "%x25")
	}
	e.op("add.s64 %x13, %x10, %x3")
	c.callFunc(c.o.Prefix+"_"+funcMemcpy, "", "%x13", "%x22", "%x26")
	e.op("st.release.gpu.u32 [%x10], ", strconv.Itoa(jit.HashSlotLive))
	e.op("bra $Lok")
}

// hashRet writes label: return v.
func (c *compiler) hashRet(label string, v int64) {
	c.e.label(label)
	c.e.op("st.param.b64 [__ret], ", i64(v))
	c.e.op("ret")
}
