package verifier

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// ArgType says what a helper expects in one argument register
// (jit.ArgType: the ABI table lives in jit/abi.go).
type ArgType = jit.ArgType

// Argument types of helper signatures.
const (
	ArgNone     = jit.ArgNone
	ArgScalar   = jit.ArgScalar
	ArgAnything = jit.ArgAnything
	ArgMap      = jit.ArgMap
	ArgRingbuf  = jit.ArgRingbuf
	ArgMapKey   = jit.ArgMapKey
	ArgMapValue = jit.ArgMapValue
	ArgMem      = jit.ArgMem
	ArgSize     = jit.ArgSize
	ArgOut8     = jit.ArgOut8
	ArgString   = jit.ArgString
	ArgAtomic8  = jit.ArgAtomic8
)

// RetType says what a helper returns in r0.
type RetType = jit.RetType

// Return types of helper signatures.
const (
	RetScalar         = jit.RetScalar
	RetMapValueOrNull = jit.RetMapValueOrNull
)

// Signature describes a helper's arguments (r1..r5) and its result.
type Signature = jit.Signature

// ConformanceHelpers are the helpers the bpf_conformance suite calls: id 5
// is its "unwind" test helper (one scalar argument, returned). It replaces
// ktime_get_ns (also id 5) when passed in Options.Helpers.
var ConformanceHelpers = map[jit.HelperID]Signature{
	5: {Name: "unwind", Args: [5]ArgType{ArgScalar}},
}

// HelperSignature returns the signature of a helper of the GPU ABI.
func HelperSignature(id jit.HelperID) (Signature, bool) { return jit.HelperSignature(id) }

// signature looks a helper up in the options first, then in the ABI.
func (v *verifier) signature(id int64) (Signature, bool) {
	if id < -1<<31 || id > 1<<31-1 {
		return Signature{}, false
	}
	if s, ok := v.opts.Helpers[jit.HelperID(id)]; ok {
		return s, true
	}
	return HelperSignature(jit.HelperID(id))
}

