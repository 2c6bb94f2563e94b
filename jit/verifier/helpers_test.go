package verifier

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// call emits a call of helper id.
func call(id jit.HelperID) asm.Instruction { return asm.BuiltinFunc(id).Call() }

// stackPtr sets r to r10+off.
func stackPtr(r asm.Register, off int32) asm.Instructions {
	return ins(asm.Mov.Reg(r, asm.R10), asm.Add.Imm(r, off))
}

// record writes 16 bytes at r10-16 and points r4 at them with r5 = 16.
var record = cat(ins(stdw(asm.R10, -16, 1), stdw(asm.R10, -8, 2)), stackPtr(asm.R4, -16), ins(asm.Mov.Imm(asm.R5, 16)))

func TestHelpers(t *testing.T) {
	runCases(t, []verifyCase{
		// map_lookup_elem / update / delete
		{name: "lookup key not a pointer", insns: ins(
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), asm.Mov.Imm(asm.R2, 0),
			asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "map_lookup_elem: key argument r2 must point to memory (stack, map value or context), got scalar 0", wantIdx: 2},
		{name: "lookup map not a map", insns: cat(ins(asm.Mov.Imm(asm.R1, 0), asm.StoreImm(asm.R10, -4, 0, asm.Word)),
			stackPtr(asm.R2, -4), ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return())),
			wantErr: "map_lookup_elem: argument r1 must be a map", wantIdx: 4},
		{name: "lookup key not written", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("arr")),
			stackPtr(asm.R2, -4), ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return())),
			wantErr: "map_lookup_elem: key argument r2: stack byte at r10-4 is read before it is written", wantIdx: 3},
		{name: "lookup key shorter than the key size", insns: cat(ins(
			asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), asm.StoreImm(asm.R10, -4, 0, asm.Word)),
			stackPtr(asm.R2, -4), ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return())),
			wantErr: "key argument r2: stack access at offset -4 size 8 is outside", wantIdx: 4},
		{name: "update", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), stdw(asm.R10, -8, 0), stdw(asm.R10, -16, 5)),
			stackPtr(asm.R2, -8), stackPtr(asm.R3, -16), ins(asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call(), asm.Return()))},
		{name: "update value not written", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), stdw(asm.R10, -8, 0)),
			stackPtr(asm.R2, -8), stackPtr(asm.R3, -16), ins(asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call(), asm.Return())),
			wantErr: "map_update_elem: value argument r3: stack byte at r10-16 is read before it is written", wantIdx: 7},
		{name: "update flags not set", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), stdw(asm.R10, -8, 0), stdw(asm.R10, -16, 5)),
			stackPtr(asm.R2, -8), stackPtr(asm.R3, -16), ins(asm.FnMapUpdateElem.Call(), asm.Return())),
			wantErr: "map_update_elem: argument r4 is read before it is written", wantIdx: 7},
		{name: "delete", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), stdw(asm.R10, -8, 0)),
			stackPtr(asm.R2, -8), ins(asm.FnMapDeleteElem.Call(), asm.Return()))},
		{name: "lookup in a ring buffer", insns: cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("ring"), asm.StoreImm(asm.R10, -4, 0, asm.Word)),
			stackPtr(asm.R2, -4), ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return())),
			wantErr: `map_lookup_elem cannot be used on the ring buffer map "ring"`, wantIdx: 4},
		{name: "lookup result typed by its map", insns: cat(lookup("hash"), nullChecked, ins(
			asm.LoadMem(asm.R1, asm.R0, 4, asm.DWord)), out),
			wantErr: "map_lookup_elem: key argument r2: stack access at offset -4 size 8", wantIdx: 4},

		// perf_event_output
		{name: "perf_event_output", insns: cat(record, ins(
			asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.Mov.Imm(asm.R3, 0),
			asm.FnPerfEventOutput.Call(), asm.Return()))},
		{name: "perf_event_output to an array", insns: cat(record, ins(
			asm.LoadMapPtr(asm.R2, 0).WithReference("arr"), asm.Mov.Imm(asm.R3, 0),
			asm.FnPerfEventOutput.Call(), asm.Return())),
			wantErr: `perf_event_output: map "arr" has type 1503; it needs a GPU ring buffer (type 1527)`, wantIdx: 7},
		{name: "perf_event_output size past the data", insns: cat(record, ins(
			asm.Mov.Imm(asm.R5, 24),
			asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.Mov.Imm(asm.R3, 0),
			asm.FnPerfEventOutput.Call(), asm.Return())),
			wantErr: "perf_event_output: buffer argument r4: stack access at offset -16 size 24 is outside", wantIdx: 8},
		{name: "perf_event_output unbounded size", insns: cat(record, ins(
			asm.Mov.Reg(asm.R5, asm.R1),
			asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.Mov.Imm(asm.R3, 0),
			asm.FnPerfEventOutput.Call(), asm.Return())),
			wantErr: "perf_event_output: size argument r5 is not bounded", wantIdx: 8},
		{name: "perf_event_output bounded size", insns: cat(record, ins(
			asm.Mov.Reg(asm.R5, asm.R1), asm.And.Imm(asm.R5, 15),
			asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.Mov.Imm(asm.R3, 0),
			asm.FnPerfEventOutput.Call(), asm.Return()))},

		// trace_printk and puts
		{name: "trace_printk", insns: cat(ins(stdw(asm.R10, -8, 0x0a6968)), stackPtr(asm.R1, -8),
			ins(asm.Mov.Imm(asm.R2, 8), asm.FnTracePrintk.Call(), asm.Return()))},
		{name: "trace_printk format longer than written", insns: cat(ins(stdw(asm.R10, -8, 0x0a6968)), stackPtr(asm.R1, -8),
			ins(asm.Mov.Imm(asm.R2, 16), asm.FnTracePrintk.Call(), asm.Return())),
			wantErr: "trace_printk: buffer argument r1: stack access at offset -8 size 16 is outside", wantIdx: 4},
		{name: "trace_printk format from .rodata", insns: ins(asm.LoadMapValue(asm.R1, 0, 0).WithReference(".rodata"),
			asm.Mov.Imm(asm.R2, 32), asm.FnTracePrintk.Call(), asm.Return())},
		{name: "puts", insns: cat(ins(stdw(asm.R10, -8, 0x6968)), stackPtr(asm.R1, -8), ins(call(jit.HelperPuts), asm.Return()))},
		{name: "puts of a number", insns: ins(asm.Mov.Imm(asm.R1, 0), call(jit.HelperPuts), asm.Return()),
			wantErr: "puts: string argument r1 must point to memory", wantIdx: 1},

		// three u64 out-pointers
		{name: "get_block_idx", insns: cat(stackPtr(asm.R1, -8), stackPtr(asm.R2, -16), stackPtr(asm.R3, -24), ins(
			call(jit.HelperGetBlockIdx),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord),
			asm.LoadMem(asm.R1, asm.R10, -24, asm.DWord),
			asm.Add.Reg(asm.R0, asm.R1),
			asm.Return()))},
		{name: "get_thread_idx into a map value", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Reg(asm.R2, asm.R0), asm.Add.Imm(asm.R2, 8), asm.Mov.Reg(asm.R3, asm.R0),
			call(jit.HelperGetThreadIdx)), out)},
		{name: "get_grid_dim past a map value", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Reg(asm.R2, asm.R0), asm.Add.Imm(asm.R2, 16), asm.Mov.Reg(asm.R3, asm.R0),
			call(jit.HelperGetGridDim)), out),
			wantErr: "get_grid_dim: output argument r2: map value access at offset 16 size 8 exceeds value size 16", wantIdx: 10},
		{name: "get_block_dim with a number", insns: cat(stackPtr(asm.R1, -8), stackPtr(asm.R2, -16), ins(
			asm.Mov.Imm(asm.R3, 0), call(jit.HelperGetBlockDim), asm.Return())),
			wantErr: "get_block_dim: output argument r3 must point to memory", wantIdx: 5},
		{name: "get_block_idx with an unchecked lookup", insns: cat(lookup("arr"), ins(
			asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Reg(asm.R2, asm.R0), asm.Mov.Reg(asm.R3, asm.R0),
			call(jit.HelperGetBlockIdx), asm.Return())),
			wantErr: "get_block_idx: output argument r1 may be NULL: null-check the result of map_lookup_elem (insn 4) first", wantIdx: 8},

		// argument-less and warp helpers
		{name: "ids and timer", insns: ins(call(jit.HelperGetCurrentPidTgid), call(jit.HelperGetSMID), call(jit.HelperGetWarpID),
			call(jit.HelperGPUMembar), call(jit.HelperWarpIsLeader), call(jit.HelperWarpActiveCount), call(jit.HelperWarpActiveMask),
			call(jit.HelperGetLaunchID), call(jit.HelperExit), asm.Return())},
		{name: "warp sum", insns: ins(call(jit.HelperGetLaneID), asm.Mov.Reg(asm.R1, asm.R0), call(jit.HelperWarpSumU64),
			asm.Mov.Reg(asm.R1, asm.R0), call(jit.HelperWarpMaxU64), asm.Mov.Reg(asm.R1, asm.R0), call(jit.HelperWarpMinU64), asm.Return())},
		{name: "warp sum of a pointer", insns: ins(asm.Mov.Reg(asm.R1, asm.R10), call(jit.HelperWarpSumU64), asm.Return()),
			wantErr: "warp_sum_u64: argument r1 must be a number, got a stack pointer", wantIdx: 1},
		{name: "warp max of a clobbered register", insns: ins(call(jit.HelperGetLaneID), call(jit.HelperWarpMaxU64), asm.Return()),
			wantErr: "warp_max_u64: argument r1 is read before it is written", wantIdx: 1},
		{name: "unknown helper", insns: ins(call(700), asm.Return()),
			wantErr: "unknown helper 700: not in the GPU helper ABI", wantIdx: 0},
		{name: "callx through a constant", insns: ins(asm.Mov.Imm(asm.R2, int32(jit.HelperGetLaneID)),
			raw(asm.Call.Op(asm.RegSource), asm.R2, 0, 0, 0), asm.Return())},
		{name: "callx through a variable", insns: ins(asm.Mov.Reg(asm.R2, asm.R1),
			raw(asm.Call.Op(asm.RegSource), asm.R2, 0, 0, 0), asm.Return()),
			wantErr: "callx through r2: the helper id must be a known constant", wantIdx: 1},
	})
}

