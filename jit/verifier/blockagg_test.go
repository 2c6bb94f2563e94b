package verifier

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Per-block arrays (1601) and the helpers 607..609.

var aggMaps = []*jit.Map{
	{Name: "blk", Type: jit.MapTypePerBlockArray, KeySize: 4, ValueSize: 16, MaxEntries: 2},
	{Name: "arr", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 4},
	{Name: "ring", Type: jit.MapTypeGPURingbuf, MaxEntries: 4096},
	{Name: ".rodata", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 32, MaxEntries: 1, Flags: mapFlagRdonlyProg},
}

// minMax calls helper id with r1 = the pointer already in r1 and r2 = 5.
func minMax(id jit.HelperID) asm.Instructions {
	return ins(asm.Mov.Imm(asm.R2, 5), call(id))
}

func TestBlockAggHelpers(t *testing.T) {
	lookupBlk := cat(lookup("blk"), nullChecked)
	tests := []struct {
		name    string
		insns   asm.Instructions
		ctx     int
		wantErr string // substring of the reason; "" = accepted
		wantIdx int
	}{
		// per-block arrays are arrays: lookups give a value pointer or NULL
		{name: "per-block lookup, read and write", insns: cat(lookupBlk, ins(
			asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord), asm.Add.Imm(asm.R1, 1), asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord)), out)},
		{name: "per-block value bounds", insns: cat(lookupBlk, ins(asm.LoadMem(asm.R1, asm.R0, 12, asm.DWord)), out),
			wantErr: "map value access at offset 12 size 8 exceeds value size 16", wantIdx: 6},
		// A per-block array is always there: a known key in range finds
		// its value (no NULL check needed); any other key may not.
		{name: "per-block lookup, key in range, not null-checked", insns: cat(lookup("blk"), ins(asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord)), out)},
		{name: "per-block lookup, key out of range, not null-checked", insns: cat(lookupKey("blk", 2), ins(asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord)), out),
			wantErr: "r0 may be NULL here", wantIdx: 5},
		{name: "per-block lookup, unknown key, not null-checked", insns: cat(ins(call(jit.HelperKtimeGetNs),
			asm.StoreMem(asm.R10, -4, asm.R0, asm.Word)), lookup("blk")[1:], ins(asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord)), out),
			wantErr: "r0 may be NULL here", wantIdx: 6},
		{name: "per-block update and delete", insns: cat(ins(asm.StoreImm(asm.R10, -4, 1, asm.Word), stdw(asm.R10, -24, 0), stdw(asm.R10, -16, 0),
			asm.LoadMapPtr(asm.R1, 0).WithReference("blk")), stackPtr(asm.R2, -4), stackPtr(asm.R3, -24), ins(asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(), asm.LoadMapPtr(asm.R1, 0).WithReference("blk")), stackPtr(asm.R2, -4), ins(
			asm.FnMapDeleteElem.Call(), asm.Return()))},
		{name: "per-block map is not a ring buffer", insns: cat(record, ins(
			asm.LoadMapPtr(asm.R2, 0).WithReference("blk"), asm.Mov.Imm(asm.R3, 0), asm.FnPerfEventOutput.Call(), asm.Return())),
			wantErr: `perf_event_output: map "blk" has type 1601; it needs a GPU ring buffer (type 1527)`, wantIdx: 7},

		// atomic min/max: a map value or the stack, 8 aligned bytes
		{name: "max on a per-block value", insns: cat(lookupBlk, ins(asm.Mov.Reg(asm.R1, asm.R0)), minMax(jit.HelperAtomicMaxU64), ins(asm.Return()))},
		{name: "min on a GPU array value at +8", insns: cat(lookup("arr"), nullChecked, ins(asm.Mov.Reg(asm.R1, asm.R0), asm.Add.Imm(asm.R1, 8)),
			minMax(jit.HelperAtomicMinU64), ins(asm.Return()))},
		{name: "max on the stack", insns: cat(ins(stdw(asm.R10, -8, 3)), stackPtr(asm.R1, -8), minMax(jit.HelperAtomicMaxU64),
			ins(asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()))},
		{name: "min on unwritten stack", insns: cat(stackPtr(asm.R1, -8), minMax(jit.HelperAtomicMinU64), ins(asm.Return())),
			wantErr: "atomic_min_u64: pointer argument r1: stack byte at r10-8 is read before it is written", wantIdx: 3},
		{name: "max on an unchecked lookup", insns: cat(lookup("arr"), ins(asm.Mov.Reg(asm.R1, asm.R0)), minMax(jit.HelperAtomicMaxU64), ins(asm.Return())),
			wantErr: "atomic_max_u64: pointer argument r1 may be NULL: null-check the result of map_lookup_elem (insn 4) first", wantIdx: 7},
		{name: "max past the value", insns: cat(lookupBlk, ins(asm.Mov.Reg(asm.R1, asm.R0), asm.Add.Imm(asm.R1, 16)), minMax(jit.HelperAtomicMaxU64), out),
			wantErr: "atomic_max_u64: pointer argument r1: map value access at offset 16 size 8 exceeds value size 16", wantIdx: 9},
		{name: "min misaligned", insns: cat(lookupBlk, ins(asm.Mov.Reg(asm.R1, asm.R0), asm.Add.Imm(asm.R1, 4)), minMax(jit.HelperAtomicMinU64), out),
			wantErr: "atomic_min_u64: pointer argument r1: atomic access at offset 4 size 8 is not naturally aligned", wantIdx: 9},
		{name: "max on a read-only map", insns: cat(ins(asm.LoadMapValue(asm.R1, 0, 0).WithReference(".rodata")), minMax(jit.HelperAtomicMaxU64), ins(asm.Return())),
			wantErr: `atomic_max_u64: pointer argument r1: map ".rodata" is read-only for programs`, wantIdx: 2},
		{name: "max on the context", ctx: 16, insns: cat(minMax(jit.HelperAtomicMaxU64), ins(asm.Return())),
			wantErr: "atomic_max_u64: argument r1 must point to a map value or the stack, got context pointer", wantIdx: 1},
		{name: "min on a number", insns: ins(asm.Mov.Imm(asm.R1, 64), asm.Mov.Imm(asm.R2, 5), call(jit.HelperAtomicMinU64), asm.Return()),
			wantErr: "atomic_min_u64: argument r1 must point to a map value or the stack, got scalar 64", wantIdx: 2},
		{name: "max on a map handle", insns: ins(asm.LoadMapPtr(asm.R1, 0).WithReference("blk"), asm.Mov.Imm(asm.R2, 5), call(jit.HelperAtomicMaxU64), asm.Return()),
			wantErr: "atomic_max_u64: argument r1 must point to a map value or the stack, got map handle", wantIdx: 2},
		{name: "max of a pointer", insns: cat(ins(stdw(asm.R10, -8, 3)), stackPtr(asm.R1, -8), ins(asm.Mov.Reg(asm.R2, asm.R10),
			call(jit.HelperAtomicMaxU64), asm.Return())),
			wantErr: "atomic_max_u64: argument r2 must be a number, got a stack pointer", wantIdx: 4},
		{name: "min without a value", insns: cat(ins(stdw(asm.R10, -8, 3), call(jit.HelperFenceGPU)), stackPtr(asm.R1, -8),
			ins(call(jit.HelperAtomicMinU64), asm.Return())),
			wantErr: "atomic_min_u64: argument r2 is read before it is written", wantIdx: 4},
		{name: "result is a number, r1 clobbered", insns: cat(ins(stdw(asm.R10, -8, 3)), stackPtr(asm.R1, -8), minMax(jit.HelperAtomicMaxU64),
			ins(asm.Mov.Reg(asm.R0, asm.R1), asm.Return())),
			wantErr: "r1 is read before it is written", wantIdx: 5},

		// fence
		{name: "fence", insns: ins(call(jit.HelperFenceGPU), asm.Add.Imm(asm.R0, 1), asm.Return())},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &jit.Program{Name: "t", Insns: link(tc.insns), Maps: aggMaps}
			_, err := Verify(p, Options{CtxSize: tc.ctx})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("rejected: %v\n%v", err, p.Insns)
				}
				return
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("accepted (err %v), want %q\n%v", err, tc.wantErr, p.Insns)
			}
			if !strings.Contains(ve.Reason, tc.wantErr) || ve.Index != tc.wantIdx {
				t.Fatalf("rejected at insn %d: %q; want insn %d: %q", ve.Index, ve.Reason, tc.wantIdx, tc.wantErr)
			}
		})
	}
}

