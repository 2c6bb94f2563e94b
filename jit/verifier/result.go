package verifier

import "sort"

// Result describes an accepted program, for the compiler.
type Result struct {
	// Funcs lists the functions, the entry first.
	Funcs []Func
	// BackEdges are the backward jumps: every loop passes one of them, so
	// counting them (jit.LoopBudget) bounds every run.
	BackEdges []Edge
	// MaxCallDepth is the deepest call chain reached, 1 without calls.
	MaxCallDepth int
	// Unreachable lists instructions that no run can reach.
	Unreachable []int
	// Unaligned lists memory accesses whose address is not provably a
	// multiple of the access size (given 8-byte aligned stack, context and
	// map values): the compiler must split them into byte accesses.
	Unaligned []int
	// CtxAccess lists memory accesses (and helper calls with a pointer
	// argument) that go through a pointer into the context on some path.
	// Their alignment is the context's, which the caller provides: a
	// compiler that trusts the proofs above for other accesses keeps its
	// run-time check for these.
	CtxAccess []int
	// MapValueAccess lists memory accesses (and helper calls with pointer
	// arguments) whose pointers point into a map value on every path:
	// never the stack, so a compiler needs no test for .local memory.
	MapValueAccess []int
	// BlockMapAccess lists the accesses of MapValueAccess whose pointers
	// point into a per-block array's value (shared memory) on every path:
	// a compiler can address them in the shared space.
	BlockMapAccess []int
	// GlobalMapAccess lists the other accesses of MapValueAccess: their
	// pointers point into map values in global memory (device memory, or
	// host memory the device maps) on every path.
	GlobalMapAccess []int
	// ConstKeys maps each map helper call (lookup, update, delete) whose
	// key is the same known number on every path to that number (keys of
	// at most 8 bytes, little-endian): a compiler can use the value in
	// place of loading the key from the stack.
	ConstKeys map[int]uint64
	// BlockAddrs gives, for each access of BlockMapAccess that reaches the
	// same byte of a per-block array on every path (a value found with a
	// known key, at a known offset), that map (index in Program.Maps) and
	// byte in the block's copy of the map: a compiler can address it in
	// the shared space directly.
	BlockAddrs map[int]BlockAddr
	// StackKeys maps each map helper call whose key pointer points, on
	// every path, into the calling function's own stack frame at the same
	// offset to that offset from r10: a compiler can load the key from the
	// frame directly.
	StackKeys map[int]int64
	// StackOuts maps each helper call with output pointers (get_block_idx
	// and the like) whose outputs point, on every path, into the calling
	// function's own frame at the same offsets, to those offsets from r10:
	// a compiler can keep those slots in registers and write them there.
	// The bytes of other calls' outputs count as escaped.
	StackOuts map[int][3]int64
	// StackData maps each perf_event_output call whose record is, on
	// every path, in the calling function's own frame at the same 8-byte
	// aligned offset with the same size (a multiple of 8, at most 256
	// bytes) to that range: a compiler can keep those slots in registers
	// and store them into the ring itself. The bytes of other calls'
	// records count as escaped.
	StackData map[int]StackRange
	// DeadStores lists the stores to the stack at r10+off whose bytes no
	// run reads (loads, atomics and helpers, through any pointer) before
	// they are overwritten or their function returns, counting as unread
	// the key of a map helper call in ConstKeys on an array the compiler
	// indexes itself (jit.Map.DeviceArray): the compiler folds that key,
	// so its store need not be written.
	DeadStores []int
	// escaped: per function (as Funcs), the frame bytes some run accesses
	// through a pointer other than r10 (see StackEscaped).
	escaped []stackBits
	// Decided maps each conditional jump that every run takes the same
	// way to that way (true: always taken, false: never taken), such as a
	// NULL check of a pointer the analysis knows to be a map value.
	Decided map[int]bool
	// Steps is the number of abstract instruction steps taken.
	Steps int
	// States is the number of basic-block states analysed.
	States int
}

// ProvenAligned reports whether instruction i, a memory access or a helper
// call with pointer arguments, is naturally aligned on every path without
// trusting the context's alignment: it is in neither Unaligned nor
// CtxAccess.
func (r *Result) ProvenAligned(i int) bool {
	return !r.IsUnaligned(i) && !sortedHas(r.CtxAccess, i)
}

func sortedHas(sorted []int, i int) bool {
	k := sort.SearchInts(sorted, i)
	return k < len(sorted) && sorted[k] == i
}

// MapValueOnly reports whether instruction i is in MapValueAccess.
func (r *Result) MapValueOnly(i int) bool { return sortedHas(r.MapValueAccess, i) }

// BlockMapOnly reports whether instruction i is in BlockMapAccess.
func (r *Result) BlockMapOnly(i int) bool { return sortedHas(r.BlockMapAccess, i) }

// GlobalMapOnly reports whether instruction i is in GlobalMapAccess.
func (r *Result) GlobalMapOnly(i int) bool { return sortedHas(r.GlobalMapAccess, i) }

