package ptx

import (
	"strconv"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
	"github.com/gpuprobe/gpuprobe/shm"
)

// The producers for rings in device memory (shm package comment,
// "Device-resident maps").
const (
	// (ring, data, size) -> 0 or -errno: one record.
	funcRingoutWarp = "ringoutwarp"
	// (ring, size) -> the ticket whose slot the caller writes and
	// publishes (ringRecordInRegs), or -errno.
	funcRingReserveWarp = "ringreservewarp"
)

// deviceMap reports whether map name lives in device memory
// (Options.DeviceMaps).
func (c *compiler) deviceMap(name string) bool {
	for _, n := range c.o.DeviceMaps {
		if n == name {
			return true
		}
	}
	return false
}

// genRingoutWarp writes the ring producer for a ring in device memory:
// the host protocol's steps (shm/doc.go, "Ring buffer") with gpu-scope
// atomics and release stores, and one reservation per warp: the lowest
// active lane checks for room and takes the tickets of all active lanes
// with one fetch-add; lane i writes ticket base + rank(i). Never waits.
// Params: ring=%x20 data=%x21 size=%x22; for ringreservewarp (reserve)
// ring=%x20 size=%x21, and the ticket is returned unpublished.
func (c *compiler) genRingoutWarp(reserve bool) {
	e := &c.e
	at := func(off int) string { return "[%x20+" + strconv.Itoa(off) + "]" }
	if reserve {
		e.op("mov.u64 %x22, %x21")
	}
	e.op("setp.eq.u64 %z0, %x20, 0")
	e.op("@%z0 bra $Lnoring")
	e.op("ld.u32 %y0, ", at(hdrMaxEntries))
	e.op("ld.u32 %y1, ", at(hdrStride))
	e.op("cvt.u64.u32 %x0, %y0")
	e.op("cvt.u64.u32 %x1, %y1")
	e.op("sub.s64 %x2, %x1, ", strconv.Itoa(slotHeader))
	e.op("setp.gt.u64 %z0, %x22, %x2")
	e.op("@%z0 bra $Loversize")
	// The lanes here: %y2 mask, %y3 lanes, %y4 this lane's rank, %y5 the
	// leader's lane number.
	e.op("activemask.b32 %y2")
	e.op("popc.b32 %y3, %y2")
	e.op("mov.u32 %y6, %lanemask_lt")
	e.op("and.b32 %y6, %y6, %y2")
	e.op("popc.b32 %y4, %y6")
	e.op("neg.s32 %y6, %y2")
	e.op("and.b32 %y6, %y6, %y2")
	e.op("bfind.u32 %y5, %y6")
	e.op("setp.eq.u32 %z1, %y4, 0")
	c.dropShard()
	// Leader: room check (step 2), then one fetch-add for every lane (3).
	e.op("mov.u64 %x3, 0")
	e.op("mov.u64 %x5, 0")
	e.op("mov.u64 %x6, 0")
	e.op("@%z1 ld.relaxed.gpu.u64 %x3, ", at(ringTail))
	e.op("@%z1 ld.relaxed.gpu.u64 %x4, ", at(ringHead))
	e.op("@%z1 sub.s64 %x5, %x4, %x3")
	e.op("setp.ge.and.u64 %z2, %x5, %x0, %z1")
	e.op("cvt.u64.u32 %x9, %y3")
	e.op("@%z2 red.relaxed.gpu.add.u64 [%x15], %x9")
	e.op("setp.lt.and.u64 %z3, %x5, %x0, %z1")
	e.op("@%z3 atom.relaxed.gpu.add.u64 %x6, ", at(ringHead), ", %x9")
	// Broadcast the verdict, the tail and the first ticket.
	e.op("selp.u32 %y7, 1, 0, %z2")
	e.op("shfl.sync.idx.b32 %y7, %y7, %y5, 31, %y2")
	c.shfl64("%x3", "%y5", "%y2")
	c.shfl64("%x6", "%y5", "%y2")
	e.op("setp.ne.u32 %z0, %y7, 0")
	e.op("@%z0 bra $Lfull")
	e.op("cvt.u64.u32 %x9, %y4")
	e.op("add.s64 %x6, %x6, %x9")
	e.op("sub.s64 %x7, %x0, 1")
	e.op("and.b64 %x7, %x6, %x7")
	e.op("sub.s64 %x5, %x6, %x3")
	e.op("setp.ge.u64 %z0, %x5, %x0")
	e.op("@%z0 bra $Llate")
	if reserve {
		e.op("st.param.b64 [__ret], %x6")
		e.op("ret")
	} else {
		c.ringPublish("gpu")
	}
	// Step 4: this lane's ticket overshot the tail the leader read.
	e.label("$Llate")
	e.op("red.relaxed.gpu.add.u64 [%x15], 1")
	e.op("mad.lo.u64 %x8, %x0, %x1, %x20")
	e.op("mad.lo.u64 %x8, %x7, 4, %x8")
	e.op("red.release.gpu.add.u32 [%x8+", strconv.Itoa(dataOffset), "], 1")
	e.label("$Lfull")
	e.op("st.param.b64 [__ret], ", i64(-errNOSPC))
	e.op("ret")
	c.ringRejects("gpu")
}

