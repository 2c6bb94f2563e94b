package ptx

import (
	"strconv"

	"github.com/gpuprobe/gpuprobe/shm"
)

// Per-program support routines, emitted once when a helper needs them.
const (
	funcMemcpy   = "memcpy"   // (dst, src, n): byte copy, 8 bytes at a time when both are aligned
	funcHostcall = "hostcall" // (mailbox, helper, a1..a5, p1, n1, p2, n2, str, locks) -> ret: a mailbox request
	funcRingout  = "ringout"  // (ring, data, size) -> 0 or -errno: one ring buffer record
	// (ring, data, size, dev) -> 0 or -errno: one record with device-side reservation
	funcRingoutDev = "ringoutdev"
)

var supportOrder = []string{funcMemcpy, funcHostcall, funcRingout, funcRingoutDev, funcRingoutWarp, funcRingReserveWarp, funcHashop}

var supportParams = map[string][]string{
	funcMemcpy:          {"dst", "src", "n"},
	funcHostcall:        {"mb", "helper", "a1", "a2", "a3", "a4", "a5", "p1", "n1", "p2", "n2", "str", "locks"},
	funcRingout:         {"ring", "data", "size"},
	funcRingoutDev:      {"ring", "data", "size", "dev"},
	funcRingoutWarp:     {"ring", "data", "size"},
	funcRingReserveWarp: {"ring", "size"},
	funcHashop:          {"tbl", "key", "val", "flags", "op", "ksize", "vsize", "mask", "maxe"},
}

// need marks a support routine as used and returns its PTX name.
func (c *compiler) need(name string) string {
	if c.needed == nil {
		c.needed = make(map[string]bool)
	}
	c.needed[name] = true
	if name == funcRingout || name == funcRingoutDev || name == funcRingoutWarp || name == funcHashop {
		c.needed[funcMemcpy] = true
	}
	if name == funcRingoutDev {
		c.needed[funcRingout] = true
	}
	return c.o.Prefix + "_" + name
}

// supportProto is the prototype (without ";") of a support routine.
func (c *compiler) supportProto(name string) string {
	s := ".func "
	if name != funcMemcpy {
		s += "(.param .b64 __ret) "
	}
	s += c.o.Prefix + "_" + name + "("
	for k, p := range supportParams[name] {
		if k > 0 {
			s += ", "
		}
		s += ".param .b64 __" + p
	}
	return s + ")"
}

// callFunc calls a .func with b64 arguments (registers or immediates);
// ret ("" for none) receives the result.
func (c *compiler) callFunc(name, ret string, args ...string) {
	e := &c.e
	e.raw("\t{\n")
	for k := range args {
		e.raw("\t.param .b64 c", strconv.Itoa(k), ";\n")
	}
	if ret != "" {
		e.raw("\t.param .b64 crv;\n")
	}
	list := ""
	for k, a := range args {
		e.op("st.param.b64 [c", strconv.Itoa(k), "], ", a)
		if k > 0 {
			list += ", "
		}
		list += "c" + strconv.Itoa(k)
	}
	if ret != "" {
		e.op("call (crv), ", name, ", (", list, ")")
		e.op("ld.param.b64 ", ret, ", [crv]")
	} else {
		e.op("call ", name, ", (", list, ")")
	}
	e.raw("\t}\n")
}

