package verifier

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Options configure a verification.
type Options struct {
	// CtxSize is the number of bytes r1 points to at entry (the context);
	// 0 means r1 is a plain number. r2 holds CtxSize at entry.
	CtxSize int
	// CtxReadOnly forbids writes through the context pointer.
	CtxReadOnly bool
	// Helpers adds helpers to (or replaces helpers of) the GPU ABI, e.g.
	// ConformanceHelpers.
	Helpers map[jit.HelperID]Signature
	// MaxSteps bounds the abstract instructions executed before the program
	// is rejected as too complex; 0 means DefaultMaxSteps.
	MaxSteps int
}

// DefaultMaxSteps is the default bound on abstract instruction steps.
const DefaultMaxSteps = 1_000_000

// MaxCallDepth is the deepest chain of bpf-to-bpf calls accepted, counting
// the entry function.
const MaxCallDepth = 8

// maxContexts bounds distinct call chains (each call site analysed apart).
const maxContexts = 4096

// widenAfter is how many changing visits a loop head gets before its ranges
// are widened.
const widenAfter = 3

// Func is one function (the entry or a bpf-to-bpf callee) of a program.
type Func struct {
	Start     int    // index of its first instruction
	End       int    // index one past its last instruction
	Name      string // symbol name, if the instructions carry one
	StackSize int    // bytes of its stack frame that it uses (from r10 down)
}

// Edge is a jump from instruction From back to instruction To (To <= From).
type Edge struct {
	From, To int
}

// Verify checks that p is safe to run inside a CUDA kernel. A rejection is
// returned as an *Error naming the instruction and the reason.
func Verify(p *jit.Program, opts Options) (*Result, error) {
	v, err := verify(p, opts)
	if err != nil {
		return nil, err
	}
	return v.result(), nil
}

// verify runs the analysis and returns the verifier with its findings.
func verify(p *jit.Program, opts Options) (*verifier, error) {
	if p == nil {
		return nil, &Error{Index: -1, Reason: "nil program"}
	}
	if opts.CtxSize < 0 {
		return nil, &Error{Index: -1, Reason: fmt.Sprintf("negative context size %d", opts.CtxSize)}
	}
	for k, m := range p.Maps {
		if m == nil {
			return nil, &Error{Index: -1, Reason: fmt.Sprintf("map %d is nil", k)}
		}
	}
	g, err := buildCFG(p.Insns)
	if err != nil {
		return nil, err
	}
	v := &verifier{
		p:          p,
		g:          g,
		opts:       opts,
		reached:    make([]bool, len(p.Insns)),
		unaligned:  make([]bool, len(p.Insns)),
		ctxAccess:  make([]bool, len(p.Insns)),
		valAccess:  make([]uint8, len(p.Insns)),
		keys:       make([]keyFact, len(p.Insns)),
		keyAt:      make([]keyFact, len(p.Insns)),
		keyMap:     make([]keyFact, len(p.Insns)),
		blockAt:    make([]keyFact, len(p.Insns)),
		keyBytes:   make(map[int][]stackRange),
		outAt:      make(map[int]*[3]keyFact),
		dataAt:     make(map[int]*keyFact),
		dataBytes:  make(map[int][]stackRange),
		outBytes:   make(map[int][]stackRange),
		stackReads: make(map[int][]stackRange),
		escaped:    make([]stackBits, len(g.funcs)),
		edges:      make([]uint8, len(p.Insns)),
		stackUse:   make([]int64, len(g.funcs)),
		ids:        make(map[key]int32),
		maxSteps:   opts.MaxSteps,
		merged:     -1,
	}
	if v.maxSteps <= 0 {
		v.maxSteps = DefaultMaxSteps
	}
	if err := v.run(); err != nil {
		return nil, err
	}
	return v, nil
}

// callCtx is one call chain: the entry, or a call from a parent chain.
type callCtx struct {
	parent   int32
	callsite int // call instruction (-1 for the entry)
	fn       int
	depth    int // frames, 1 for the entry
}

type key struct {
	ctx  int32
	insn int32
	path int32 // which of the block's states (see pathFor); 0 for the first
}

type block struct {
	st     *state
	visits int
	queued bool
}

