package verifier

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Maps used by the test programs.
var (
	arrayMap = &jit.Map{Name: "arr", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 4}
	hashMap  = &jit.Map{Name: "hash", Type: jit.MapTypeHash, KeySize: 8, ValueSize: 8, MaxEntries: 64}
	ringMap  = &jit.Map{Name: "ring", Type: jit.MapTypeGPURingbuf, MaxEntries: 4096}
	roMap    = &jit.Map{Name: ".rodata", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 32, MaxEntries: 1, Flags: mapFlagRdonlyProg}
	testMaps = []*jit.Map{arrayMap, hashMap, ringMap, roMap}
)

// link resolves the label references of insns in place (as loading an ELF
// object does), using cilium/ebpf's own encoder.
func link(insns asm.Instructions) asm.Instructions {
	_ = insns.Marshal(io.Discard, binary.LittleEndian) // resolves references even if encoding fails later
	return insns
}

func cat(parts ...asm.Instructions) asm.Instructions {
	var out asm.Instructions
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// stdw stores a 64-bit immediate (cilium's asm.StoreImm refuses DWord).
func stdw(dst asm.Register, off int16, v int64) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: dst, Offset: off, Constant: v}
}

func ins(list ...asm.Instruction) asm.Instructions { return list }

// lookup emits key = 0 at r10-4 and r0 = map_lookup_elem(&m, &key); the call
// is the 5th instruction (index 4 from the start of the sequence).
func lookup(m string) asm.Instructions { return lookupKey(m, 0) }

// lookupKey is lookup with key k.
func lookupKey(m string, k int32) asm.Instructions {
	return ins(
		asm.StoreImm(asm.R10, -4, int64(k), asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
	)
}

var ret0 = ins(asm.Mov.Imm(asm.R0, 0), asm.Return())

// verifyOK links insns, verifies them with maps and fails t on a rejection.
func verifyOK(t *testing.T, maps []*jit.Map, insns asm.Instructions) *Result {
	t.Helper()
	res, err := Verify(&jit.Program{Maps: maps, Insns: link(insns)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// nullChecked ends at "out" if r0 is NULL.
var nullChecked = ins(asm.JEq.Imm(asm.R0, 0, "out"))

var out = ins(asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())

type verifyCase struct {
	name    string
	insns   asm.Instructions
	ctx     int
	wantErr string // substring of the reason; "" = accepted
	wantIdx int    // instruction index of the rejection
	nolink  bool   // keep label references unresolved
}

func runCases(t *testing.T, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			insns := tc.insns
			if !tc.nolink {
				insns = link(insns)
			}
			p := &jit.Program{Name: tc.name, Insns: insns, Maps: testMaps}
			res, err := Verify(p, Options{CtxSize: tc.ctx})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("rejected: %v\n%v", err, p.Insns)
				}
				if res == nil || len(res.Funcs) == 0 {
					t.Fatalf("accepted without a result: %+v", res)
				}
				return
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("accepted (err %v), want %q\n%v", err, tc.wantErr, p.Insns)
			}
			if !strings.Contains(ve.Reason, tc.wantErr) {
				t.Fatalf("reason %q, want it to contain %q", ve.Reason, tc.wantErr)
			}
			if ve.Index != tc.wantIdx {
				t.Fatalf("rejected at insn %d, want %d: %v", ve.Index, tc.wantIdx, err)
			}
		})
	}
}

