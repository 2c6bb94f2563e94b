package interp

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// MaxFrames is the deepest bpf-to-bpf call nesting (the entry frame
// included), as in Linux.
const MaxFrames = 8

// op is a pre-decoded instruction.
type op struct {
	code   uint8 // raw opcode byte
	dst    uint8
	src    uint8
	ext    int16 // ALU: 1 = sdiv/smod, 8/16/32 = movsx; atomics: op bits
	imm    int64 // sign-extended imm, the full imm64 of lddw, helper id
	target int32 // jumps and local calls: target instruction index
	mapIdx int32 // lddw of a map: index into Program.Maps; -1 otherwise
	pseudo uint8 // lddw src (asm.PseudoMapFD, asm.PseudoMapValue) or 0
}

// Machine is a program decoded for repeated runs.
type Machine struct {
	prog *jit.Program
	ops  []op
	pool sync.Pool // *thread, reused between runs
}

// Prepare decodes p once: it resolves jump targets and map references and
// rejects instructions the interpreter does not know, naming the index.
// Running a Machine many times avoids decoding again.
func Prepare(p *jit.Program) (*Machine, error) {
	if p == nil || len(p.Insns) == 0 {
		return nil, fmt.Errorf("program has no instructions")
	}
	n := len(p.Insns)
	slotIndex := map[int]int{} // raw slot -> instruction index
	slots := make([]int, n)
	symbols := map[string]int{}
	slot := 0
	for i := range p.Insns {
		slots[i] = slot
		slotIndex[slot] = i
		slot += int(p.Insns[i].Width())
		if s := p.Insns[i].Symbol(); s != "" {
			symbols[s] = i
		}
	}
	m := &Machine{prog: p, ops: make([]op, n)}
	for i := range p.Insns {
		ins := &p.Insns[i]
		o, err := decodeOp(p, ins)
		if err == nil && isBranch(o, ins) {
			err = resolveTarget(&o, ins, slots[i], slotIndex, symbols)
		}
		if err != nil {
			return nil, insnError(p, i, err.Error())
		}
		m.ops[i] = o
	}
	return m, nil
}

func insnError(p *jit.Program, i int, reason string) *Error {
	e := &Error{Index: i, Reason: reason}
	if i >= 0 && i < len(p.Insns) {
		if src := p.Insns[i].Source(); src != nil {
			e.Source = src.String()
		}
	}
	return e
}

func isBranch(o op, ins *asm.Instruction) bool {
	cls := o.code & 7
	if cls != 0x05 && cls != 0x06 {
		return false
	}
	switch o.code & 0xf0 {
	case 0x90: // exit
		return false
	case 0x80: // call: only local calls have a target
		return ins.IsFunctionCall()
	}
	return true
}

func resolveTarget(o *op, ins *asm.Instruction, slot int, slotIndex map[int]int, symbols map[string]int) error {
	var rel int64
	switch {
	case ins.IsFunctionCall():
		if ins.Constant == -1 && ins.Reference() != "" {
			t, ok := symbols[ins.Reference()]
			if !ok {
				return fmt.Errorf("call to unknown function %q", ins.Reference())
			}
			o.target = int32(t)
			return nil
		}
		rel = ins.Constant
	case o.code == 0x06: // ja32 (gotol): target in imm
		rel = ins.Constant
	default:
		rel = int64(ins.Offset)
	}
	t, ok := slotIndex[slot+1+int(rel)]
	if !ok {
		return fmt.Errorf("jump target %+d (slot %d) is outside the program or inside an lddw", rel, slot+1+int(rel))
	}
	o.target = int32(t)
	return nil
}

func decodeOp(p *jit.Program, ins *asm.Instruction) (op, error) {
	if ins.OpCode == asm.InvalidOpCode {
		return op{}, fmt.Errorf("invalid opcode")
	}
	o := op{
		code:   uint8(ins.OpCode),
		dst:    uint8(ins.Dst),
		src:    uint8(ins.Src),
		ext:    ins.Offset,
		imm:    ins.Constant,
		mapIdx: -1,
	}
	if o.dst > 10 || (o.src > 10 && o.code != 0x18) {
		return o, fmt.Errorf("register out of range (dst r%d, src r%d)", o.dst, o.src)
	}
	cls := ins.OpCode.Class()
	if o.dst == 10 && (cls.IsALU() || cls == asm.LdXClass || cls == asm.LdClass) {
		return o, fmt.Errorf("r10 (the frame pointer) is read-only")
	}
	switch {
	case cls.IsALU():
		o.ext = 0
		switch ins.OpCode.ALUOp() {
		case asm.SDiv, asm.SMod:
			o.ext = 1
		case asm.MovSX8:
			o.ext = 8
		case asm.MovSX16:
			o.ext = 16
		case asm.MovSX32:
			o.ext = 32
		}
	case cls == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode:
		o.imm = int64(uint32(ins.OpCode.AtomicOp()) >> 8)
		switch o.imm {
		case 0x00, 0x40, 0x50, 0xa0, 0xf1:
		case 0x01, 0x41, 0x51, 0xa1, 0xe1:
			if o.src == 10 {
				return o, fmt.Errorf("r10 (the frame pointer) is read-only; a fetching atomic cannot write it")
			}
		default:
			return o, fmt.Errorf("unsupported atomic operation %v", ins.OpCode.AtomicOp())
		}
	case ins.OpCode.IsDWordLoad():
		switch ins.Src {
		case 0:
		case asm.PseudoMapFD, asm.PseudoMapValue:
			idx, err := mapIndex(p, ins)
			if err != nil {
				return o, err
			}
			o.mapIdx, o.pseudo = int32(idx), uint8(ins.Src)
			if ins.Src == asm.PseudoMapValue {
				o.imm = int64(uint64(ins.Constant) >> 32) // offset into the value
			}
		default:
			return o, fmt.Errorf("lddw with src %d is not supported", ins.Src)
		}
	}
	return o, nil
}

