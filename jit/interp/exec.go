package interp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/gpuprobe/gpuprobe/jit"
)

type frame struct {
	ret   int
	saved [4]uint64 // r6..r9
}

// thread is the state of one running lane.
type thread struct {
	m         *Machine
	env       *Env
	maps      *Maps
	mapStates []*mapState

	regs   [11]uint64
	pc     int
	frames []frame
	stack  []byte // MaxFrames × StackSize; frame f is the f-th 512 bytes from the top
	ctx    []byte
	jumps  int // backward jumps taken

	done         bool
	atCollective bool
	collective   jit.HelperID // the warp helper a waiting lane called
}

const stackBytes = MaxFrames * jit.StackSize

func (m *Machine) newThread(ctx []byte, env *Env) (*thread, error) {
	if env.Maps == nil {
		env.Maps = NewMaps()
	}
	t, _ := m.pool.Get().(*thread)
	if t == nil {
		t = &thread{stack: make([]byte, stackBytes), mapStates: make([]*mapState, len(m.prog.Maps))}
	}
	stack, states, frames := t.stack, t.mapStates, t.frames[:0]
	*t = thread{m: m, env: env, maps: env.Maps, ctx: ctx, stack: stack, mapStates: states, frames: frames}
	clear(t.stack[stackBytes-jit.StackSize:]) // the entry frame starts zeroed
	for i, def := range m.prog.Maps {
		s, err := env.Maps.declare(def)
		if err != nil {
			return nil, err
		}
		t.mapStates[i] = s
	}
	t.regs[1] = regionCtx << regionShift
	t.regs[2] = uint64(len(ctx))
	t.regs[10] = regionStack<<regionShift | stackBytes
	return t, nil
}

// stackLow is the lowest stack offset the current frame may touch; frames
// of callers (above it) stay reachable through pointers passed down.
func (t *thread) stackLow() uint64 {
	return uint64(stackBytes - (len(t.frames)+1)*jit.StackSize)
}

var errNull = errors.New("null pointer dereference")

// mem returns the n bytes at addr, checking bounds and writability.
func (t *thread) mem(addr uint64, n int, write bool) ([]byte, error) {
	off := addr & offsetMask
	end := off + uint64(n)
	access := "read"
	if write {
		access = "write"
	}
	switch addr >> regionShift {
	case regionCtx:
		if end <= uint64(len(t.ctx)) {
			return t.ctx[off:end], nil
		}
		return nil, fmt.Errorf("%s of %d bytes at ctx+%d is out of bounds (ctx is %d bytes)", access, n, off, len(t.ctx))
	case regionStack:
		if off >= t.stackLow() && end <= stackBytes {
			return t.stack[off:end], nil
		}
		return nil, fmt.Errorf("%s of %d bytes at r10%+d is outside the %d-byte stack frame", access, n, int64(off)-int64(stackBytes-len(t.frames)*jit.StackSize), jit.StackSize)
	case 0:
		if addr < 4096 {
			return nil, fmt.Errorf("%s of %d bytes at %#x: %w", access, n, addr, errNull)
		}
	case regionHandles:
		return nil, fmt.Errorf("%s through a map handle: map handles are not pointers", access)
	}
	r := t.maps.region(addr)
	switch {
	case r == nil:
		return nil, fmt.Errorf("%s of %d bytes at %#x: not a valid pointer", access, n, addr)
	case r.data == nil:
		return nil, fmt.Errorf("%s of %d bytes at %#x: the map element was deleted", access, n, addr)
	case end > uint64(len(r.data)):
		return nil, fmt.Errorf("%s of %d bytes at map value offset %d is beyond the value", access, n, off%uint64(max(r.elem, 1)))
	case r.elem > 0 && off/uint64(r.elem) != (end-1)/uint64(r.elem):
		return nil, fmt.Errorf("%s of %d bytes at map value offset %d crosses the end of the %d-byte value", access, n, off%uint64(r.elem), r.elem)
	case write && !r.writable:
		return nil, fmt.Errorf("write to read-only memory at %#x", addr)
	}
	return r.data[off:end], nil
}