func TestBlockAggSignatures(t *testing.T) {
	tests := []struct {
		id   jit.HelperID
		name string
		args [5]ArgType
	}{
		{jit.HelperAtomicMaxU64, "atomic_max_u64", [5]ArgType{ArgAtomic8, ArgScalar}},
		{jit.HelperAtomicMinU64, "atomic_min_u64", [5]ArgType{ArgAtomic8, ArgScalar}},
		{jit.HelperFenceGPU, "fence_gpu", [5]ArgType{}},
	}
	for _, tt := range tests {
		s, ok := HelperSignature(tt.id)
		if !ok || s.Name != tt.name || s.Args != tt.args || s.Ret != RetScalar {
			t.Errorf("HelperSignature(%d) = %+v, %v; want %s %v returning a number", tt.id, s, ok, tt.name, tt.args)
		}
	}
}

// TestDecided: a NULL check of a per-block lookup with a key in range,
// and a compare of known numbers, take one way on every run (the compiler
// drops them); a NULL check of a lookup that may fail does not.
func TestDecided(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
		want  map[int]bool // conditional jump index -> always taken
	}{
		{"per-block, key in range", cat(lookup("blk"), nullChecked, out), map[int]bool{5: false}},
		{"per-block, key out of range", cat(lookupKey("blk", 2), nullChecked, out), nil},
		{"GPU array", cat(lookup("arr"), nullChecked, out), nil},
		{"known numbers", ins(asm.Mov.Imm(asm.R1, 3), asm.JGT.Imm(asm.R1, 2, "out"), asm.Mov.Imm(asm.R0, 1),
			asm.Return(), asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return()), map[int]bool{1: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := verifyOK(t, aggMaps, tt.insns); !maps.Equal(res.Decided, tt.want) {
				t.Fatalf("Decided = %v, want %v", res.Decided, tt.want)
			}
		})
	}
}