// dropShard sets %x15 to the address of this SM's drop shard in ring %x20
// (shm.RingDropShard): a full ring has every warp of the GPU count its
// drops, and one counter would serialize them in L2.
func (c *compiler) dropShard() {
	e := &c.e
	e.op("mov.u32 %y10, %smid")
	e.op("and.b32 %y10, %y10, ", strconv.Itoa(shm.RingDropShards-1))
	e.op("shr.u32 %y11, %y10, 3")
	e.op("mul.lo.u32 %y11, %y11, ", strconv.Itoa(shm.RingDropShardHigh-shm.RingDropShardLow-8*8))
	e.op("mad.lo.u32 %y11, %y10, 8, %y11")
	e.op("cvt.u64.u32 %x15, %y11")
	e.op("add.s64 %x15, %x15, %x20")
	e.op("add.s64 %x15, %x15, ", strconv.Itoa(shm.RingDropShardLow))
}

// shfl64 broadcasts the 64-bit register r from lane src to the lanes of
// mask (two 32-bit shuffles).
func (c *compiler) shfl64(r, src, mask string) {
	e := &c.e
	e.op("mov.b64 {%y8, %y9}, ", r)
	e.op("shfl.sync.idx.b32 %y8, %y8, ", src, ", 31, ", mask)
	e.op("shfl.sync.idx.b32 %y9, %y9, ", src, ", 31, ", mask)
	e.op("mov.b64 ", r, ", {%y8, %y9}")
}

// recordInRegs reports whether perf_event_output call i writes a record
// the verifier placed in the caller's frame (StackData) into a ring in
// device memory, so that the record's slots may be registers: the
// compiler then stores them into the ring slot itself (ringRecordInRegs).
func (c *compiler) recordInRegs(i int) (verifier.StackRange, bool) {
	v := c.o.Verified
	if v == nil {
		return verifier.StackRange{}, false
	}
	d, ok := v.StackData[i]
	if !ok {
		return d, false
	}
	cands, static := c.mapCandidates(i, asm.R2)
	if !static || len(cands) != 1 || c.p.Maps[cands[0]].Type != jit.MapTypeGPURingbuf || !c.deviceMap(c.p.Maps[cands[0]].Name) {
		return d, false
	}
	return d, true
}

// ringRecordInRegs writes perf_event_output of the record d of the frame
// into the device ring whose base is in %h0: ringreservewarp takes a
// ticket, then the record goes from its registers (or frame slots) into
// the slot, and a release store of seq publishes it; r0 = 0 or -errno.
func (c *compiler) ringRecordInRegs(d verifier.StackRange) {
	e := &c.e
	done := c.newLabel()
	c.callFunc(c.need(funcRingReserveWarp), "%h1", "%h0", u64(uint64(d.Size)))
	e.op("mov.u64 %r0, %h1")
	e.op("setp.lt.s64 %q1, %h1, 0")
	e.op("@%q1 bra ", done)
	e.op("ld.u32 %g0, [%h0+", strconv.Itoa(hdrMaxEntries), "]")
	e.op("ld.u32 %g1, [%h0+", strconv.Itoa(hdrStride), "]")
	e.op("cvt.u64.u32 %h2, %g0")
	e.op("sub.s64 %h2, %h2, 1")
	e.op("and.b64 %h3, %h1, %h2")
	e.op("cvt.u64.u32 %h4, %g1")
	e.op("mad.lo.u64 %h3, %h3, %h4, %h0")
	e.op("add.s64 %h3, %h3, ", strconv.Itoa(dataOffset))
	e.op("cvta.to.global.u64 %h3, %h3") // device memory: no generic resolution per store
	e.op("st.global.u32 [%h3+8], ", strconv.FormatInt(d.Size, 10))
	e.op("st.global.u32 [%h3+12], ", strconv.Itoa(RingRecordType))
	for j := int64(0); j < d.Size; j += 8 {
		dst := func(k int64) string { return "[%h3+" + strconv.FormatInt(slotHeader+j+k, 10) + "]" }
		off := d.Off + j
		if cell, ok := c.slots[off]; ok && cell.size == 8 {
			e.op("st.global.u64 ", dst(0), ", ", cell.reg)
			continue
		}
		lo, okLo := c.slots[off]
		hi, okHi := c.slots[off+4]
		if okLo && okHi {
			e.op("st.global.u32 ", dst(0), ", ", lo.reg)
			e.op("st.global.u32 ", dst(4), ", ", hi.reg)
			continue
		}
		src, _ := c.stackSlot(regNames[asm.R10], off)
		e.op("ld.local.u64 %h5, ", src)
		e.op("st.global.u64 ", dst(0), ", %h5")
	}
	e.op("add.s64 %h5, %h1, 1")
	e.op("st.release.gpu.global.u64 [%h3], %h5")
	e.op("mov.u64 %r0, 0")
	e.label(done)
}
