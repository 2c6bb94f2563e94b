package interp

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// argBytes is the most bytes helper id reads through argument a (0 for
// r1) when its size argument is size, by the ABI table (jit/abi.go), as
// the compiled code copies them.
func argBytes(id jit.HelperID, a int, size uint64) uint64 {
	sig, _ := jit.HelperSignature(id)
	acc, _ := sig.ArgAccess(a, size, nil)
	return acc.Bytes
}

// callOp executes a call: bpf-to-bpf, helper by id, or callx (id in dst).
func (t *thread) callOp(pc int, o *op) error {
	r := &t.regs
	if o.code&0x08 == 0 && o.src == uint8(asm.PseudoCall) {
		if len(t.frames) >= MaxFrames-1 {
			return t.fail(pc, "call depth exceeds %d frames", MaxFrames)
		}
		f := frame{ret: pc + 1}
		copy(f.saved[:], r[6:10])
		t.frames = append(t.frames, f)
		lo := t.stackLow()
		clear(t.stack[lo : lo+jit.StackSize])
		r[10] = regionStack<<regionShift | uint64(stackBytes-len(t.frames)*jit.StackSize)
		t.pc = int(o.target)
		return nil
	}
	id := o.imm
	if o.code&0x08 != 0 {
		reg := o.dst
		if reg == 0 && o.imm > 0 && o.imm <= 10 { // older LLVM put the register in imm
			reg = uint8(o.imm)
		}
		id = int64(r[reg])
		if id < math.MinInt32 || id > math.MaxInt32 {
			return t.fail(pc, "callx: r%d holds %d, not a helper id", reg, r[reg])
		}
	}
	return t.helper(pc, int32(id))
}

// mapArg resolves a map handle argument.
func (t *thread) mapArg(pc int, v uint64, arg string) (*mapState, error) {
	idx := v & offsetMask
	if v>>regionShift != regionHandles || idx >= uint64(len(t.mapStates)) {
		return nil, t.fail(pc, "%s is %#x, not a map handle", arg, v)
	}
	return t.mapStates[idx], nil
}

// read is mem for helper arguments, with the error pinned to pc.
// The argument is described by format and args, rendered only on error.
// Zero bytes are no read: the compiled code does not touch the pointer
// (nor does the verifier check it).
func (t *thread) read(pc int, addr uint64, n int, format string, args ...any) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := t.mem(addr, n, false)
	if err != nil {
		return nil, t.fail(pc, "%s: %v", fmt.Sprintf(format, args...), err)
	}
	return b, nil
}

func (t *thread) helper(pc int, id int32) error {
	r := &t.regs
	env := t.env
	if h, ok := env.Helpers[id]; ok {
		c := &HelperCall{ID: id, t: t}
		copy(c.Args[:], r[1:6])
		v, err := h(c)
		if err != nil {
			return t.fail(pc, "helper %d: %v", id, err)
		}
		r[0] = v
		if c.Exit {
			t.done = true
		}
		return nil
	}
	switch jit.HelperID(id) {
	case jit.HelperMapLookupElem, jit.HelperMapUpdateElem, jit.HelperMapDeleteElem:
		return t.mapHelper(pc, jit.HelperID(id))
	case jit.HelperTracePrintk:
		return t.tracePrintk(pc)
	case jit.HelperGetCurrentPidTgid:
		r[0] = env.PidTgid
	case jit.HelperPerfEventOutput:
		s, err := t.mapArg(pc, r[2], "perf_event_output map (r2)")
		if err != nil {
			return err
		}
		if s.def.Type != jit.MapTypeGPURingbuf {
			return t.fail(pc, "perf_event_output: map %q has type %d, want a GPU ring buffer (%d)", s.def.Name, s.def.Type, jit.MapTypeGPURingbuf)
		}
		if r[5] > math.MaxInt32 {
			return t.fail(pc, "perf_event_output: size %d is too large", r[5])
		}
		data, err := t.read(pc, r[4], int(argBytes(jit.HelperPerfEventOutput, 3, r[5])), "perf_event_output data (r4, r5)")
		if err != nil {
			return err
		}
		r[0] = uint64(s.output(data))
	case jit.HelperPuts:
		s, err := t.cstringN(r[1], int(argBytes(jit.HelperPuts, 0, 0)))
		if err != nil {
			return t.fail(pc, "puts: %v", err)
		}
		t.write(s + "\n")
		r[0] = 0
	case jit.HelperGetGlobalTimer:
		r[0] = env.timer()
	case jit.HelperKtimeGetNs:
		if env.HostClock != nil {
			r[0] = env.HostClock()
		} else {
			r[0] = env.timer()
		}
	case jit.HelperGetBlockIdx:
		return t.put3(pc, "get_block_idx", env.BlockIdx)
	case jit.HelperGetBlockDim:
		return t.put3(pc, "get_block_dim", env.BlockDim)
	case jit.HelperGetThreadIdx:
		return t.put3(pc, "get_thread_idx", env.ThreadIdx)
	case jit.HelperGetGridDim:
		return t.put3(pc, "get_grid_dim", env.GridDim)
	case jit.HelperGPUMembar:
		r[0] = 0
	case jit.HelperExit:
		r[0], t.done = 0, true
	case jit.HelperGetSMID:
		r[0] = env.SMID
	case jit.HelperGetWarpID:
		r[0] = env.WarpID
	case jit.HelperGetLaneID:
		r[0] = env.LaneID
	case jit.HelperWarpIsLeader, jit.HelperWarpSumU64, jit.HelperWarpMinU64, jit.HelperWarpMaxU64,
		jit.HelperWarpActiveCount, jit.HelperWarpActiveMask:
		t.pc, t.atCollective, t.collective = pc, true, jit.HelperID(id)
	case jit.HelperGetLaunchID:
		r[0] = env.LaunchID
	case jit.HelperBlockLinearID:
		r[0] = env.blockID()
	case jit.HelperGridBlocks:
		r[0] = dim1(env.GridDim[0]) * dim1(env.GridDim[1]) * dim1(env.GridDim[2])
	case jit.HelperBlockThreads:
		r[0] = dim1(env.BlockDim[0]) * dim1(env.BlockDim[1]) * dim1(env.BlockDim[2])
	case jit.HelperAtomicMaxU64, jit.HelperAtomicMinU64:
		// Threads of the interpreter run one at a time: a plain
		// read-modify-write is atomic. Unsigned, as red.max/min.u64.
		isMax := id == int32(jit.HelperAtomicMaxU64)
		b, err := t.mem(r[1], 8, true)
		if err != nil {
			if isMax {
				return t.fail(pc, "atomic_max_u64: pointer r1: %v", err)
			}
			return t.fail(pc, "atomic_min_u64: pointer r1: %v", err)
		}
		v := binary.LittleEndian.Uint64(b)
		if isMax {
			v = max(v, r[2])
		} else {
			v = min(v, r[2])
		}
		binary.LittleEndian.PutUint64(b, v)
		r[0] = 0
	case jit.HelperFenceGPU:
		// One thread at a time: every write is already visible.
		r[0] = 0
	default:
		return t.fail(pc, "unknown helper %d", id)
	}
	return nil
}