func TestRegisters(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "written before read", insns: ins(asm.Mov.Imm(asm.R3, 1), asm.Mov.Reg(asm.R0, asm.R3), asm.Return())},
		{name: "read before written", insns: ins(asm.Mov.Reg(asm.R0, asm.R3), asm.Return()),
			wantErr: "r3 is read before it is written", wantIdx: 0},
		{name: "alu reads dst", insns: ins(asm.Add.Imm(asm.R4, 1), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "r4 is read before it is written", wantIdx: 0},
		{name: "r0 set before exit", insns: ret0},
		{name: "r0 unset at exit", insns: ins(asm.Return()), wantErr: "r0 is read before it is written", wantIdx: 0},
		{name: "written on one path only", insns: ins(
			asm.Mov.Imm(asm.R0, 0),
			asm.JEq.Imm(asm.R1, 0, "skip"),
			asm.Mov.Imm(asm.R3, 1),
			asm.Mov.Reg(asm.R0, asm.R3).WithSymbol("skip"),
			asm.Return()), wantErr: "r3 is read before it is written", wantIdx: 3},
		{name: "r1-r5 usable before a call", insns: ins(asm.Mov.Reg(asm.R0, asm.R1), asm.Return())},
		{name: "r1-r5 clobbered by a helper call", insns: ins(
			asm.Mov.Imm(asm.R5, 7),
			asm.FnKtimeGetNs.Call(),
			asm.Mov.Reg(asm.R0, asm.R5),
			asm.Return()), wantErr: "r5 is read before it is written", wantIdx: 2},
		{name: "r6 survives a helper call", insns: ins(
			asm.Mov.Imm(asm.R6, 7),
			asm.BuiltinFunc(jit.HelperGetGlobalTimer).Call(),
			asm.Mov.Reg(asm.R0, asm.R6),
			asm.Return())},
		{name: "r2 dead after a helper call", insns: ins(
			asm.Mov.Imm(asm.R2, 7),
			asm.BuiltinFunc(jit.HelperGetGlobalTimer).Call(),
			asm.Mov.Reg(asm.R0, asm.R2),
			asm.Return()), wantErr: "r2 is read before it is written", wantIdx: 2},
		{name: "r10 is read-only (mov)", insns: ins(asm.Mov.Imm(asm.R10, 0), asm.Return()),
			wantErr: "r10 (the frame pointer) is read-only", wantIdx: 0},
		{name: "r10 is read-only (add)", insns: ins(asm.Add.Imm(asm.R10, -8), asm.Return()),
			wantErr: "read-only", wantIdx: 0},
		{name: "r10 is read-only (load)", insns: ins(
			stdw(asm.R10, -8, 1),
			asm.LoadMem(asm.R10, asm.R10, -8, asm.DWord), asm.Return()),
			wantErr: "read-only", wantIdx: 1},
		{name: "r10 written in dead code", insns: ins(asm.Mov.Imm(asm.R0, 0), asm.Return(), asm.Mov.Imm(asm.R10, 0), asm.Return()),
			wantErr: "read-only", wantIdx: 2},
		{name: "r10 written by a fetching atomic", insns: ins(stdw(asm.R10, -8, 0), asm.FetchAdd.Mem(asm.R10, asm.R10, asm.DWord, -8),
			asm.Mov.Imm(asm.R0, 0), asm.Return()), wantErr: "a fetching atomic cannot write it", wantIdx: 1},
		{name: "r10 copied is fine", insns: ins(asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8),
			stdw(asm.R1, 0, 3), asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return())},
	})
}