// threadID writes dst = the calling thread's global linear index (shm's
// definition), with temporaries b64+"8".."9" and b32+"8".."13".
func (c *compiler) threadID(dst, b64, b32 string) {
	e := &c.e
	x, y := func(n int) string { return b64 + strconv.Itoa(n) }, func(n int) string { return b32 + strconv.Itoa(n) }
	e.op("mov.u32 ", y(8), ", %ctaid.x")
	e.op("mov.u32 ", y(9), ", %ctaid.y")
	e.op("mov.u32 ", y(10), ", %ctaid.z")
	e.op("mov.u32 ", y(11), ", %nctaid.x")
	e.op("mov.u32 ", y(12), ", %nctaid.y")
	e.op("mul.wide.u32 ", x(8), ", ", y(10), ", ", y(12))
	e.op("cvt.u64.u32 ", x(9), ", ", y(9))
	e.op("add.s64 ", x(8), ", ", x(8), ", ", x(9))
	e.op("cvt.u64.u32 ", x(9), ", ", y(11))
	e.op("mul.lo.u64 ", x(8), ", ", x(8), ", ", x(9))
	e.op("cvt.u64.u32 ", x(9), ", ", y(8))
	e.op("add.s64 ", x(8), ", ", x(8), ", ", x(9))
	e.op("mov.u32 ", y(8), ", %ntid.x")
	e.op("mov.u32 ", y(9), ", %ntid.y")
	e.op("mov.u32 ", y(10), ", %ntid.z")
	e.op("mul.lo.u32 ", y(11), ", ", y(8), ", ", y(9))
	e.op("mul.lo.u32 ", y(11), ", ", y(11), ", ", y(10))
	e.op("mov.u32 ", y(12), ", %tid.z")
	e.op("mov.u32 ", y(13), ", %tid.y")
	e.op("mad.lo.u32 ", y(12), ", ", y(12), ", ", y(9), ", ", y(13))
	e.op("mov.u32 ", y(13), ", %tid.x")
	e.op("mad.lo.u32 ", y(12), ", ", y(12), ", ", y(8), ", ", y(13))
	e.op("cvt.u64.u32 ", x(9), ", ", y(11))
	e.op("mul.lo.u64 ", x(8), ", ", x(8), ", ", x(9))
	e.op("cvt.u64.u32 ", x(9), ", ", y(12))
	e.op("add.s64 ", dst, ", ", x(8), ", ", x(9))
}

// genSupport writes the definitions of the support routines in use.
func (c *compiler) genSupport() {
	for _, name := range supportOrder {
		if !c.needed[name] {
			continue
		}
		e := &c.e
		e.raw(c.supportProto(name), "\n{\n")
		e.raw("\t.reg .b64 %x<40>;\n\t.reg .b32 %y<16>;\n\t.reg .pred %z<8>;\n")
		for k, p := range supportParams[name] {
			e.op("ld.param.b64 %x", strconv.Itoa(20+k), ", [__", p, "]")
		}
		switch name {
		case funcMemcpy:
			c.genMemcpy()
		case funcHostcall:
			c.genHostcall()
		case funcRingout:
			c.genRingout()
		case funcRingoutDev:
			c.genRingoutDev()
		case funcRingoutWarp:
			c.genRingoutWarp(false)
		case funcRingReserveWarp:
			c.genRingoutWarp(true)
		case funcHashop:
			c.genHashop()
		}
		e.raw("}\n\n")
	}
}

// genMemcpy: params dst=%x20, src=%x21, n=%x22.
func (c *compiler) genMemcpy() {
	e := &c.e
	e.op("mov.u64 %x0, 0")
	e.op("or.b64 %x1, %x20, %x21")
	e.op("and.b64 %x1, %x1, 7")
	e.op("setp.ne.u64 %z0, %x1, 0")
	e.op("@%z0 bra $Lbytes")
	e.op("and.b64 %x2, %x22, -8")
	e.label("$Lwords")
	e.op("setp.ge.u64 %z0, %x0, %x2")
	e.op("@%z0 bra $Lbytes")
	e.op("add.s64 %x3, %x21, %x0")
	e.op("ld.u64 %x4, [%x3]")
	e.op("add.s64 %x3, %x20, %x0")
	e.op("st.u64 [%x3], %x4")
	e.op("add.s64 %x0, %x0, 8")
	e.op("bra $Lwords")
	e.label("$Lbytes")
	e.op("setp.ge.u64 %z0, %x0, %x22")
	e.op("@%z0 bra $Ldone")
	e.op("add.s64 %x3, %x21, %x0")
	e.op("ld.u8 %x4, [%x3]")
	e.op("add.s64 %x3, %x20, %x0")
	e.op("st.u8 [%x3], %x4")
	e.op("add.s64 %x0, %x0, 1")
	e.op("bra $Lbytes")
	e.label("$Ldone")
	e.op("ret")
}