type verifier struct {
	p          *jit.Program
	g          *cfg
	opts       Options
	ctxs       []callCtx
	ctxIndex   map[[2]int]int32
	blocks     [][]block       // per call chain, per instruction: the first state
	paths      map[key][]block // states kept apart from the first (see pathFor), by key with path 0
	pool       []*state        // states free for reuse
	queue      keyHeap
	reached    []bool
	unaligned  []bool
	ctxAccess  []bool
	valAccess  []uint8              // per access: what its pointers pointed to (accValue, ...), over all paths
	keys       []keyFact            // map helper calls: the key, when known
	keyAt      []keyFact            // map helper calls: the key's offset in the caller's own frame
	keyMap     []keyFact            // map helper calls: the map (index in Program.Maps)
	blockAt    []keyFact            // per-block value accesses: map<<32 | byte in the block's copy
	keyBytes   map[int][]stackRange // map helper calls: stack bytes the key was read from
	stackReads map[int][]stackRange // other frame bytes each instruction reads
	escaped    []stackBits          // per function: frame bytes accessed through a pointer other than r10
	keyRead    bool                 // the access being checked is a map helper's key read
	outAt      map[int]*[3]keyFact  // helpers with output pointers: each output's offset in the caller's own frame
	outBytes   map[int][]stackRange // helpers with output pointers: stack bytes they wrote
	outWrite   bool                 // the access being checked is a helper's output
	dataAt     map[int]*keyFact     // perf_event_output calls: offset<<32 | size of a record in the caller's own frame
	dataBytes  map[int][]stackRange // perf_event_output calls: stack bytes the record was read from
	dataRead   bool                 // the access being checked is perf_event_output's record
	edges      []uint8              // conditional jumps: edgeTaken, edgeFall as some run takes them
	stackUse   []int64              // lowest stack offset used, per function
	ids        map[key]int32
	steps      int
	states     int
	maxSteps   int
	merged     int // first block where more than maxPaths paths met (-1: none)
	maxDepth   int
	curCtx     int32
	exitR0     value // r0 over every exit of the entry function (for tests)
	exitSeen   bool
}

func (v *verifier) errorf(i int, format string, args ...any) error {
	return v.g.errorf(i, format, args...)
}

func (v *verifier) run() error {
	v.ctxs = []callCtx{{parent: -1, callsite: -1, fn: 0, depth: 1}}
	v.ctxIndex = map[[2]int]int32{}
	v.maxDepth = 1
	st := &state{frames: []frame{newFrame(0, -1)}}
	fr := st.cur()
	fr.regs[asm.R10] = ptr(kStack, 0)
	if v.opts.CtxSize > 0 {
		fr.regs[asm.R1] = ptr(kCtx, 0)
		fr.regs[asm.R2] = constant(uint64(v.opts.CtxSize))
	} else {
		fr.regs[asm.R1] = unknown()
		fr.regs[asm.R2] = unknown()
	}
	v.flow(0, 0, st)
	for len(v.queue) > 0 {
		k := v.queue.pop()
		b := v.block(k)
		b.queued = false
		v.states++
		if err := v.execBlock(k, b.st.clone(&v.pool)); err != nil {
			return err
		}
	}
	return nil
}

// block returns the stored state slot of k (nil state if none yet).
func (v *verifier) block(k key) *block {
	if k.path > 0 {
		return &v.paths[key{ctx: k.ctx, insn: k.insn}][k.path-1]
	}
	for int(k.ctx) >= len(v.blocks) {
		v.blocks = append(v.blocks, nil)
	}
	if v.blocks[k.ctx] == nil {
		v.blocks[k.ctx] = make([]block, len(v.p.Insns))
	}
	return &v.blocks[k.ctx][k.insn]
}

// flow hands state st (owned by the callee from now on) to instruction i.
func (v *verifier) flow(ctx int32, i int, st *state) {
	k := key{ctx: ctx, insn: int32(i)}
	b := v.block(k)
	if b.st == nil {
		b.st, b.queued = st, true
		v.queue.push(k)
		return
	}
	if k = v.pathFor(k, st); k.path > 0 {
		if b = v.block(k); b.st == nil {
			b.st, b.queued = st, true
			v.queue.push(k)
			return
		}
	}
	b.visits++
	changed := b.st.joinFrom(st, v.g.loop[i] && b.visits > widenAfter)
	v.pool = append(v.pool, st)
	if changed && !b.queued {
		b.queued = true
		v.queue.push(k)
	}
}