// TestBlockAddrs: an access to a per-block value found with a known key,
// or through a direct value address, gets its byte in the block's copy of
// the map; an unknown key or a pointer that differs between paths does
// not.
func TestBlockAddrs(t *testing.T) {
	load8 := ins(asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord))
	tests := []struct {
		name  string
		insns asm.Instructions
		at    int // the access
		want  *BlockAddr
	}{
		// blk: 16-byte values, so key 1 starts at byte 16.
		{"key 1, +8", cat(lookupKey("blk", 1), load8, out), 5, &BlockAddr{Map: 0, Off: 24}},
		{"direct value address, +8", ins(asm.LoadMapValue(asm.R0, 0, 4).WithReference("blk"),
			asm.LoadMem(asm.R1, asm.R0, 4, asm.DWord), asm.Mov.Imm(asm.R0, 0), asm.Return()), 1, &BlockAddr{Map: 0, Off: 8}},
		{"unknown key", cat(ins(call(jit.HelperKtimeGetNs), asm.RSh.Imm(asm.R0, 63), asm.StoreMem(asm.R10, -4, asm.R0, asm.Word)),
			lookupKey("blk", 0)[1:], nullChecked, load8, out), 8, nil},
		{"key 0 or 1 by path", cat(ins(call(jit.HelperKtimeGetNs), asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.JEq.Imm(asm.R0, 0, "k"), asm.StoreImm(asm.R10, -4, 1, asm.Word), asm.Mov.Imm(asm.R0, 0).WithSymbol("k")),
			lookupKey("blk", 0)[1:], nullChecked, load8, out), 11, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := verifyOK(t, aggMaps, tt.insns)
			got, ok := res.BlockAddrs[tt.at]
			if tt.want == nil {
				if ok {
					t.Fatalf("BlockAddrs[%d] = %+v, want none (all: %v)", tt.at, got, res.BlockAddrs)
				}
				return
			}
			if !ok || got != *tt.want {
				t.Fatalf("BlockAddrs[%d] = %+v, %v; want %+v (all: %v)", tt.at, got, ok, *tt.want, res.BlockAddrs)
			}
		})
	}
}

// TestBlockAddrsPerCall: a function that looks up the key it is given,
// called with key 0 and then key 1, reaches two different values: its
// accesses have no single byte.
func TestBlockAddrsPerCall(t *testing.T) {
	insns := cat(
		ins(asm.Mov.Imm(asm.R1, 0), asm.Call.Label("f"), asm.Mov.Imm(asm.R1, 1), asm.Call.Label("f"), asm.Return()),
		ins(asm.StoreMem(asm.R10, -4, asm.R1, asm.Word).WithSymbol("f")), lookupKey("blk", 0)[1:],
		ins(asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord), asm.Return()))
	res := verifyOK(t, aggMaps, insns)
	if a, ok := res.BlockAddrs[10]; ok {
		t.Fatalf("BlockAddrs[10] = %+v: keys 0 and 1 reach different bytes (all: %v)", a, res.BlockAddrs)
	}
}