// genHostcall writes the requester side of the mailbox protocol
// (shm/doc.go, "Mailbox"). Params: mb=%x20 helper=%x21 a1..a5=%x22..%x26
// p1=%x27 n1=%x28 p2=%x29 n2=%x30 str=%x31 locks=%x32. Per call, on the
// bus: posted stores of the request, one release store of req, and the
// spin's 16-byte loads of {ack, ret}; the claim uses the lock block in
// device memory.
func (c *compiler) genHostcall() {
	e := &c.e
	slot := func(off int) string { return "[%x7+" + strconv.Itoa(off) + "]" }
	lock := func(off int) string { return "[%x18+" + strconv.Itoa(off) + "]" }
	e.op("setp.eq.u64 %z0, %x20, 0")
	e.op("setp.eq.or.u64 %z0, %x32, 0, %z0")
	e.op("@%z0 bra $Ltimeout")
	e.op("ld.relaxed.gpu.u32 %y0, [%x32+", strconv.Itoa(mlocksSlots), "]")
	e.op("setp.eq.u32 %z0, %y0, 0")
	e.op("@%z0 bra $Ltimeout")
	e.op("ld.relaxed.gpu.u64 %x1, [%x32+", strconv.Itoa(mlocksTimeout), "]")
	e.op("setp.eq.u64 %z0, %x1, 0")
	e.op("@%z0 mov.u64 %x1, ", strconv.FormatInt(c.o.HostCallTimeout.Nanoseconds(), 10))
	e.op("mov.u64 %x2, %globaltimer")
	e.op("add.s64 %x2, %x2, %x1")
	c.threadID("%x3", "%x", "%y")
	e.op("cvt.u64.u32 %x4, %y0")
	e.op("rem.u64 %x5, %x3, %x4")
	e.op("mov.u64 %x6, 0")
	// Step 2: claim a slot whose last request was answered.
	e.label("$Lclaim")
	e.op("mad.lo.u64 %x18, %x5, ", strconv.Itoa(mlockSize), ", %x32")
	e.op("add.s64 %x18, %x18, ", strconv.Itoa(mlocksHeader))
	e.op("mad.lo.u64 %x7, %x5, ", strconv.Itoa(mailboxSlotSize), ", %x20")
	e.op("add.s64 %x7, %x7, ", strconv.Itoa(dataOffset))
	e.op("atom.acquire.gpu.cas.b32 %y1, ", lock(mlockLock), ", 0, 1")
	e.op("setp.ne.u32 %z0, %y1, 0")
	e.op("@%z0 bra $Lnext")
	e.op("ld.u64 %x8, ", lock(mlockReq))
	e.op("ld.u32 %y2, ", lock(mlockBusy))
	e.op("setp.eq.u32 %z0, %y2, 0")
	e.op("@%z0 bra $Lclaimed")
	// The slot's last request timed out: ours once the host answered it.
	e.op("ld.acquire.sys.u64 %x9, ", slot(mslotAck))
	e.op("setp.eq.u64 %z0, %x9, %x8")
	e.op("@%z0 bra $Lunbusy")
	e.op("st.release.gpu.u32 ", lock(mlockLock), ", 0")
	e.label("$Lnext")
	e.op("add.s64 %x5, %x5, 1")
	e.op("setp.ge.u64 %z0, %x5, %x4")
	e.op("@%z0 mov.u64 %x5, 0")
	e.op("add.s64 %x6, %x6, 1")
	e.op("setp.lt.u64 %z0, %x6, %x4")
	e.op("@%z0 bra $Lclaim")
	e.op("mov.u64 %x6, 0")
	e.op("mov.u64 %x10, %globaltimer")
	e.op("setp.lt.u64 %z0, %x10, %x2")
	e.op("@%z0 bra $Lclaim")
	e.op("bra $Ltimeout")
	e.label("$Lunbusy")
	e.op("st.u32 ", lock(mlockBusy), ", 0")
	e.label("$Lclaimed")
	// Step 3: the request, in as few stores as the layout allows.
	e.op("shl.b64 %x10, %x21, 32")
	e.op("or.b64 %x10, %x10, 1")
	e.op("st.u64 ", slot(mslotWaiting), ", %x10")
	e.op("mov.u64 %x10, ", u64(shm.MailboxRetPending))
	e.op("st.u64 ", slot(mslotRet), ", %x10")
	e.op("st.v2.u64 ", slot(mslotArgs), ", {%x22, %x23}")
	e.op("st.v2.u64 ", slot(mslotArgs+16), ", {%x24, %x25}")
	e.op("st.u64 ", slot(mslotCaller), ", %x3")
	c.hostcallPayload()
	// a5, then payload_len and flags (0) as one u64.
	e.op("st.v2.u64 ", slot(mslotArgs+32), ", {%x26, %x13}")
	e.op("add.s64 %x12, %x8, 1")
	e.op("st.u64 ", lock(mlockReq), ", %x12")
	e.op("st.release.sys.u64 ", slot(mslotReq), ", %x12")
	// Step 4: one load returns ack and ret.
	e.label("$Lwait")
	e.op("ld.acquire.sys.v2.u64 {%x9, %x17}, ", slot(mslotAck))
	e.op("setp.eq.u64 %z0, %x9, %x12")
	e.op("@%z0 bra $Lanswered")
	e.op("mov.u64 %x10, %globaltimer")
	e.op("setp.lt.u64 %z0, %x10, %x2")
	e.op("@%z0 bra $Lwait")
	// Timed out: the slot stays busy until a claimant sees the answer.
	e.op("st.relaxed.sys.u32 ", slot(mslotWaiting), ", 0")
	e.op("st.u32 ", lock(mlockBusy), ", 1")
	e.op("st.release.gpu.u32 ", lock(mlockLock), ", 0")
	e.label("$Ltimeout")
	e.op("st.param.b64 [__ret], ", i64(-ETIMEDOUT))
	e.op("ret")
	// Step 5: ret may be the half read before ack; if it still shows the
	// pending value, read it again (after the acquire).
	e.label("$Lanswered")
	e.op("setp.ne.u64 %z0, %x17, ", u64(shm.MailboxRetPending))
	e.op("@%z0 bra $Lgot")
	e.op("ld.relaxed.sys.u64 %x17, ", slot(mslotRet))
	e.label("$Lgot")
	e.op("st.release.gpu.u32 ", lock(mlockLock), ", 0")
	e.op("st.param.b64 [__ret], %x17")
	e.op("ret")
}