func TestStack(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "lowest slot", insns: cat(ins(stdw(asm.R10, -512, 1),
			asm.LoadMem(asm.R0, asm.R10, -512, asm.DWord)), ins(asm.Return()))},
		{name: "below the stack", insns: ins(stdw(asm.R10, -520, 1), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "stack access at offset -520 size 8 is outside the 512-byte stack", wantIdx: 0},
		{name: "above the frame", insns: ins(stdw(asm.R10, -4, 1), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "outside the 512-byte stack", wantIdx: 0},
		{name: "read after write", insns: ins(asm.StoreImm(asm.R10, -8, 1, asm.Word),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.Word), asm.Return())},
		{name: "read of unwritten bytes", insns: ins(asm.StoreImm(asm.R10, -8, 1, asm.Word),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()),
			wantErr: "stack byte at r10-4 is read before it is written", wantIdx: 1},
		{name: "written on one path only", insns: ins(
			asm.JEq.Imm(asm.R1, 0, "skip"),
			stdw(asm.R10, -8, 1),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord).WithSymbol("skip"),
			asm.Return()), wantErr: "stack byte at r10-8 is read before it is written", wantIdx: 2},
		{name: "variable offset in range", insns: ins(
			stdw(asm.R10, -16, 1),
			stdw(asm.R10, -8, 2),
			asm.And.Imm(asm.R1, 8),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Reg(asm.R2, asm.R1),
			asm.LoadMem(asm.R0, asm.R2, -16, asm.DWord),
			asm.Return())},
		{name: "variable offset out of range", insns: ins(
			stdw(asm.R10, -16, 1),
			stdw(asm.R10, -8, 2),
			asm.And.Imm(asm.R1, 15),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Reg(asm.R2, asm.R1),
			asm.LoadMem(asm.R0, asm.R2, -16, asm.DWord),
			asm.Return()), wantErr: "stack access at offsets -16..-1 size 8 is outside", wantIdx: 5},
		{name: "unbounded offset", insns: ins(
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Reg(asm.R2, asm.R1),
			asm.LoadMem(asm.R0, asm.R2, -16, asm.DWord),
			asm.Return()), wantErr: "unbounded offset", wantIdx: 2},
		{name: "spilled pointer keeps its type", insns: cat(lookup("arr"), nullChecked, ins(
			asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
			asm.LoadMem(asm.R0, asm.R3, 8, asm.DWord),
			asm.Return()), out)},
		{name: "partly overwritten spill is a number", insns: cat(lookup("arr"), nullChecked, ins(
			asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.StoreImm(asm.R10, -12, 0, asm.Word),
			asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
			asm.LoadMem(asm.R0, asm.R3, 8, asm.DWord),
			asm.Return()), out), wantErr: "r3 is a number", wantIdx: 9},
	})
}

func TestMapValues(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "in bounds", insns: cat(lookup("arr"), nullChecked, ins(
			asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord)), out)},
		{name: "past the end", insns: cat(lookup("arr"), nullChecked, ins(
			asm.LoadMem(asm.R1, asm.R0, 12, asm.DWord)), out),
			wantErr: "map value access at offset 12 size 8 exceeds value size 16", wantIdx: 6},
		{name: "before the start", insns: cat(lookup("arr"), nullChecked, ins(
			asm.LoadMem(asm.R1, asm.R0, -1, asm.Byte)), out),
			wantErr: "before the start of the value", wantIdx: 6},
		{name: "bounded index", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.FnGetPrandomU32.Call(),
			asm.JGE.Imm(asm.R0, 2, "out"),
			asm.LSh.Imm(asm.R0, 3),
			asm.Add.Reg(asm.R6, asm.R0),
			asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord)), out),
			wantErr: "unknown helper 7", wantIdx: 7},
		{name: "bounded index via warp helper", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.BuiltinFunc(jit.HelperGetLaneID).Call(),
			asm.JGE.Imm(asm.R0, 2, "out"),
			asm.LSh.Imm(asm.R0, 3),
			asm.Add.Reg(asm.R6, asm.R0),
			asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord)), out)},
		{name: "unbounded index", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.BuiltinFunc(jit.HelperGetLaneID).Call(),
			asm.JGE.Imm(asm.R0, 3, "out"),
			asm.LSh.Imm(asm.R0, 3),
			asm.Add.Reg(asm.R6, asm.R0),
			asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord)), out),
			wantErr: "map value access at offsets 0..16 size 8 exceeds value size 16", wantIdx: 11},
		{name: "read-only map value read", insns: ins(
			asm.LoadMapValue(asm.R1, 0, 8).WithReference(".rodata"),
			asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord),
			asm.Return())},
		{name: "read-only map value write", insns: ins(
			asm.LoadMapValue(asm.R1, 0, 8).WithReference(".rodata"),
			stdw(asm.R1, 0, 1),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return()), wantErr: `map ".rodata" is read-only`, wantIdx: 1},
		{name: "unknown map", insns: ins(asm.LoadMapPtr(asm.R1, 0).WithReference("nope"), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: `references map "nope"`, wantIdx: 0},
	})
}