// TestConformanceHelperOption: id 5 is ktime_get_ns (no arguments) in the
// GPU ABI and bpf_conformance's "unwind" (one scalar) with
// ConformanceHelpers, which take precedence.
func TestConformanceHelperOption(t *testing.T) {
	ptrArg := &jit.Program{Insns: ins(asm.Mov.Reg(asm.R1, asm.R10), asm.FnKtimeGetNs.Call(), asm.Return())}
	withArg := &jit.Program{Insns: ins(asm.Mov.Imm(asm.R1, -1), asm.FnKtimeGetNs.Call(), asm.Mov.Imm(asm.R0, 2), asm.Return())}
	tests := []struct {
		name    string
		p       *jit.Program
		opts    Options
		wantErr string
	}{
		{"ktime_get_ns ignores r1", ptrArg, Options{}, ""},
		{"ktime_get_ns with r1 set", withArg, Options{}, ""},
		{"unwind with its argument", withArg, Options{Helpers: ConformanceHelpers}, ""},
		{"unwind of a pointer", ptrArg, Options{Helpers: ConformanceHelpers}, "unwind: argument r1 must be a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(tt.p, tt.opts)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
	if s, ok := HelperSignature(jit.HelperMapLookupElem); !ok || s.Name != "map_lookup_elem" || s.Ret != RetMapValueOrNull {
		t.Fatalf("HelperSignature(1) = %+v, %v", s, ok)
	}
	if s, ok := HelperSignature(jit.HelperKtimeGetNs); !ok || s.Name != "ktime_get_ns" || s.Args != [5]ArgType{} {
		t.Fatalf("HelperSignature(5) = %+v, %v: want ktime_get_ns without arguments", s, ok)
	}
}

func TestHelperAlignment(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "misaligned output", insns: cat(stackPtr(asm.R1, -12), stackPtr(asm.R2, -24), stackPtr(asm.R3, -32), ins(
			call(jit.HelperGetThreadIdx), asm.Return())),
			wantErr: "get_thread_idx: output argument r1: write at offset -12 size 8 is not 8-byte aligned", wantIdx: 6},
	})
	// A misaligned key is allowed but reported, so the compiler copies it
	// byte by byte.
	p := &jit.Program{Maps: testMaps, Insns: link(cat(ins(
		asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), stdw(asm.R10, -8, 0)),
		stackPtr(asm.R2, -6), ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return())))}
	res, err := Verify(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsUnaligned(4) || len(res.Unaligned) != 1 {
		t.Fatalf("unaligned %v, want [4]", res.Unaligned)
	}
}

