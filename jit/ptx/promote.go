package ptx

import (
	"strconv"

	"github.com/cilium/ebpf/asm"
)

// Frame slots in registers.
//
// clang spills values that live across helper calls (which it must assume
// clobber r1..r5) to 8-byte stack slots, and each spill is a local-memory
// store and load (STL/LDL through L1) in the kernel the probe runs in. With
// the verifier's facts, a slot that no run reaches through a pointer other
// than r10 (Result.StackEscaped), and that the function only stores and
// loads whole at r10+off, is a PTX register instead: ptxas allocates it
// like any other value. Keys the compiler loads from the frame
// (Result.StackKeys) may read half of such a slot.

// slotOf is the 8-byte slot (its offset from r10) that holds byte off.
func slotOf(off int64) int64 {
	if off >= 0 {
		return off &^ 7
	}
	return -((-off + 7) &^ 7)
}

// promoteSlots returns the register of each slot of f's frame that lives
// in one (nil without the verifier's facts).
func (c *compiler) promoteSlots(f *fn) map[int64]string {
	v := c.o.Verified
	if v == nil || !f.stack {
		return nil
	}
	used := map[int64]bool{}
	bad := map[int64]bool{}
	whole := func(off int64, n int) {
		if n == 8 && off%8 == 0 {
			used[off] = true
			return
		}
		for s := slotOf(off); s < off+int64(max(n, 1)); s += 8 {
			bad[s] = true
		}
	}
	for i := f.start; i < f.end; i++ {
		ins := &c.insns[i]
		off, n := int64(ins.Offset), ins.OpCode.Size().Sizeof()
		switch cls := ins.OpCode.Class(); {
		case cls == asm.LdXClass && ins.Src == asm.R10:
			if ins.OpCode.Mode() != asm.MemMode {
				n = 0 // sign-extending: never whole
			}
			whole(off, n)
		case (cls == asm.StClass || cls == asm.StXClass) && ins.Dst == asm.R10:
			switch {
			case ins.OpCode.Mode() != asm.MemMode:
				whole(off, 0) // an atomic on the frame
			case !v.DeadStore(i):
				whole(off, n)
			}
		case ins.IsBuiltinCall():
			if _, folded := v.ConstKeys[i]; !folded {
				if k, ok := v.StackKeys[i]; ok && k%4 == 0 {
					used[slotOf(k)] = true // read by arrayKey
				}
			}
		}
	}
	var regs map[int64]string
	for off := range used {
		if bad[off] || v.StackEscaped(f.start, off, off+8) {
			continue
		}
		if regs == nil {
			regs = make(map[int64]string)
		}
		regs[off] = ""
	}
	// Stable names, by offset.
	k := 0
	for off := int64(-8); off >= -512 && k < len(regs); off -= 8 {
		if _, ok := regs[off]; ok {
			regs[off] = "%fs" + strconv.Itoa(k)
			k++
		}
	}
	return regs
}

// frameReg returns the register of the whole slot at r10+off when it lives
// in one.
func (c *compiler) frameReg(base asm.Register, off int64, size asm.Size) (string, bool) {
	if base != asm.R10 || size != asm.DWord || off%8 != 0 {
		return "", false
	}
	r, ok := c.slots[off]
	return r, ok
}