func (t *thread) mapHelper(pc int, id jit.HelperID) error {
	r := &t.regs
	s, err := t.mapArg(pc, r[1], "map argument (r1)")
	if err != nil {
		return err
	}
	if s.def.Type == jit.MapTypeGPURingbuf {
		return t.fail(pc, "map %q is a ring buffer: use perf_event_output", s.def.Name)
	}
	key, err := t.read(pc, r[2], int(s.def.KeySize), "key of map %q (r2)", s.def.Name)
	if err != nil {
		return err
	}
	switch id {
	case jit.HelperMapLookupElem:
		r[0] = t.maps.lookup(s, key, t.env)
	case jit.HelperMapUpdateElem:
		val, err := t.read(pc, r[3], int(s.def.ValueSize), "value for map %q (r3)", s.def.Name)
		if err != nil {
			return err
		}
		r[0] = uint64(t.maps.update(s, key, val, r[4], t.env))
	default:
		r[0] = uint64(t.maps.remove(s, key))
	}
	return nil
}

// put3 writes the three u64 of v through the pointers in r1, r2, r3.
func (t *thread) put3(pc int, name string, v [3]uint64) error {
	for i := 0; i < 3; i++ {
		b, err := t.mem(t.regs[1+i], 8, true)
		if err != nil {
			return t.fail(pc, "%s: pointer r%d: %v", name, 1+i, err)
		}
		binary.LittleEndian.PutUint64(b, v[i])
	}
	t.regs[0] = 0
	return nil
}

// finishCollective computes a warp collective over the lanes in group,
// which all wait at a call of a helper 600..605, and resumes them.
func (t *thread) finishCollective(group []*thread) {
	var sum, hi uint64
	lo := uint64(math.MaxUint64)
	var mask uint64
	leader := uint64(math.MaxUint64)
	for _, g := range group {
		v := g.regs[1]
		sum += v
		lo, hi = min(lo, v), max(hi, v)
		mask |= 1 << (g.env.LaneID & 31)
		leader = min(leader, g.env.LaneID)
	}
	for _, g := range group {
		var v uint64
		switch g.collective {
		case jit.HelperWarpIsLeader:
			if g.env.LaneID == leader {
				v = 1
			}
		case jit.HelperWarpSumU64:
			v = sum
		case jit.HelperWarpMinU64:
			v = lo
		case jit.HelperWarpMaxU64:
			v = hi
		case jit.HelperWarpActiveCount:
			v = uint64(len(group))
		case jit.HelperWarpActiveMask:
			v = mask
		}
		g.regs[0] = v
		g.pc++
		g.atCollective = false
	}
}

func (t *thread) write(s string) {
	if t.env.Out != nil {
		_, _ = io.WriteString(t.env.Out, s)
	}
}

// cstringN reads the bytes at addr up to their first NUL, at most n: a
// string of n bytes has no NUL among them (the host gets it cut there).
func (t *thread) cstringN(addr uint64, n int) (string, error) {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		b, err := t.mem(addr+uint64(i), 1, false)
		if err != nil {
			return "", err
		}
		if b[0] == 0 {
			break
		}
		sb.WriteByte(b[0])
	}
	return sb.String(), nil
}

// tracePrintk implements trace_printk(fmt, fmt_size, a1, a2, a3). A bad
// format returns -EINVAL and prints nothing, as Linux does.
func (t *thread) tracePrintk(pc int) error {
	r := &t.regs
	if r[2] == 0 {
		return t.fail(pc, "trace_printk: fmt_size (r2) is 0")
	}
	b, err := t.read(pc, r[1], int(argBytes(jit.HelperTracePrintk, 0, r[2])), "trace_printk fmt (r1, r2)")
	if err != nil {
		return err
	}
	f := string(b)
	if i := strings.IndexByte(f, 0); i >= 0 {
		f = f[:i]
	}
	out, err := t.format(f, r[3:6])
	if err != nil {
		r[0] = negErrno(errEINVAL)
		return nil
	}
	t.write(out)
	r[0] = uint64(len(out))
	return nil
}

// negErrno is -errno as a register value.
func negErrno(errno int64) uint64 { return uint64(-errno) }