// hostcallPayload copies the payload into slot %x7: p1 (%x27), at most n1
// (%x28) bytes, stopping at a NUL when str (%x31) is set, then p2 (%x29),
// n2 (%x30) bytes, as far as the payload has room. Bytes gather in a
// register that is stored 8 at a time; aligned runs of p1 (unless str)
// and p2 are copied a word at a time. Leaves the length in %x13.
func (c *compiler) hostcallPayload() {
	e := &c.e
	e.op("add.s64 %x11, %x7, ", strconv.Itoa(mslotPayload))
	e.op("mov.u64 %x13, 0")
	e.op("mov.u64 %x19, 0")
	e.op("setp.ne.u64 %z1, %x31, 0")
	e.op("setp.eq.u64 %z3, %x31, 0")
	e.op("min.u64 %x12, %x28, ", strconv.Itoa(mailboxPayload))
	c.payloadPart("$Lp1", "%x27", true)
	e.op("mov.u64 %x12, ", strconv.Itoa(mailboxPayload))
	e.op("sub.s64 %x12, %x12, %x13")
	e.op("min.u64 %x12, %x12, %x30")
	c.payloadPart("$Lp2", "%x29", false)
	// The last, partial word (the bytes after the end are garbage).
	e.op("and.b64 %x14, %x13, 7")
	e.op("setp.eq.u64 %z0, %x14, 0")
	e.op("@%z0 bra $Lpdone")
	e.op("and.b64 %x14, %x13, -8")
	e.op("add.s64 %x14, %x11, %x14")
	e.op("st.u64 [%x14], %x19")
	e.label("$Lpdone")
}