// What an access's pointer pointed to, over all paths (bits of valAccess).
const (
	accValue      uint8 = 1 << iota // a map value in global memory
	accBlockValue                   // a per-block array's value (shared memory)
	accOther                        // the stack or the context
)

// StackEscaped reports whether some run accesses any of the bytes
// [lo, hi) (offsets from r10) of the frame of the function that starts at
// instruction start through a pointer other than r10 itself: a helper's
// argument, a copy of r10 in another register. The key of a map helper
// call counts unless the compiler reads it itself: folded (a ConstKeys
// call) or loaded from the frame (a StackKeys call at an offset that is a
// multiple of 4), on an array the compiler indexes (jit.Map.DeviceArray).
// Bytes that never escape are only ever accessed at r10+off, so a
// compiler may keep them in registers.
func (r *Result) StackEscaped(start int, lo, hi int64) bool {
	for k, f := range r.Funcs {
		if f.Start == start && k < len(r.escaped) {
			return r.escaped[k].any(lo, hi)
		}
	}
	return true
}

// DeadStore reports whether instruction i is in DeadStores.
func (r *Result) DeadStore(i int) bool { return sortedHas(r.DeadStores, i) }

// IsUnaligned reports whether instruction i is in Unaligned.
func (r *Result) IsUnaligned(i int) bool { return sortedHas(r.Unaligned, i) }

func (v *verifier) result() *Result {
	r := &Result{
		BackEdges:    v.g.back,
		MaxCallDepth: v.maxDepth,
		Steps:        v.steps,
		States:       v.states,
	}
	for k, f := range v.g.funcs {
		f.StackSize = int(-v.stackUse[k])
		r.Funcs = append(r.Funcs, f)
	}
	for i := range v.reached {
		if !v.reached[i] {
			r.Unreachable = append(r.Unreachable, i)
		}
		if v.unaligned[i] {
			r.Unaligned = append(r.Unaligned, i)
		}
		if v.ctxAccess[i] {
			r.CtxAccess = append(r.CtxAccess, i)
		}
		if a := v.valAccess[i]; a != 0 && a&accOther == 0 {
			r.MapValueAccess = append(r.MapValueAccess, i)
			switch a {
			case accBlockValue:
				r.BlockMapAccess = append(r.BlockMapAccess, i)
			case accValue:
				r.GlobalMapAccess = append(r.GlobalMapAccess, i)
			}
		}
		if e := v.edges[i]; e == edgeTaken || e == edgeFall {
			if r.Decided == nil {
				r.Decided = make(map[int]bool)
			}
			r.Decided[i] = e == edgeTaken
		}
		if f := v.keys[i]; f.state == keyConst {
			if r.ConstKeys == nil {
				r.ConstKeys = make(map[int]uint64)
			}
			r.ConstKeys[i] = f.val
		}
		if f := v.blockAt[i]; f.state == keyConst && v.valAccess[i] == accBlockValue {
			if r.BlockAddrs == nil {
				r.BlockAddrs = make(map[int]BlockAddr)
			}
			r.BlockAddrs[i] = BlockAddr{Map: int(f.val >> 32), Off: int64(uint32(f.val))}
		}
		if f := v.keyAt[i]; f.state == keyConst {
			if r.StackKeys == nil {
				r.StackKeys = make(map[int]int64)
			}
			r.StackKeys[i] = int64(f.val)
		}
	}
	for i, f := range v.outAt {
		var offs [3]int64
		known := true
		for k := range f {
			known = known && f[k].state == keyConst
			offs[k] = int64(f[k].val)
		}
		if known {
			if r.StackOuts == nil {
				r.StackOuts = make(map[int][3]int64)
			}
			r.StackOuts[i] = offs
		}
	}
	for i, f := range v.dataAt {
		if f.state == keyConst {
			if r.StackData == nil {
				r.StackData = make(map[int]StackRange)
			}
			r.StackData[i] = StackRange{Off: int64(int32(uint32(f.val >> 32))), Size: int64(uint32(f.val))}
		}
	}
	r.DeadStores = v.deadStores(r)
	r.escaped = v.escapes(r)
	return r
}

// StackRange is a range of a function's frame, as an offset from r10.
type StackRange struct {
	Off, Size int64
}

// BlockAddr is a byte of a per-block array's block copy (Result.BlockAddrs).
type BlockAddr struct {
	Map int   // index in Program.Maps
	Off int64 // byte offset in the block's copy of the map
}

// Edges of a conditional jump that some run takes (bits of edges).
const (
	edgeTaken uint8 = 1 << iota
	edgeFall
)

// keyFact is what the analysis knows of one number (a map helper call's
// key, or where its key pointer points) over the paths seen so far.
type keyFact struct {
	state uint8 // keyUnseen, keyConst or keyVaries
	val   uint64
}

const (
	keyUnseen = iota
	keyConst
	keyVaries
)

// note records that this path gives c (known is false: a path on which it
// is not a known number).
func (f *keyFact) note(c uint64, known bool) {
	switch {
	case !known:
		f.state = keyVaries
	case f.state == keyUnseen:
		f.state, f.val = keyConst, c
	case f.state == keyConst && f.val != c:
		f.state = keyVaries
	}
}