// mapIndex finds the map an lddw refers to: by Reference() name, else by
// the index in the low 32 bits of Constant.
func mapIndex(p *jit.Program, ins *asm.Instruction) (int, error) {
	if ref := ins.Reference(); ref != "" {
		for i, m := range p.Maps {
			if m.Name == ref {
				return i, nil
			}
		}
		return 0, fmt.Errorf("map %q is not in Program.Maps", ref)
	}
	idx := int(uint32(ins.Constant))
	if idx < 0 || idx >= len(p.Maps) {
		return 0, fmt.Errorf("map index %d is outside Program.Maps (%d maps)", idx, len(p.Maps))
	}
	return idx, nil
}

// Run runs p as one GPU thread: r1 points to ctx, r2 holds len(ctx), and
// the warp helpers see a warp of one lane. It returns r0.
func Run(p *jit.Program, ctx []byte, env *Env) (uint64, error) {
	m, err := Prepare(p)
	if err != nil {
		return 0, err
	}
	return m.Run(ctx, env)
}

// Run runs the prepared program as one GPU thread (see the package Run).
func (m *Machine) Run(ctx []byte, env *Env) (uint64, error) {
	if env == nil {
		env = &Env{}
	}
	t, err := m.newThread(ctx, env)
	if err != nil {
		return 0, err
	}
	defer m.release(t)
	for {
		if err := t.exec(); err != nil {
			return 0, err
		}
		if t.done {
			return t.regs[0], nil
		}
		// A warp collective with one lane present.
		t.finishCollective([]*thread{t})
	}
}

// RunWarp runs p on up to 32 lanes of one warp and returns each lane's r0.
// Lanes run in turn until each has exited or reached a warp collective
// (helpers 600..605); the collective is then computed over the lanes that
// reached the same call instruction at the same call depth, and they go on.
// All lanes share lanes[0].Env.Maps (created if nil).
func RunWarp(p *jit.Program, lanes []Lane) ([]uint64, error) {
	m, err := Prepare(p)
	if err != nil {
		return nil, err
	}
	return m.RunWarp(lanes)
}

// RunWarp runs the prepared program on a warp (see the package RunWarp).
func (m *Machine) RunWarp(lanes []Lane) ([]uint64, error) {
	if len(lanes) == 0 || len(lanes) > 32 {
		return nil, fmt.Errorf("a warp has 1..32 lanes, got %d", len(lanes))
	}
	for i, l := range lanes {
		if l.Env == nil {
			return nil, fmt.Errorf("lane %d has no Env", i)
		}
	}
	maps := lanes[0].Env.Maps
	if maps == nil {
		maps = NewMaps()
	}
	threads := make([]*thread, len(lanes))
	for i, l := range lanes {
		if l.Env.Maps != nil && l.Env.Maps != maps {
			return nil, fmt.Errorf("lane %d uses a different Maps than lane 0", i)
		}
		e := *l.Env
		e.Maps = maps
		t, err := m.newThread(l.Ctx, &e)
		if err != nil {
			return nil, fmt.Errorf("lane %d: %w", i, err)
		}
		threads[i] = t
	}
	for {
		waiting := 0
		for i, t := range threads {
			if t.done {
				continue
			}
			if !t.atCollective {
				if err := t.exec(); err != nil {
					return nil, fmt.Errorf("lane %d: %w", i, err)
				}
			}
			if !t.done {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		// Group the waiting lanes by (instruction, depth), in lane order.
		type at struct{ pc, depth int }
		groups := map[at][]*thread{}
		var order []at
		for _, t := range threads {
			if t.done {
				continue
			}
			k := at{t.pc, len(t.frames)}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], t)
		}
		for _, k := range order {
			threads[0].finishCollective(groups[k])
		}
	}
	out := make([]uint64, len(threads))
	for i, t := range threads {
		out[i] = t.regs[0]
		m.release(t)
	}
	return out, nil
}

// release returns a finished thread's buffers for reuse.
func (m *Machine) release(t *thread) {
	t.env, t.maps, t.ctx = nil, nil, nil
	m.pool.Put(t)
}