// payloadPart appends %x12 bytes of src to the payload at %x11 + %x13,
// gathering into %x19; for p1, only while not at a NUL when str (%z1),
// and word copies only without str (%z3).
func (c *compiler) payloadPart(l, src string, p1 bool) {
	e := &c.e
	e.op("mov.u64 %x16, 0")
	e.label(l)
	e.op("setp.ge.u64 %z0, %x16, %x12")
	e.op("@%z0 bra ", l, "done")
	// A word: the payload position and the source both 8-aligned, 8 bytes left.
	e.op("add.s64 %x17, ", src, ", %x16")
	e.op("or.b64 %x14, %x17, %x13")
	e.op("and.b64 %x14, %x14, 7")
	e.op("add.s64 %x15, %x16, 8")
	if p1 {
		e.op("setp.le.and.u64 %z2, %x15, %x12, %z3")
	} else {
		e.op("setp.le.u64 %z2, %x15, %x12")
	}
	e.op("setp.eq.and.u64 %z2, %x14, 0, %z2")
	e.op("@!%z2 bra ", l, "byte")
	e.op("ld.u64 %x15, [%x17]")
	e.op("add.s64 %x14, %x11, %x13")
	e.op("st.u64 [%x14], %x15")
	e.op("add.s64 %x13, %x13, 8")
	e.op("add.s64 %x16, %x16, 8")
	e.op("bra ", l)
	e.label(l + "byte")
	e.op("ld.u8 %x15, [%x17]")
	if p1 {
		e.op("setp.eq.and.u64 %z0, %x15, 0, %z1")
		e.op("@%z0 bra ", l, "done")
	}
	e.op("and.b64 %x14, %x13, 7")
	e.op("cvt.u32.u64 %y3, %x14")
	e.op("shl.b32 %y3, %y3, 3")
	e.op("shl.b64 %x15, %x15, %y3")
	e.op("or.b64 %x19, %x19, %x15")
	e.op("add.s64 %x13, %x13, 1")
	e.op("add.s64 %x16, %x16, 1")
	e.op("and.b64 %x14, %x13, 7")
	e.op("setp.ne.u64 %z0, %x14, 0")
	e.op("@%z0 bra ", l)
	e.op("add.s64 %x14, %x11, %x13")
	e.op("sub.s64 %x14, %x14, 8")
	e.op("st.u64 [%x14], %x19")
	e.op("mov.u64 %x19, 0")
	e.op("bra ", l)
	e.label(l + "done")
}

// genRingout writes the producer side of the ring protocol (shm/doc.go,
// "Ring buffer"): never waits. Params: ring=%x20 data=%x21 size=%x22.
func (c *compiler) genRingout() {
	e := &c.e
	at := func(off int) string { return "[%x20+" + strconv.Itoa(off) + "]" }
	e.op("setp.eq.u64 %z0, %x20, 0")
	e.op("@%z0 bra $Lnoring")
	e.op("ld.relaxed.sys.u32 %y0, ", at(hdrMaxEntries))
	e.op("ld.relaxed.sys.u32 %y1, ", at(hdrStride))
	e.op("cvt.u64.u32 %x0, %y0")
	e.op("cvt.u64.u32 %x1, %y1")
	e.op("sub.s64 %x2, %x1, ", strconv.Itoa(slotHeader))
	e.op("setp.gt.u64 %z0, %x22, %x2")
	e.op("@%z0 bra $Loversize")
	e.op("ld.acquire.sys.u64 %x3, ", at(ringTail))
	e.op("ld.relaxed.sys.u64 %x4, ", at(ringHead))
	e.op("sub.s64 %x5, %x4, %x3")
	e.op("setp.ge.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Lfull")
	e.op("atom.acq_rel.sys.add.u64 %x6, ", at(ringHead), ", 1")
	e.op("sub.s64 %x5, %x6, %x3")
	e.op("sub.s64 %x7, %x0, 1")
	e.op("and.b64 %x7, %x6, %x7")
	e.op("setp.ge.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Llate")
	c.ringPublish("sys")
	e.label("$Llate")
	// Racing producers overshot: count the drop, globally and in the
	// slot's drop counter, so the consumer can skip the ticket.
	e.op("red.relaxed.sys.add.u64 ", at(ringDropped), ", 1")
	e.op("mad.lo.u64 %x8, %x0, %x1, %x20")
	e.op("mad.lo.u64 %x8, %x7, 4, %x8")
	e.op("red.release.sys.add.u32 [%x8+", strconv.Itoa(dataOffset), "], 1")
	e.op("st.param.b64 [__ret], ", i64(-errNOSPC))
	e.op("ret")
	e.label("$Lfull")
	e.op("red.relaxed.sys.add.u64 ", at(ringDropped), ", 1")
	e.op("st.param.b64 [__ret], ", i64(-errNOSPC))
	e.op("ret")
	c.ringRejects("sys")
}