// callHelper checks a helper call's arguments and applies its effects.
func (v *verifier) callHelper(st *state, i int, ins *asm.Instruction) error {
	fr := st.cur()
	id := ins.Constant
	if isCallx(ins) {
		reg := callxReg(ins)
		t := fr.regs[reg]
		if t.kind == kUninit {
			return v.errorf(i, "r%d is read before it is written", reg)
		}
		c, ok := t.isConst()
		if !ok {
			return v.errorf(i, "callx through r%d: the helper id must be a known constant, r%d is %s", reg, reg, t.describe())
		}
		id = int64(c)
	}
	sig, ok := v.signature(id)
	if !ok {
		return v.errorf(i, "unknown helper %d: not in the GPU helper ABI", id)
	}
	mapIdx := int32(-1)
	blockKey := int64(-1) // a per-block array and a known key in range: where its value starts
	for a, at := range sig.Args {
		r := asm.Register(a + 1)
		arg := fr.regs[r]
		if at == ArgNone {
			continue
		}
		if arg.kind == kUninit {
			return v.errorf(i, "%s: argument r%d is read before it is written", sig.Name, r)
		}
		switch at {
		case ArgScalar:
			if arg.kind != kScalar {
				return v.errorf(i, "%s: argument r%d must be a number, got a %s", sig.Name, r, arg.kind)
			}
		case ArgMap, ArgRingbuf:
			if arg.kind != kMapHandle {
				return v.errorf(i, "%s: argument r%d must be a map (LD_IMM64 map reference), got %s", sig.Name, r, arg.describe())
			}
			m := v.p.Maps[arg.m]
			isRing := m.Type == jit.MapTypeGPURingbuf
			if at == ArgRingbuf && !isRing {
				return v.errorf(i, "%s: map %q has type %d; it needs a GPU ring buffer (type %d)", sig.Name, m.Name, m.Type, jit.MapTypeGPURingbuf)
			}
			if at == ArgMap && isRing {
				return v.errorf(i, "%s cannot be used on the ring buffer map %q", sig.Name, m.Name)
			}
			mapIdx = arg.m
		case ArgMapKey, ArgMapValue:
			if mapIdx < 0 {
				return v.errorf(i, "%s: signature has a key or value argument without a map", sig.Name)
			}
			m := v.p.Maps[mapIdx]
			acc, _ := sig.ArgAccess(a, 0, m)
			size, what := m.KeySize, "key"
			if at == ArgMapValue {
				what = "value"
			}
			// A key's read is noted apart: the compiler folds a known
			// key of an array it indexes itself, and then its bytes are
			// not read (see deadStores).
			v.keyRead = at == ArgMapKey
			err := v.helperMem(st, i, sig.Name, r, int64(acc.Bytes), false, what)
			v.keyRead = false
			if err != nil {
				return err
			}
			if at == ArgMapKey {
				v.keyMap[i].note(uint64(mapIdx), true)
				c, ok := v.stackConst(st, r, size)
				v.keys[i].note(c, ok)
				p := st.cur().regs[r]
				own := p.kind == kStack && p.smin == p.smax && int(p.frame) == len(st.frames)-1
				v.keyAt[i].note(uint64(p.smin), own)
				if ok && m.Type == jit.MapTypePerBlockArray && c < uint64(m.MaxEntries) {
					blockKey = int64(c) * int64((m.ValueSize+7)&^7) // this path's key
				}
			}
		case ArgMem:
			if a+1 >= len(sig.Args) || sig.Args[a+1] != ArgSize {
				return v.errorf(i, "%s: signature has a memory argument without a size", sig.Name)
			}
			n := fr.regs[r+1]
			if n.kind != kScalar {
				return v.errorf(i, "%s: size argument r%d must be a number, got %s", sig.Name, r+1, n.describe())
			}
			if n.umax > jit.MaxSize {
				return v.errorf(i, "%s: size argument r%d is not bounded (at most %d): compare it against a constant before the call", sig.Name, r+1, jit.MaxSize)
			}
			if acc, _ := sig.ArgAccess(a, n.umax, nil); acc.Bytes > 0 {
				// A ring record is kept apart like a key: one in the
				// caller's own frame at a known offset and size can be
				// registers (Result.StackData).
				v.dataRead = jit.HelperID(id) == jit.HelperPerfEventOutput
				err := v.helperMem(st, i, sig.Name, r, int64(acc.Bytes), false, "buffer")
				v.dataRead = false
				if err != nil {
					return err
				}
			}
			if jit.HelperID(id) == jit.HelperPerfEventOutput {
				v.noteData(st, i, r, n)
			}
		case ArgSize:
			// Checked with the preceding ArgMem.
		case ArgOut8:
			// Kept apart like a key: an output at a known offset of the
			// caller's own frame can be a register (Result.StackOuts).
			acc, _ := sig.ArgAccess(a, 0, nil)
			v.outWrite = true
			err := v.helperMem(st, i, sig.Name, r, int64(acc.Bytes), true, "output")
			v.outWrite = false
			if err != nil {
				return err
			}
			v.noteOut(st, i, a, r)
		case ArgString:
			acc, _ := sig.ArgAccess(a, 0, nil)
			if err := v.helperString(st, i, sig.Name, r, acc.Bytes); err != nil {
				return err
			}
		case ArgAtomic8:
			acc, _ := sig.ArgAccess(a, 0, nil)
			if err := v.helperAtomic(st, i, sig.Name, r, int(acc.Bytes)); err != nil {
				return err
			}
		}
	}
	// Results: r0 set, r1-r5 clobbered.
	ret := unknown()
	switch {
	case sig.Ret == RetMapValueOrNull && blockKey >= 0:
		// A per-block array is always there (shared memory): a key in
		// range finds its value, at key × the 8-aligned value size.
		ret = value{kind: kMapValue, m: mapIdx, tz: 3, bo: int32(blockKey) + 1}
	case sig.Ret == RetMapValueOrNull && mapIdx >= 0:
		id := v.lookupID(i, st)
		st.forgetID(id)
		ret = value{kind: kMapValueNul, m: mapIdx, id: id, origin: int32(i), tz: 3}
	}
	fr = st.cur()
	fr.regs[0] = ret
	for r := 1; r <= 5; r++ {
		fr.regs[r] = uninitValue
	}
	return nil
}

// helperMem checks that argument register r points to size accessible bytes
// and, for outputs, records that the helper wrote them.
func (v *verifier) helperMem(st *state, i int, name string, r asm.Register, size int64, write bool, what string) error {
	fr := st.cur()
	p := fr.regs[r]
	switch p.kind {
	case kStack, kCtx, kMapValue:
	case kMapValueNul:
		return v.errorf(i, "%s: %s argument r%d may be NULL: null-check the result of map_lookup_elem%s first", name, what, r, originText(p))
	default:
		return v.errorf(i, "%s: %s argument r%d must point to memory (stack, map value or context), got %s%s", name, what, r, p.describe(), v.mergedHint())
	}
	mode := accRead
	if write {
		mode = accOut
	}
	_, err := v.access(st, i, r, p, 0, int(size), mode, nil)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Reason = fmt.Sprintf("%s: %s argument r%d: %s", name, what, r, e.Reason)
		}
		return err
	}
	return nil
}