// TestMapValueAccess: accesses through a map value on every path are
// listed (the compiler drops its .local test for them); a helper whose key
// is on the stack and a stack access are not.
func TestMapValueAccess(t *testing.T) {
	// Indexes count Program.Insns entries (lddw is one).
	p := &jit.Program{Maps: testMaps, Insns: link(cat(ins(
		asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), stdw(asm.R10, -8, 0)), // 0, 1
		stackPtr(asm.R2, -8), // 2, 3
		ins(asm.FnMapLookupElem.Call(), // 4: key on the stack
			asm.JEq.Imm(asm.R0, 0, "out"),               // 5
			asm.Mov.Imm(asm.R1, 1),                      // 6
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),    // 7: map value
			asm.LoadMem(asm.R3, asm.R10, -8, asm.DWord), // 8: stack
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),    // 9
			asm.Return())))}
	res, err := Verify(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.MapValueOnly(7) {
		t.Errorf("insn 7 (atomic on a map value) not in %v", res.MapValueAccess)
	}
	for _, i := range []int{1, 4, 8} {
		if res.MapValueOnly(i) {
			t.Errorf("insn %d (stack) in MapValueAccess %v", i, res.MapValueAccess)
		}
	}
}

// TestConstKeys: a map helper's key is reported when the stack bytes it
// points to hold the same known number on every path, however they were
// written, and not when any path leaves a byte unknown or different.
func TestConstKeys(t *testing.T) {
	// Every program ends with: r1 = arr (lddw); r2 = r10-8; call lookup;
	// r0 = 0; exit. The call is the fourth instruction from the end.
	tail := cat(ins(asm.LoadMapPtr(asm.R1, 0).WithReference("arr")), stackPtr(asm.R2, -8),
		ins(asm.FnMapLookupElem.Call(), asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return()))
	unknownR6 := ins(call(jit.HelperKtimeGetNs), asm.Mov.Reg(asm.R6, asm.R0))
	cases := []struct {
		name string
		pre  asm.Instructions
		want uint64
		ok   bool
	}{
		{"word immediate", ins(asm.StoreImm(asm.R10, -8, 7, asm.Word)), 7, true},
		{"word register", ins(asm.Mov.Imm(asm.R3, 9), asm.StoreMem(asm.R10, -8, asm.R3, asm.Word)), 9, true},
		{"dword spill, low word read", ins(asm.LoadImm(asm.R3, 0x1122334455667788, asm.DWord),
			asm.StoreMem(asm.R10, -8, asm.R3, asm.DWord)), 0x55667788, true},
		{"bytes", ins(asm.StoreImm(asm.R10, -8, 1, asm.Byte), asm.StoreImm(asm.R10, -7, 2, asm.Byte),
			asm.StoreImm(asm.R10, -6, 0, asm.Half)), 0x0201, true},
		{"one byte overwritten by an unknown", cat(unknownR6, ins(asm.StoreImm(asm.R10, -8, 5, asm.Word),
			asm.StoreMem(asm.R10, -7, asm.R6, asm.Byte))), 0, false},
		{"unknown register", cat(unknownR6, ins(asm.StoreMem(asm.R10, -8, asm.R6, asm.Word))), 0, false},
		{"same on both paths", cat(unknownR6, ins(asm.StoreImm(asm.R10, -8, 3, asm.Word),
			asm.JEq.Imm(asm.R6, 0, "join"), asm.StoreImm(asm.R10, -8, 3, asm.Word),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("join"))), 3, true},
		{"different on two paths", cat(unknownR6, ins(asm.StoreImm(asm.R10, -8, 3, asm.Word),
			asm.JEq.Imm(asm.R6, 0, "join"), asm.StoreImm(asm.R10, -8, 4, asm.Word),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("join"))), 0, false},
		{"helper output over the key", cat(ins(stdw(asm.R10, -8, 3)), stackPtr(asm.R1, -8),
			stackPtr(asm.R2, -16), stackPtr(asm.R3, -24), ins(call(jit.HelperGetThreadIdx))), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			insns := link(cat(tc.pre, tail))
			p := &jit.Program{Maps: testMaps, Insns: insns}
			res, err := Verify(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			callIdx := len(insns) - 3
			got, ok := res.ConstKeys[callIdx]
			if ok != tc.ok || got != tc.want {
				t.Fatalf("ConstKeys[%d] = %#x, %v; want %#x, %v (all: %v)", callIdx, got, ok, tc.want, tc.ok, res.ConstKeys)
			}
			if off, ok := res.StackKeys[callIdx]; !ok || off != -8 || len(res.StackKeys) != 1 {
				t.Fatalf("StackKeys = %v, want the call's key at r10-8", res.StackKeys)
			}
			if len(res.ConstKeys) > 1 {
				t.Fatalf("ConstKeys %v: only the lookup has a key", res.ConstKeys)
			}
		})
	}
}