// ringPublish writes ticket %x6's record into slot %x7 of ring %x20 (slot
// size %x1): length, type, the payload (%x21, %x22 bytes), then the
// release store (at scope: "sys" for host memory, "gpu" for device
// memory) of seq = ticket+1 that publishes it; returns 0. Shared by
// every producer (shm/doc.go, "Ring buffer", step 5).
func (c *compiler) ringPublish(scope string) {
	e := &c.e
	e.op("mad.lo.u64 %x8, %x7, %x1, %x20")
	e.op("add.s64 %x8, %x8, ", strconv.Itoa(dataOffset))
	e.op("st.u32 [%x8+8], %x22")
	e.op("st.u32 [%x8+12], ", strconv.Itoa(RingRecordType))
	e.op("add.s64 %x9, %x8, ", strconv.Itoa(slotHeader))
	c.callFunc(c.o.Prefix+"_"+funcMemcpy, "", "%x9", "%x21", "%x22")
	e.op("add.s64 %x10, %x6, 1")
	e.op("st.release.", scope, ".u64 [%x8], %x10")
	e.op("st.param.b64 [__ret], 0")
	e.op("ret")
}

// ringRejects writes the $Loversize (counted, -E2BIG) and $Lnoring
// (-ENOENT) exits shared by both producers.
func (c *compiler) ringRejects(scope string) {
	e := &c.e
	e.label("$Loversize")
	e.op("red.relaxed.", scope, ".add.u64 [%x20+", strconv.Itoa(ringOversize), "], 1")
	e.op("st.param.b64 [__ret], ", i64(-errE2BIG))
	e.op("ret")
	e.label("$Lnoring")
	e.op("st.param.b64 [__ret], ", i64(-errNOENT))
	e.op("ret")
}

// ringRefreshNS is how often, at most, producers of a ring with
// device-side reservation that find it full re-read the host's tail (one
// PCIe round trip by one thread; everyone else uses the cached copy).
const ringRefreshNS = 1000

// ringDropMirror: the host mirror of the device drop count is raised every
// this many drops (a power of two), and at every tail refresh.
const ringDropMirror = 32