// helperAtomic checks that argument register r points to size bytes a helper
// may read, modify and write atomically: a map value (not read-only) or
// the stack (bytes already written), 8-byte aligned. The context is not
// accepted: it is the probe's input, not an accumulator.
func (v *verifier) helperAtomic(st *state, i int, name string, r asm.Register, size int) error {
	p := st.cur().regs[r]
	switch p.kind {
	case kStack, kMapValue:
	case kMapValueNul:
		return v.errorf(i, "%s: pointer argument r%d may be NULL: null-check the result of map_lookup_elem%s first", name, r, originText(p))
	default:
		return v.errorf(i, "%s: argument r%d must point to a map value or the stack, got %s%s", name, r, p.describe(), v.mergedHint())
	}
	if _, err := v.access(st, i, r, p, 0, size, accAtomic, nil); err != nil {
		if e, ok := err.(*Error); ok {
			e.Reason = fmt.Sprintf("%s: pointer argument r%d: %s", name, r, e.Reason)
		}
		return err
	}
	return nil
}

// helperString checks string argument r of helper call i, which reads up
// to and including the first NUL, at most max bytes. When r points to the
// stack at a known offset, a byte known to be 0 there ends the read (a
// string built from constants); otherwise all max bytes must be readable,
// whatever they hold.
func (v *verifier) helperString(st *state, i int, name string, r asm.Register, max uint64) error {
	n := int64(max)
	nul, ok := v.knownNUL(st, r, n)
	if ok {
		n = nul + 1
	}
	err := v.helperMem(st, i, name, r, n, false, "string")
	k := st.cur().regs[r].kind
	if e, isErr := err.(*Error); isErr && !ok && (k == kStack || k == kCtx || k == kMapValue) {
		e.Reason += fmt.Sprintf(" (%s reads up to %d bytes, to the first NUL: end the string with a NUL stored on the stack)", name, max)
	}
	return err
}

// knownNUL returns the index of the first byte known to be 0 among the n
// bytes register r points to, when r points to the stack at a known offset.
func (v *verifier) knownNUL(st *state, r asm.Register, n int64) (int64, bool) {
	p := st.cur().regs[r]
	if p.kind != kStack || p.smin != p.smax || p.smin < -jit.StackSize || int(p.frame) >= len(st.frames) {
		return 0, false
	}
	fr := &st.frames[p.frame]
	for k := int64(0); k < n && p.smin+k < 0; k++ {
		if c, known := fr.known(p.smin+k, 1); known && c == 0 {
			return k, true
		}
	}
	return 0, false
}

// stackConst returns the size bytes register r points to when r points to
// the stack at a known offset and those bytes hold a known number (at most
// 8 bytes).
func (v *verifier) stackConst(st *state, r asm.Register, size uint32) (uint64, bool) {
	p := st.cur().regs[r]
	if p.kind != kStack || p.smin != p.smax || size > 8 || int(p.frame) >= len(st.frames) {
		return 0, false
	}
	return st.frames[p.frame].known(p.smin, int(size))
}

// originText names the lookup call a nullable pointer came from.
func originText(p value) string {
	if p.origin >= 0 {
		return fmt.Sprintf(" (insn %d)", p.origin)
	}
	return ""
}

// noteOut records where output argument a (in register r) of helper call i
// points on this path: a known offset of the caller's own frame, or not.
func (v *verifier) noteOut(st *state, i, a int, r asm.Register) {
	if a >= 3 {
		return
	}
	f := v.outAt[i]
	if f == nil {
		f = new([3]keyFact)
		v.outAt[i] = f
	}
	p := st.cur().regs[r]
	own := p.kind == kStack && p.smin == p.smax && int(p.frame) == len(st.frames)-1
	f[a].note(uint64(p.smin), own)
}

// maxStackData is the largest ring record Result.StackData describes.
const maxStackData = 256

// noteData records where perf_event_output's record (pointer in r, size n)
// is on this path: 8-byte aligned whole slots of the caller's own frame at
// a known offset and size, or not.
func (v *verifier) noteData(st *state, i int, r asm.Register, n value) {
	f := v.dataAt[i]
	if f == nil {
		f = new(keyFact)
		v.dataAt[i] = f
	}
	p := st.cur().regs[r]
	known := p.kind == kStack && p.smin == p.smax && int(p.frame) == len(st.frames)-1 &&
		n.umin == n.umax && n.umin > 0 && n.umin <= maxStackData && n.umin%8 == 0 && p.smin%8 == 0
	f.note(uint64(uint32(int32(p.smin)))<<32|n.umin, known)
}