// execBlock runs the basic block at k from state st.
func (v *verifier) execBlock(k key, st *state) error {
	v.curCtx = k.ctx
	insns := v.p.Insns
	start := int(k.insn)
	for i := start; i < len(insns); i++ {
		if i != start && v.g.start[i] {
			v.flow(k.ctx, i, st)
			return nil
		}
		v.reached[i] = true
		v.steps++
		if v.steps > v.maxSteps {
			return v.errorf(i, "program is too complex to verify: more than %d instruction steps", v.maxSteps)
		}
		ins := &insns[i]
		var err error
		switch ins.OpCode.Class() {
		case asm.ALUClass, asm.ALU64Class:
			err = v.alu(st, i, ins)
		case asm.LdClass:
			err = v.ldImm(st, i, ins)
		case asm.LdXClass:
			err = v.load(st, i, ins)
		case asm.StClass, asm.StXClass:
			err = v.store(st, i, ins)
		case asm.JumpClass, asm.Jump32Class:
			switch {
			case ins.OpCode.JumpOp() == asm.Exit:
				return v.exit(k.ctx, i, st)
			case isLocalCall(ins):
				return v.callLocal(k.ctx, i, st)
			case ins.OpCode.JumpOp() == asm.Call:
				err = v.callHelper(st, i, ins)
			case isUncondJump(ins):
				v.flow(k.ctx, v.g.target[i], st)
				return nil
			default:
				return v.branch(k.ctx, i, st)
			}
		}
		if err != nil {
			return err
		}
	}
	return v.errorf(len(insns)-1, "execution falls off the end of the program")
}

// exit returns from the current function (or ends the program).
func (v *verifier) exit(ctx int32, i int, st *state) error {
	fr := st.cur()
	r0 := fr.regs[asm.R0]
	if r0.kind == kUninit {
		return v.errorf(i, "r0 is read before it is written: set the return value before exit")
	}
	if ctx == 0 {
		if v.exitSeen {
			v.exitR0 = join(v.exitR0, r0)
		} else {
			v.exitR0, v.exitSeen = r0, true
		}
		return nil
	}
	depth := len(st.frames)
	if r0.kind == kStack && int(r0.frame) == depth-1 {
		return v.errorf(i, "the function returns a pointer to its own stack frame, which ends with it")
	}
	c := v.ctxs[ctx]
	st.frames = st.frames[:depth-1]
	st.dropFrame(depth - 1)
	caller := st.cur()
	caller.regs[asm.R0] = r0
	for r := asm.R1; r <= asm.R5; r++ {
		caller.regs[r] = uninitValue
	}
	v.flow(c.parent, c.callsite+1, st)
	return nil
}

// callLocal enters a bpf-to-bpf function with a fresh stack frame.
func (v *verifier) callLocal(ctx int32, i int, st *state) error {
	t := v.g.target[i]
	fn := v.g.fn[t]
	for c := ctx; c >= 0; c = v.ctxs[c].parent {
		if v.ctxs[c].fn == fn {
			return v.errorf(i, "recursive call to the function at insn %d", t)
		}
	}
	depth := v.ctxs[ctx].depth + 1
	if depth > MaxCallDepth {
		return v.errorf(i, "call depth exceeds %d frames", MaxCallDepth)
	}
	ck := [2]int{int(ctx), i}
	nc, ok := v.ctxIndex[ck]
	if !ok {
		if len(v.ctxs) >= maxContexts {
			return v.errorf(i, "program is too complex to verify: more than %d distinct call chains", maxContexts)
		}
		nc = int32(len(v.ctxs))
		v.ctxs = append(v.ctxs, callCtx{parent: ctx, callsite: i, fn: fn, depth: depth})
		v.ctxIndex[ck] = nc
	}
	v.maxDepth = max(v.maxDepth, depth)
	caller := st.cur()
	callee := newFrame(fn, i)
	for r := asm.R1; r <= asm.R5; r++ {
		callee.regs[r] = caller.regs[r]
	}
	callee.regs[asm.R10] = ptr(kStack, 0)
	callee.regs[asm.R10].frame = uint8(depth - 1)
	st.frames = append(st.frames, callee)
	v.flow(nc, t, st)
	return nil
}

// lookupID names the result of the lookup at instruction i in the current
// call chain, so that a null check on one copy settles all copies.
func (v *verifier) lookupID(i int, _ *state) int32 {
	k := key{ctx: v.curCtx, insn: int32(i)}
	id, ok := v.ids[k]
	if !ok {
		id = int32(len(v.ids) + 1)
		v.ids[k] = id
	}
	return id
}

// keyHeap orders pending blocks by instruction, then call chain (a binary
// min-heap).
type keyHeap []key

func (k key) less(o key) bool {
	if k.insn != o.insn {
		return k.insn < o.insn
	}
	if k.ctx != o.ctx {
		return k.ctx < o.ctx
	}
	return k.path < o.path
}

func (h *keyHeap) push(k key) {
	*h = append(*h, k)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *keyHeap) pop() key {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].less(q[m]) {
			m = l
		}
		if r < len(q) && q[r].less(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