// genRingoutDev writes the producer of device-side reservation (shm/doc.go,
// "Device-side reservation"): tickets come from a gpu-scope atomic on the
// device block, so a published record costs posted writes over PCIe and
// no round trip. Never waits. Params: ring=%x20 data=%x21 size=%x22
// dev=%x23. With dev == 0 it is the host protocol (ringout).
func (c *compiler) genRingoutDev() {
	e := &c.e
	at := func(off int) string { return "[%x20+" + strconv.Itoa(off) + "]" }
	dv := func(off int) string { return "[%x23+" + strconv.Itoa(off) + "]" }
	e.op("setp.eq.u64 %z0, %x20, 0")
	e.op("@%z0 bra $Lnoring")
	e.op("setp.ne.u64 %z0, %x23, 0")
	e.op("@%z0 bra $Ldev")
	c.callFunc(c.o.Prefix+"_"+funcRingout, "%x0", "%x20", "%x21", "%x22")
	e.op("st.param.b64 [__ret], %x0")
	e.op("ret")
	e.label("$Ldev")
	// slot_count and slot_size come from the device block (the loader
	// copies them from the ring header), not over PCIe.
	e.op("ld.relaxed.gpu.u32 %y0, ", dv(devSlots))
	e.op("ld.relaxed.gpu.u32 %y1, ", dv(devSlotSize))
	e.op("cvt.u64.u32 %x0, %y0")
	e.op("cvt.u64.u32 %x1, %y1")
	e.op("setp.eq.u64 %z0, %x0, 0")
	e.op("@%z0 bra $Lnoring")
	e.op("sub.s64 %x2, %x1, ", strconv.Itoa(slotHeader))
	e.op("setp.gt.u64 %z0, %x22, %x2")
	e.op("@%z0 bra $Loversize")
	// Step D1: a full-looking ring drops without taking a ticket.
	e.op("ld.acquire.gpu.u64 %x3, ", dv(devTail))
	e.op("ld.relaxed.gpu.u64 %x4, ", dv(devHead))
	e.op("sub.s64 %x5, %x4, %x3")
	e.op("setp.ge.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Lfull")
	// Step D2: take a ticket.
	e.label("$Ltake")
	e.op("atom.relaxed.gpu.add.u64 %x6, ", dv(devHead), ", 1")
	e.op("sub.s64 %x7, %x0, 1")
	e.op("and.b64 %x7, %x6, %x7")
	e.op("sub.s64 %x5, %x6, %x3")
	e.op("setp.lt.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Lwrite")
	// Step D3: racing producers overshot the cached tail: read the host's.
	e.op("ld.acquire.sys.u64 %x3, ", at(ringTail))
	e.op("red.release.gpu.max.u64 ", dv(devTail), ", %x3")
	e.op("sub.s64 %x5, %x6, %x3")
	e.op("setp.ge.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Llate")
	// Step D4: write the record, publish with a release store of seq.
	e.label("$Lwrite")
	c.ringPublish("sys")
	// Step D5: a ticket that cannot be published: raise the host head
	// mirror to cover it, then count it in its slot's drop counter (release:
	// after the mirror), and in dropped.
	e.label("$Llate")
	e.op("add.s64 %x10, %x6, 1")
	e.op("red.relaxed.sys.max.u64 ", at(ringHead), ", %x10")
	e.op("mad.lo.u64 %x8, %x0, %x1, %x20")
	e.op("mad.lo.u64 %x8, %x7, 4, %x8")
	e.op("red.release.sys.add.u32 [%x8+", strconv.Itoa(dataOffset), "], 1")
	e.op("red.relaxed.sys.add.u64 ", at(ringDropped), ", 1")
	e.op("st.param.b64 [__ret], ", i64(-errNOSPC))
	e.op("ret")
	// Full: one thread per refresh interval re-reads the host's tail; if
	// the consumer has made room, take a ticket after all.
	e.label("$Lfull")
	e.op("mov.u64 %x10, %globaltimer")
	e.op("ld.relaxed.gpu.u64 %x11, ", dv(devRefresh))
	e.op("sub.s64 %x12, %x10, %x11")
	e.op("setp.lt.u64 %z0, %x12, ", strconv.Itoa(ringRefreshNS))
	e.op("@%z0 bra $Ldrop")
	e.op("atom.relaxed.gpu.exch.b64 %x11, ", dv(devRefresh), ", %x10")
	e.op("sub.s64 %x12, %x10, %x11")
	e.op("setp.lt.u64 %z0, %x12, ", strconv.Itoa(ringRefreshNS))
	e.op("@%z0 bra $Ldrop")
	e.op("ld.acquire.sys.u64 %x3, ", at(ringTail))
	e.op("red.release.gpu.max.u64 ", dv(devTail), ", %x3")
	e.op("ld.relaxed.gpu.u64 %x13, ", dv(devDropped))
	e.op("red.relaxed.sys.max.u64 ", at(ringDevDrops), ", %x13")
	e.op("sub.s64 %x5, %x4, %x3")
	e.op("setp.lt.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Ltake")
	e.label("$Ldrop")
	e.op("atom.relaxed.gpu.add.u64 %x13, ", dv(devDropped), ", 1")
	e.op("add.s64 %x13, %x13, 1")
	e.op("and.b64 %x14, %x13, ", strconv.Itoa(ringDropMirror-1))
	e.op("setp.ne.u64 %z0, %x14, 0")
	e.op("@!%z0 red.relaxed.sys.max.u64 ", at(ringDevDrops), ", %x13")
	e.op("st.param.b64 [__ret], ", i64(-errNOSPC))
	e.op("ret")
	c.ringRejects("sys")
}

// hostCall writes a host-call helper: r0 = the host's answer, or
// -ETIMEDOUT. args = r1..r5; payload = p1 (n1 bytes, or up to a NUL when
// str) then p2 (n2 bytes).
func (c *compiler) hostCall(id int32, p1, n1, p2, n2 string, str bool) {
	c.loadMailbox()
	s := "0"
	if str {
		s = "1"
	}
	c.callFunc(c.need(funcHostcall), "%r0", "%h0", strconv.Itoa(int(id)), "%r1", "%r2", "%r3", "%r4", "%r5", p1, n1, p2, n2, s, "%h1")
}

// loadMailbox loads the mailbox's address into %h0 and its lock block's
// into %h1.
func (c *compiler) loadMailbox() {
	c.loadGlobal("%h0", c.addGlobal(GlobalMailbox, ""))
	c.loadGlobal("%h1", c.addGlobal(GlobalMailboxLocks, ""))
}