func TestNullCheck(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "checked", insns: cat(lookup("arr"), nullChecked, ins(asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord), asm.Return()), out)},
		{name: "unchecked", insns: cat(lookup("arr"), ins(asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord), asm.Return())),
			wantErr: "r0 may be NULL here: null-check the result of map_lookup_elem (insn 4) before dereferencing it", wantIdx: 5},
		{name: "checked through a copy", insns: cat(lookup("arr"), ins(
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.JNE.Imm(asm.R0, 0, "ok"),
			asm.Mov.Imm(asm.R0, 0), asm.Return(),
			asm.LoadMem(asm.R0, asm.R7, 0, asm.DWord).WithSymbol("ok"),
			asm.Return()))},
		{name: "dereferenced on the NULL edge", insns: cat(lookup("arr"), ins(
			asm.JNE.Imm(asm.R0, 0, "ok"),
			asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("ok"), asm.Return())),
			wantErr: "r0 is a number (scalar 0)", wantIdx: 6},
		{name: "arithmetic before the check", insns: cat(lookup("arr"), ins(asm.Add.Imm(asm.R0, 8)), nullChecked, out),
			wantErr: "r0 may be NULL here: null-check the result of map_lookup_elem (insn 4) before doing arithmetic", wantIdx: 5},
		{name: "result of an older lookup is not checked by a newer one", insns: cat(lookup("arr"), ins(
			asm.Mov.Reg(asm.R7, asm.R0)), lookup("arr"), nullChecked, ins(
			asm.LoadMem(asm.R0, asm.R7, 0, asm.DWord), asm.Return()), out),
			wantErr: "r7 may be NULL", wantIdx: 12},
	})
}

func TestContext(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "in bounds", ctx: 16, insns: ins(asm.LoadMem(asm.R0, asm.R1, 8, asm.Word), asm.Return())},
		{name: "past the end", ctx: 16, insns: ins(asm.LoadMem(asm.R0, asm.R1, 12, asm.DWord), asm.Return()),
			wantErr: "context access at offset 12 size 8 is outside the 16-byte context", wantIdx: 0},
		{name: "r2 holds the size", ctx: 16, insns: ins(asm.Mov.Reg(asm.R0, asm.R2), asm.Return())},
		{name: "no context", insns: ins(asm.LoadMem(asm.R0, asm.R1, 0, asm.Byte), asm.Return()),
			wantErr: "r1 is a number (scalar), not a pointer", wantIdx: 0},
	})
}

func TestMapHandles(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "moved and spilled", insns: ins(
			asm.LoadMapPtr(asm.R6, 0).WithReference("arr"),
			asm.StoreMem(asm.R10, -8, asm.R6, asm.DWord),
			asm.LoadMem(asm.R1, asm.R10, -8, asm.DWord),
			asm.StoreImm(asm.R10, -12, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -12),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Imm(asm.R0, 0), asm.Return())},
		{name: "add to a map handle", insns: ins(
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
			asm.Add.Imm(asm.R1, 8),
			asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "arithmetic on the map handle in r1 is not allowed", wantIdx: 1},
		{name: "map handle as operand", insns: ins(
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
			asm.Mov.Imm(asm.R3, 8),
			asm.Add.Reg(asm.R3, asm.R1),
			asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "arithmetic on the map handle in r1", wantIdx: 2},
		{name: "dereference a map handle", insns: ins(
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
			asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord), asm.Return()),
			wantErr: "r1 is a map handle", wantIdx: 1},
	})
}

func TestDivisionByZero(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "div imm 0", insns: ins(asm.Mov.Imm(asm.R0, 7), asm.Div.Imm(asm.R0, 0), asm.Return())},
		{name: "mod reg 0", insns: ins(asm.Mov.Imm(asm.R0, 7), asm.Mov.Imm(asm.R1, 0), asm.Mod.Reg32(asm.R0, asm.R1), asm.Return())},
		{name: "sdiv by unknown", insns: ins(asm.Mov.Imm(asm.R0, 7), asm.SDiv.Reg(asm.R0, asm.R1), asm.Return())},
		{name: "div reads an unset divisor", insns: ins(asm.Mov.Imm(asm.R0, 7), asm.Div.Reg(asm.R0, asm.R5), asm.Return()),
			wantErr: "r5 is read before it is written", wantIdx: 1},
	})
}
