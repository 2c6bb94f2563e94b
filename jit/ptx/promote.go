package ptx

import (
	"strconv"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Frame slots in registers.
//
// clang spills values that live across helper calls (which it must assume
// clobber r1..r5) to 8-byte stack slots, and each spill is a local-memory
// store and load (STL/LDL through L1) in the kernel the probe runs in. With
// the verifier's facts, a slot that no run reaches through a pointer other
// than r10 (Result.StackEscaped), and that the function only stores and
// loads at r10+off, whole or as 4-byte halves (a u32 key built at run
// time), is a PTX register instead, or two: ptxas allocates them like any
// other value. Keys the compiler loads from the frame (Result.StackKeys)
// may read a half of either kind.

// slotOf is the 8-byte slot (its offset from r10) that holds byte off.
func slotOf(off int64) int64 {
	if off >= 0 {
		return off &^ 7
	}
	return -((-off + 7) &^ 7)
}

// frameCell is a frame slot, or one 4-byte half of one, kept in a register.
type frameCell struct {
	reg  string
	size int // 8, or 4: the register holds the half zero-extended
}

// promoteSlots returns the cells of f's frame that live in registers, by
// offset from r10 (nil without the verifier's facts). A slot qualifies when
// no pointer reaches it and every access is the whole slot, or every access
// is one of its 4-byte halves (a u32 key, say); keys the compiler loads
// from the frame may read either kind.
func (c *compiler) promoteSlots(f *fn) map[int64]frameCell {
	v := c.o.Verified
	if v == nil || !f.stack {
		return nil
	}
	whole := map[int64]bool{}  // slot accessed whole
	halves := map[int64]bool{} // slot accessed in 4-byte halves
	used := map[int64]bool{}
	bad := map[int64]bool{}
	access := func(off int64, n int) {
		s := slotOf(off)
		switch {
		case n == 8 && off%8 == 0:
			whole[s], used[s] = true, true
		case n == 4 && off%4 == 0:
			halves[s], used[s] = true, true
		default:
			for s := slotOf(off); s < off+int64(max(n, 1)); s += 8 {
				bad[s] = true
			}
		}
	}
	for i := f.start; i < f.end; i++ {
		ins := &c.insns[i]
		off, n := int64(ins.Offset), ins.OpCode.Size().Sizeof()
		switch cls := ins.OpCode.Class(); {
		case cls == asm.LdXClass && ins.Src == asm.R10:
			if ins.OpCode.Mode() != asm.MemMode {
				n = 0 // sign-extending: never kept
			}
			access(off, n)
		case (cls == asm.StClass || cls == asm.StXClass) && ins.Dst == asm.R10:
			switch {
			case ins.OpCode.Mode() != asm.MemMode:
				access(off, 0) // an atomic on the frame
			case !v.DeadStore(i):
				access(off, n)
			}
		case ins.IsBuiltinCall():
			if d, ok := v.StackData[i]; ok {
				_, regs := c.recordInRegs(i)
				for s := d.Off; s < d.Off+d.Size; s += 8 {
					if regs {
						used[s] = true // stored into the ring from either kind
					} else {
						bad[s] = true // read from memory by the ring routine
					}
				}
			}
			if offs, ok := v.StackOuts[i]; ok {
				for _, o := range offs {
					access(o, 8) // the helper writes the register
				}
			}
			if _, folded := v.ConstKeys[i]; !folded {
				if k, ok := v.StackKeys[i]; ok && k%4 == 0 {
					used[slotOf(k)] = true // read by arrayKey, either kind
				}
			}
		}
	}
	var cells map[int64]frameCell
	k := 0
	name := func() string {
		k++
		return "%fs" + strconv.Itoa(k-1)
	}
	for s := int64(-8); s >= -int64(jit.StackSize); s -= 8 { // stable names, by offset
		if !used[s] || bad[s] || whole[s] && halves[s] || v.StackEscaped(f.start, s, s+8) {
			continue
		}
		if cells == nil {
			cells = make(map[int64]frameCell)
		}
		if halves[s] {
			cells[s] = frameCell{name(), 4}
			cells[s+4] = frameCell{name(), 4}
		} else {
			cells[s] = frameCell{name(), 8}
		}
	}
	return cells
}

// frameReg returns the cell that holds the size bytes at base+off when
// base is r10 and they live in a register.
func (c *compiler) frameReg(base asm.Register, off int64, size asm.Size) (frameCell, bool) {
	if base != asm.R10 {
		return frameCell{}, false
	}
	cell, ok := c.slots[off]
	return cell, ok && cell.size == size.Sizeof()
}

// frameKey writes %h1 = the 4-byte key at r10+off from the register that
// holds it, if one does.
func (c *compiler) frameKey(off int64) bool {
	if cell, ok := c.slots[off]; ok && cell.size == 4 {
		c.e.op("mov.b64 %h1, ", cell.reg)
		return true
	}
	cell, ok := c.slots[slotOf(off)]
	if !ok || cell.size != 8 {
		return false
	}
	if off%8 == 0 {
		c.e.op("and.b64 %h1, ", cell.reg, ", 4294967295")
	} else {
		c.e.op("shr.u64 %h1, ", cell.reg, ", 32")
	}
	return true
}