func load(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func store(b []byte, v uint64) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func sizeOf(code uint8) int {
	switch code & 0x18 {
	case 0x10:
		return 1
	case 0x08:
		return 2
	case 0x00:
		return 4
	}
	return 8
}

func (t *thread) fail(pc int, format string, args ...any) error {
	return insnError(t.m.prog, pc, fmt.Sprintf(format, args...))
}

// jump moves to target, counting backward jumps against jit.LoopBudget.
// It reports false when the budget is spent and the program has ended.
func (t *thread) jump(pc int, target int32) bool {
	if int(target) <= pc {
		t.jumps++
		if t.jumps > jit.LoopBudget {
			t.regs[0], t.done = 0, true
			return false
		}
	}
	t.pc = int(target)
	return true
}

// exec runs until the program ends (t.done) or reaches a warp collective
// (t.atCollective, pc at the call).
func (t *thread) exec() error {
	ops := t.m.ops
	r := &t.regs
	for {
		pc := t.pc
		if pc >= len(ops) {
			return t.fail(len(ops)-1, "execution fell off the end of the program")
		}
		o := &ops[pc]
		t.pc = pc + 1
		switch o.code & 7 {
		case 0x07: // ALU64
			s := uint64(o.imm)
			if o.code&0x08 != 0 {
				s = r[o.src]
			}
			alu64(o, &r[o.dst], s)
		case 0x04: // ALU
			if o.code&0xf0 == 0xd0 {
				r[o.dst] = endian(o, r[o.dst])
				continue
			}
			s := uint64(o.imm)
			if o.code&0x08 != 0 {
				s = r[o.src]
			}
			r[o.dst] = uint64(alu32(o, r[o.dst], s))
		case 0x05, 0x06: // JMP, JMP32
			op := o.code & 0xf0
			switch op {
			case 0x00:
				if !t.jump(pc, o.target) {
					return nil
				}
				continue
			case 0x80:
				if err := t.callOp(pc, o); err != nil || t.done || t.atCollective {
					return err
				}
				continue
			case 0x90:
				if len(t.frames) == 0 {
					t.done = true
					return nil
				}
				f := t.frames[len(t.frames)-1]
				t.frames = t.frames[:len(t.frames)-1]
				copy(r[6:10], f.saved[:])
				r[10] = regionStack<<regionShift | uint64(stackBytes-len(t.frames)*jit.StackSize)
				t.pc = f.ret
				continue
			}
			d := r[o.dst]
			s := uint64(o.imm)
			if o.code&0x08 != 0 {
				s = r[o.src]
			}
			var taken bool
			if o.code&7 == 0x06 {
				taken = cond32(op, uint32(d), uint32(s))
			} else {
				taken = cond64(op, d, s)
			}
			if taken && !t.jump(pc, o.target) {
				return nil
			}
		case 0x01: // LDX
			b, err := t.mem(r[o.src]+uint64(int64(o.ext)), sizeOf(o.code), false)
			if err != nil {
				return t.fail(pc, "%v", err)
			}
			v := load(b)
			if o.code&0xe0 == 0x80 { // sign-extending
				v = signExtend(v, 8*len(b))
			}
			r[o.dst] = v
		case 0x02: // ST
			b, err := t.mem(r[o.dst]+uint64(int64(o.ext)), sizeOf(o.code), true)
			if err != nil {
				return t.fail(pc, "%v", err)
			}
			store(b, uint64(o.imm))
		case 0x03: // STX
			b, err := t.mem(r[o.dst]+uint64(int64(o.ext)), sizeOf(o.code), true)
			if err != nil {
				return t.fail(pc, "%v", err)
			}
			if o.code&0xe0 == 0xc0 {
				t.atomicOp(o, b)
			} else {
				store(b, r[o.src])
			}
		case 0x00: // LDDW
			switch {
			case o.mapIdx < 0:
				r[o.dst] = uint64(o.imm)
			case o.pseudo == 1: // map handle
				r[o.dst] = regionHandles<<regionShift | uint64(o.mapIdx)
			default: // direct value access: key 0 plus offset
				s := t.mapStates[o.mapIdx]
				addr := t.maps.lookup(s, make([]byte, s.def.KeySize), t.env)
				if addr == 0 {
					return t.fail(pc, "map %q has no value at key 0 for direct access", s.def.Name)
				}
				r[o.dst] = addr + uint64(o.imm)
			}
		}
	}
}

func alu64(o *op, d *uint64, s uint64) {
	switch o.code & 0xf0 {
	case 0x00:
		*d += s
	case 0x10:
		*d -= s
	case 0x20:
		*d *= s
	case 0x30:
		switch {
		case s == 0:
			*d = 0
		case o.ext == 1:
			*d = uint64(int64(*d) / int64(s))
		default:
			*d /= s
		}
	case 0x40:
		*d |= s
	case 0x50:
		*d &= s
	case 0x60:
		*d <<= s & 63
	case 0x70:
		*d >>= s & 63
	case 0x80:
		*d = -*d
	case 0x90:
		switch {
		case s == 0:
		case o.ext == 1:
			*d = uint64(int64(*d) % int64(s))
		default:
			*d %= s
		}
	case 0xa0:
		*d ^= s
	case 0xb0:
		s = signExtend(s, int(o.ext))
		*d = s
	case 0xc0:
		*d = uint64(int64(*d) >> (s & 63))
	case 0xd0: // bswap
		switch o.imm {
		case 16:
			*d = uint64(bits.ReverseBytes16(uint16(*d)))
		case 32:
			*d = uint64(bits.ReverseBytes32(uint32(*d)))
		default:
			*d = bits.ReverseBytes64(*d)
		}
	}
}

func alu32(o *op, d64, s64 uint64) uint32 {
	d, s := uint32(d64), uint32(s64)
	switch o.code & 0xf0 {
	case 0x00:
		return d + s
	case 0x10:
		return d - s
	case 0x20:
		return d * s
	case 0x30:
		switch {
		case s == 0:
			return 0
		case o.ext == 1:
			return uint32(int32(d) / int32(s))
		}
		return d / s
	case 0x40:
		return d | s
	case 0x50:
		return d & s
	case 0x60:
		return d << (s & 31)
	case 0x70:
		return d >> (s & 31)
	case 0x80:
		return -d
	case 0x90:
		switch {
		case s == 0:
			return d
		case o.ext == 1:
			return uint32(int32(d) % int32(s))
		}
		return d % s
	case 0xa0:
		return d ^ s
	case 0xb0:
		switch o.ext {
		case 8:
			return uint32(int32(int8(s)))
		case 16:
			return uint32(int32(int16(s)))
		}
		return s
	case 0xc0:
		return uint32(int32(d) >> (s & 31))
	}
	return d
}

// endian converts to (le, 0xd4) or from/to big-endian (be, 0xdc) at the
// width in imm, zero-extending the result; the host is little-endian.
func endian(o *op, d uint64) uint64 {
	be := o.code&0x08 != 0
	switch o.imm {
	case 16:
		if be {
			return uint64(bits.ReverseBytes16(uint16(d)))
		}
		return uint64(uint16(d))
	case 32:
		if be {
			return uint64(bits.ReverseBytes32(uint32(d)))
		}
		return uint64(uint32(d))
	}
	if be {
		return bits.ReverseBytes64(d)
	}
	return d
}

func cond64(op uint8, d, s uint64) bool {
	switch op {
	case 0x10:
		return d == s
	case 0x20:
		return d > s
	case 0x30:
		return d >= s
	case 0x40:
		return d&s != 0
	case 0x50:
		return d != s
	case 0x60:
		return int64(d) > int64(s)
	case 0x70:
		return int64(d) >= int64(s)
	case 0xa0:
		return d < s
	case 0xb0:
		return d <= s
	case 0xc0:
		return int64(d) < int64(s)
	case 0xd0:
		return int64(d) <= int64(s)
	}
	return false
}

func cond32(op uint8, d, s uint32) bool {
	switch op {
	case 0x60:
		return int32(d) > int32(s)
	case 0x70:
		return int32(d) >= int32(s)
	case 0xc0:
		return int32(d) < int32(s)
	case 0xd0:
		return int32(d) <= int32(s)
	}
	return cond64(op, uint64(d), uint64(s))
}

// atomicOp performs an atomic read-modify-write on b (4 or 8 bytes).
// Lanes run one at a time, so a plain read-modify-write is atomic here.
func (t *thread) atomicOp(o *op, b []byte) {
	r := &t.regs
	old := load(b)
	src := r[o.src]
	is32 := len(b) == 4
	var nv uint64
	switch o.imm &^ 1 {
	case 0x00:
		nv = old + src
	case 0x40:
		nv = old | src
	case 0x50:
		nv = old & src
	case 0xa0:
		nv = old ^ src
	case 0xe0: // xchg
		nv = src
	case 0xf0: // cmpxchg: compare with r0, r0 gets the old value
		cmp := r[0]
		if is32 {
			cmp = uint64(uint32(cmp))
		}
		nv = old
		if old == cmp {
			nv = src
		}
		store(b, nv)
		r[0] = old
		return
	}
	store(b, nv)
	if o.imm&1 != 0 {
		r[o.src] = old
	}
}

// signExtend sign-extends the low 8, 16 or 32 bits of v to 64; any other
// width leaves v as it is.
func signExtend(v uint64, bits int) uint64 {
	switch bits {
	case 8:
		return uint64(int64(int8(v)))
	case 16:
		return uint64(int64(int16(v)))
	case 32:
		return uint64(int64(int32(v)))
	}
	return v
}
