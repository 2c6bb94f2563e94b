package ptx

import (
	"strconv"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// ldImm writes LD_IMM64: a constant, a map reference (an opaque handle,
// see mapHandleBase) or the address of a map value (direct value access,
// used for global data): the map region's base + shm.DataOffset + offset,
// or NULL while the map is not attached; for a per-block array, the
// generic address of the calling block's value of key 0 plus offset.
func (c *compiler) ldImm(i int, ins *asm.Instruction) error {
	if !ins.OpCode.IsDWordLoad() {
		return c.errf(i, "legacy packet access (LD_ABS/LD_IND) is not supported")
	}
	d, err := c.dstReg(i, ins.Dst)
	if err != nil {
		return err
	}
	e := &c.e
	switch ins.Src {
	case asm.R0:
		e.op("mov.b64 ", d, ", ", u64(uint64(ins.Constant)))
	case asm.PseudoMapFD:
		k, _, err := c.mapRef(i, ins)
		if err != nil {
			return err
		}
		e.op("mov.b64 ", d, ", ", u64(mapHandleBase+uint64(k)))
	case asm.PseudoMapValue:
		_, m, err := c.mapRef(i, ins)
		if err != nil {
			return err
		}
		off := uint64(ins.Constant) >> 32
		if m.Type == jit.MapTypePerBlockArray {
			// Key 0 of the calling block's values (as the interpreter).
			if err := c.checkBlockMap(i, m); err != nil {
				return err
			}
			e.op("mov.u64 ", d, ", ", c.sharedFor(m))
			e.op("cvta.shared.u64 ", d, ", ", d)
			e.op("add.s64 ", d, ", ", d, ", ", u64(off))
			return nil
		}
		g := c.addGlobal(GlobalMap, m.Name)
		c.loadGlobal("%h0", g)
		e.op("setp.eq.u64 %q0, %h0, 0")
		e.op("add.s64 ", d, ", %h0, ", u64(valuesAt(m)+off))
		e.op("@%q0 mov.u64 ", d, ", 0")
	default:
		return c.errf(i, "LD_IMM64 with src %d is not supported", ins.Src)
	}
	return nil
}

// mapRef finds the map an LD_IMM64 refers to: by Reference() name, or by
// index in Program.Maps in the low 32 bits of the constant.
func (c *compiler) mapRef(i int, ins *asm.Instruction) (int, *jit.Map, error) {
	if ref := ins.Reference(); ref != "" {
		for k, m := range c.p.Maps {
			if m != nil && m.Name == ref {
				return k, m, nil
			}
		}
		return 0, nil, c.errf(i, "map %q is not among the program's maps", ref)
	}
	k := int(uint32(ins.Constant))
	if k >= len(c.p.Maps) || c.p.Maps[k] == nil {
		return 0, nil, c.errf(i, "map reference %d: the program has %d maps", k, len(c.p.Maps))
	}
	return k, c.p.Maps[k], nil
}

// writesReg says whether ins may write reg.
func writesReg(ins *asm.Instruction, reg asm.Register) bool {
	switch cls := ins.OpCode.Class(); {
	case cls.IsALU(), cls == asm.LdClass, cls == asm.LdXClass:
		return ins.Dst == reg
	case cls == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode:
		aop := ins.OpCode.AtomicOp()
		if aop == asm.CmpXchg {
			return reg == asm.R0
		}
		return aop&asm.FetchAdd&^asm.AddAtomic != 0 && ins.Src == reg
	case cls.IsJump() && ins.OpCode.JumpOp() == asm.Call:
		return reg <= asm.R5
	}
	return false
}

// mapCandidates lists the maps whose handle reg may hold at instruction i.
// When the last write to reg in the same straight-line block is a map
// reference, that map is the only one; otherwise every map is possible and
// the helper dispatches on the handle at run time.
func (c *compiler) mapCandidates(i int, reg asm.Register) (cands []int, static bool) {
	for j := i - 1; j >= c.cur.start; j-- {
		ins := &c.insns[j]
		if writesReg(ins, reg) {
			if ins.OpCode.IsDWordLoad() && ins.Src == asm.PseudoMapFD {
				if k, _, err := c.mapRef(j, ins); err == nil {
					return []int{k}, true
				}
			}
			break
		}
		if c.isLabel[j] {
			break
		}
	}
	for k, m := range c.p.Maps {
		if m != nil {
			cands = append(cands, k)
		}
	}
	return cands, false
}

// dispatch writes gen(k) for each candidate map, selected at run time by
// comparing reg with the map's handle; fallback runs when none matches.
func (c *compiler) dispatch(reg asm.Register, cands []int, static bool, gen func(k int) error, fallback func()) error {
	e := &c.e
	if static && len(cands) == 1 {
		return gen(cands[0])
	}
	done := c.newLabel()
	for _, k := range cands {
		next := c.newLabel()
		e.op("setp.ne.u64 %q7, ", regNames[reg], ", ", u64(mapHandleBase+uint64(k)))
		e.op("@%q7 bra ", next)
		if err := gen(k); err != nil {
			return err
		}
		e.op("bra.uni ", done)
		e.label(next)
	}
	fallback()
	e.label(done)
	return nil
}

func isGPUArray(t jit.MapType) bool {
	return t == jit.MapTypeGPUArray || t == jit.MapTypePerThreadArray || t == jit.MapTypePerWarpArray ||
		t == jit.MapTypePerBlockArray
}

// SharedName is the PTX name of the .shared variable that holds per-block
// array mapName (map type 1601). It depends on the map's name only, not
// on Options.Prefix, so that the programs of one object spliced into one
// module (an entry and an exit probe, each with its own prefix) address
// the same block-local values.
func SharedName(mapName string) string { return "gpuprobe_blk_" + Sanitize(mapName) }

// checkBlockMap rejects a per-block array that PTX cannot declare or that
// would take more than jit.MaxBlockMapBytes of every block's shared memory.
func (c *compiler) checkBlockMap(i int, m *jit.Map) error {
	size := uint64(m.MaxEntries) * align8(m.ValueSize)
	switch {
	case m.ValueSize == 0 || m.MaxEntries == 0:
		return c.errf(i, "per-block map %q: value size %d, max_entries %d: both must be non-zero", m.Name, m.ValueSize, m.MaxEntries)
	case size > jit.MaxBlockMapBytes:
		return c.errf(i, "per-block map %q: %d entries of %d bytes take %d bytes of shared memory per block, more than the %d allowed",
			m.Name, m.MaxEntries, align8(m.ValueSize), size, jit.MaxBlockMapBytes)
	}
	return nil
}

// sharedFor declares, once, the .shared variable of per-block array m
// (checked by checkBlockMap) and returns its name.
func (c *compiler) sharedFor(m *jit.Map) string {
	name := SharedName(m.Name)
	for _, s := range c.shared {
		if s.Name == name {
			return name
		}
	}
	c.shared = append(c.shared, Shared{Name: name, Map: m.Name, Size: uint64(m.MaxEntries) * align8(m.ValueSize)})
	return name
}

func align8(v uint32) uint64 { return (uint64(v) + 7) &^ 7 }

// valuesAt is the offset of a map's first value from the address in its
// GlobalMap global: 0 for a kernel map (BPF_F_MMAPABLE array, no header),
// the shm data offset otherwise.
func valuesAt(m *jit.Map) uint64 {
	if m.Mmapable() || m.Type == jit.MapTypePerBlockArray {
		return 0
	}
	return dataOffset
}

// mapHelper writes map_lookup_elem, map_update_elem or map_delete_elem.
func (c *compiler) mapHelper(i int, id jit.HelperID) error {
	e := &c.e
	cands, static := c.mapCandidates(i, asm.R1)
	if len(cands) == 0 {
		return c.errf(i, "helper %d needs a map, and the program has none", id)
	}
	gen := func(k int) error {
		m := c.p.Maps[k]
		switch {
		case isGPUArray(m.Type), m.Mmapable():
			return c.gpuArrayOp(i, id, m)
		case m.Type == jit.MapTypeGPUHash:
			c.gpuHashOp(id, m)
			return nil
		case m.Type == jit.MapTypeGPURingbuf:
			if id == jit.HelperMapLookupElem {
				e.op("mov.u64 %r0, 0")
			} else {
				e.op("mov.u64 %r0, ", i64(-errINVAL))
			}
			return nil
		default:
			return c.hostMapOp(i, id, k, m)
		}
	}
	fallback := func() {
		if id == jit.HelperMapLookupElem {
			e.op("mov.u64 %r0, 0")
		} else {
			e.op("mov.u64 %r0, ", i64(-errINVAL))
		}
	}
	return c.dispatch(asm.R1, cands, static, gen, fallback)
}

// arraySlot writes %r0 = the address of the value of key %h1 for the
// calling thread (per-thread array), warp (per-warp array), block
// (per-block array: a generic address into the block's shared memory) or
// everyone (array, kernel map), or 0 when the key or lane is out of range
// or the map is not attached.
func (c *compiler) arraySlot(m *jit.Map) {
	e := &c.e
	if m.Type == jit.MapTypePerBlockArray {
		e.op("mov.u64 %h2, ", c.sharedFor(m))
		e.op("cvta.shared.u64 %h2, %h2")
		e.op("setp.ge.u64 %q1, %h1, ", u64(uint64(m.MaxEntries)))
	} else {
		g := c.addGlobal(GlobalMap, m.Name)
		c.loadGlobal("%h2", g)
		e.op("setp.eq.u64 %q1, %h2, 0")
		e.op("setp.ge.or.u64 %q1, %h1, ", u64(uint64(m.MaxEntries)), ", %q1")
	}
	e.op("mov.b64 %h5, %h1")
	if m.Type == jit.MapTypePerThreadArray || m.Type == jit.MapTypePerWarpArray {
		lanes := c.addGlobal(GlobalMapLanes, m.Name)
		c.loadGlobal("%h3", lanes)
		c.threadID("%h4", "%h", "%g")
		if m.Type == jit.MapTypePerWarpArray {
			e.op("shr.u64 %h4, %h4, 5")
		}
		e.op("setp.ge.or.u64 %q1, %h4, %h3, %q1")
		e.op("mad.lo.u64 %h5, %h1, %h3, %h4")
	}
	e.op("mul.lo.u64 %h5, %h5, ", u64(align8(m.ValueSize)))
	if off := valuesAt(m); off != 0 {
		e.op("add.s64 %h5, %h5, %h2")
		e.op("add.s64 %r0, %h5, ", strconv.FormatUint(off, 10))
	} else {
		e.op("add.s64 %r0, %h5, %h2")
	}
	e.op("@%q1 mov.u64 %r0, 0")
}

// arrayKey writes %h1 = the 4-byte key that map helper call i points to
// with r2: the number itself when the verifier found it to be the same on
// every path (Result.ConstKeys), which spares the stack store's round trip
// and lets ptxas fold the bounds check and the address; a load otherwise.
func (c *compiler) arrayKey(i int) {
	if v := c.o.Verified; v != nil {
		if k, ok := v.ConstKeys[i]; ok {
			c.e.op("mov.u64 %h1, ", u64(k&0xffffffff))
			return
		}
		// A key in this function's frame is a .local load of its slot,
		// which ptxas can forward from the store that wrote it.
		if off, ok := v.StackKeys[i]; ok && off%4 == 0 {
			if c.frameKey(off) {
				return
			}
			if a, ok := c.stackSlot(regNames[asm.R10], off); ok {
				c.e.op("ld.local.u32 %h1, ", a)
				return
			}
		}
	}
	c.load("%h1", "%r2", 0, asm.Word, false, c.proven(i))
}

// gpuArrayOp writes a map helper on a GPU-resident array or a kernel map
// (BPF_F_MMAPABLE array in host memory the device maps), inline. The
// returned pointer goes to the map's memory as it is: the program's own
// loads through it are generic (weak) loads, which the L1 may serve from a
// line cached earlier in the same launch (L1 is not coherent with host
// writes, and is invalidated between launches); see doc.go, "Kernel maps".
func (c *compiler) gpuArrayOp(i int, id jit.HelperID, m *jit.Map) error {
	e := &c.e
	if m.KeySize != 4 {
		return c.errf(i, "map %q: array keys are 4 bytes, not %d", m.Name, m.KeySize)
	}
	if m.ValueSize == 0 {
		return c.errf(i, "map %q: value size 0", m.Name)
	}
	if m.Type == jit.MapTypePerBlockArray {
		if err := c.checkBlockMap(i, m); err != nil {
			return err
		}
	}
	switch id {
	case jit.HelperMapLookupElem:
		c.arrayKey(i)
		c.arraySlot(m)
	case jit.HelperMapUpdateElem:
		// Linux's array semantics: flags beyond BPF_EXIST (BPF_F_LOCK
		// aside) are invalid, BPF_NOEXIST fails, a key out of range is
		// -E2BIG.
		done := c.newLabel()
		e.op("and.b64 %h6, %r4, ", u64(^uint64(4)))
		e.op("setp.gt.u64 %q2, %h6, 2")
		e.op("mov.u64 %r0, ", i64(-errINVAL))
		e.op("@%q2 bra ", done)
		e.op("setp.eq.u64 %q2, %h6, 1")
		e.op("mov.u64 %r0, ", i64(-errEXIST))
		e.op("@%q2 bra ", done)
		c.arrayKey(i)
		c.arraySlot(m)
		e.op("setp.eq.u64 %q2, %r0, 0")
		e.op("mov.u64 %h7, %r0")
		e.op("mov.u64 %r0, ", i64(-errE2BIG))
		e.op("@%q2 bra ", done)
		c.callFunc(c.need(funcMemcpy), "", "%h7", "%r3", u64(uint64(m.ValueSize)))
		e.op("mov.u64 %r0, 0")
		e.label(done)
	case jit.HelperMapDeleteElem:
		e.op("mov.u64 %r0, ", i64(-errINVAL))
	}
	return nil
}

// hostMapOp writes a map helper on a map that lives on the host, through
// the mailbox. Request: args = (map index, r2, r3, r4, jit.HostMapID of
// the map's name), payload = the
// key, then (update) the value. A lookup's answer is the byte offset of the
// value in the map's region (which the host keeps registered with the
// device), or negative for "no entry"; the GPU code adds the region's
// device base.
func (c *compiler) hostMapOp(i int, id jit.HelperID, k int, m *jit.Map) error {
	e := &c.e
	n2 := uint32(0)
	if id == jit.HelperMapUpdateElem {
		n2 = m.ValueSize
	}
	if uint64(m.KeySize)+uint64(n2) > mailboxPayload {
		return c.errf(i, "map %q: key and value (%d bytes) do not fit a mailbox payload (%d)", m.Name, uint64(m.KeySize)+uint64(n2), mailboxPayload)
	}
	c.loadMailbox()
	c.callFunc(c.need(funcHostcall), "%r0", "%h0", strconv.Itoa(int(id)), u64(uint64(k)), "%r2", "%r3", "%r4", u64(jit.HostMapID(m.Name)),
		"%r2", u64(uint64(m.KeySize)), "%r3", u64(uint64(n2)), "0", "%h1")
	if id == jit.HelperMapLookupElem {
		g := c.addGlobal(GlobalMap, m.Name)
		c.loadGlobal("%h2", g)
		e.op("setp.lt.s64 %q1, %r0, 0")
		e.op("setp.eq.or.u64 %q1, %h2, 0, %q1")
		e.op("add.s64 %r0, %r0, %h2")
		e.op("@%q1 mov.u64 %r0, 0")
	}
	return nil
}

// perfEventOutput writes perf_event_output(ctx, map, flags, data, size)
// into a GPU ring buffer (map type 1527). flags are ignored (there is one
// ring per map, not one per CPU).
func (c *compiler) perfEventOutput(i int) error {
	e := &c.e
	cands, static := c.mapCandidates(i, asm.R2)
	var rings []int
	for _, k := range cands {
		if c.p.Maps[k].Type == jit.MapTypeGPURingbuf {
			rings = append(rings, k)
		} else if static {
			return c.errf(i, "perf_event_output to map %q of type %d: only GPU ring buffers (type %d) can be written", c.p.Maps[k].Name, c.p.Maps[k].Type, jit.MapTypeGPURingbuf)
		}
	}
	if len(rings) == 0 {
		return c.errf(i, "perf_event_output needs a GPU ring buffer map (type %d), and the program has none", jit.MapTypeGPURingbuf)
	}
	gen := func(k int) error {
		g := c.addGlobal(GlobalMap, c.p.Maps[k].Name)
		c.loadGlobal("%h0", g)
		if d, ok := c.recordInRegs(i); ok {
			c.ringRecordInRegs(d)
			return nil
		}
		if c.deviceMap(c.p.Maps[k].Name) {
			c.callFunc(c.need(funcRingoutWarp), "%r0", "%h0", "%r4", "%r5")
			return nil
		}
		if c.o.RingDevice {
			d := c.ringDeviceGlobal(c.p.Maps[k].Name)
			c.loadGlobal("%h1", d)
			c.callFunc(c.need(funcRingoutDev), "%r0", "%h0", "%r4", "%r5", "%h1")
			return nil
		}
		c.callFunc(c.need(funcRingout), "%r0", "%h0", "%r4", "%r5")
		return nil
	}
	fallback := func() { e.op("mov.u64 %r0, ", i64(-errINVAL)) }
	return c.dispatch(asm.R2, rings, static, gen, fallback)
}

// ringDeviceGlobal declares, once, the global that holds the device
// address of ring mapName's reservation block, named after the map's base
// global, and returns its name.
func (c *compiler) ringDeviceGlobal(mapName string) string {
	name := c.o.Prefix + "_map_" + Sanitize(mapName) + "_dev"
	if c.globalSet == nil {
		c.globalSet = make(map[string]bool)
	}
	if !c.globalSet[name] {
		c.globalSet[name] = true
		c.globals = append(c.globals, Global{Name: name, Kind: GlobalRingDevice, Map: mapName})
	}
	return name
}
