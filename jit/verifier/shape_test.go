package verifier

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// raw builds an instruction without cilium's DSL checks.
func raw(op asm.OpCode, dst, src asm.Register, off int16, imm int64) asm.Instruction {
	return asm.Instruction{OpCode: op, Dst: dst, Src: src, Offset: off, Constant: imm}
}

func TestEncoding(t *testing.T) {
	exit := asm.Return()
	r0 := asm.Mov.Imm(asm.R0, 0)
	runCases(t, []verifyCase{
		{name: "alu offset zero", insns: ins(raw(asm.Add.Op(asm.ImmSource), asm.R0, 0, 0, 1), exit),
			wantErr: "r0 is read before", wantIdx: 0},
		{name: "alu offset non-zero", insns: ins(r0, raw(asm.Add.Op(asm.ImmSource), asm.R0, 0, 1, 1), exit),
			wantErr: "reserved offset field must be zero, got 1", wantIdx: 1},
		{name: "alu imm with src", insns: ins(r0, raw(asm.Add.Op(asm.ImmSource), asm.R0, asm.R1, 0, 1), exit),
			wantErr: "reserved src field must be zero", wantIdx: 1},
		{name: "alu reg with imm", insns: ins(r0, raw(asm.Add.Op(asm.RegSource), asm.R0, asm.R1, 0, 1), exit),
			wantErr: "reserved imm field must be zero", wantIdx: 1},
		{name: "sdiv and smod", insns: ins(r0, asm.SDiv.Imm(asm.R0, 3), asm.SMod.Imm32(asm.R0, -3), exit)},
		{name: "movsx", insns: ins(r0, asm.MovSX16.Reg(asm.R0, asm.R0), asm.MovSX8.Reg32(asm.R0, asm.R0), exit)},
		{name: "movsx32 in ALU32", insns: ins(r0, asm.MovSX32.Reg32(asm.R0, asm.R0), exit),
			wantErr: "invalid movsx32", wantIdx: 1},
		{name: "movsx with an immediate", insns: ins(raw(asm.MovSX8.Op(asm.ImmSource), asm.R0, 0, 0, 1), exit),
			wantErr: "movsx takes a source register", wantIdx: 0},
		{name: "neg", insns: ins(r0, raw(asm.Neg.Op(asm.ImmSource), asm.R0, 0, 0, 0), exit)},
		{name: "neg with imm", insns: ins(r0, raw(asm.Neg.Op(asm.ImmSource), asm.R0, 0, 0, 1), exit),
			wantErr: "fields of neg must be zero", wantIdx: 1},
		{name: "neg from a register", insns: ins(r0, raw(asm.Neg.Op(asm.RegSource), asm.R0, 0, 0, 0), exit),
			wantErr: "neg takes no source register", wantIdx: 1},
		{name: "byte swaps", insns: ins(r0, asm.HostTo(asm.BE, asm.R0, asm.Half), asm.BSwap(asm.R0, asm.DWord), exit)},
		{name: "byte swap width", insns: ins(r0, raw(asm.OpCode(asm.ALUClass).SetALUOp(asm.Swap), asm.R0, 0, 0, 8), exit),
			wantErr: "byte swap width must be 16, 32 or 64, got 8", wantIdx: 1},
		{name: "bswap with the source bit", insns: ins(r0, raw(asm.OpCode(asm.ALU64Class).SetALUOp(asm.Swap)|0x08, asm.R0, 0, 0, 16), exit),
			wantErr: "64-bit byte swap has no source bit", wantIdx: 1},
		{name: "unknown ALU op", insns: ins(r0, raw(asm.OpCode(0xe7), asm.R0, 0, 0, 0), exit),
			wantErr: "invalid ALU opcode 0xe7", wantIdx: 1},
		{name: "register 11", insns: ins(r0, raw(asm.Mov.Op(asm.RegSource), asm.R0, 11, 0, 0), exit),
			wantErr: "invalid source register r11", wantIdx: 1},
		{name: "invalid opcode", insns: ins(r0, asm.Instruction{OpCode: asm.InvalidOpCode}, exit),
			wantErr: "invalid opcode", wantIdx: 1},
		{name: "legacy packet load", insns: ins(r0, asm.LoadAbs(0, asm.Word), exit),
			wantErr: "LD_ABS/LD_IND) is not supported", wantIdx: 1},
		{name: "ldx with imm", insns: ins(stdw(asm.R10, -8, 0), raw(asm.LoadMemOp(asm.DWord), asm.R0, asm.R10, -8, 1), exit),
			wantErr: "reserved imm field of a load must be zero, got 1", wantIdx: 1},
		{name: "sign-extending load", insns: ins(stdw(asm.R10, -8, 0), asm.LoadMemSX(asm.R0, asm.R10, -8, asm.Word), exit)},
		{name: "sign-extending 64-bit load", insns: ins(stdw(asm.R10, -8, 0), raw(asm.LoadMemSXOp(asm.DWord), asm.R0, asm.R10, -8, 0), exit),
			wantErr: "no sign-extending 64-bit load", wantIdx: 1},
		{name: "st with src", insns: ins(raw(asm.StoreImmOp(asm.Word), asm.R10, asm.R1, -8, 0), r0, exit),
			wantErr: "reserved src field of a store-immediate must be zero", wantIdx: 0},
		{name: "stx with imm", insns: ins(asm.Mov.Imm(asm.R1, 0), raw(asm.StoreMemOp(asm.Word), asm.R10, asm.R1, -8, 1), r0, exit),
			wantErr: "reserved imm field of a store must be zero", wantIdx: 1},
		{name: "ja with imm", insns: ins(r0, raw(asm.Ja.Op(asm.ImmSource), 0, 0, 0, 1), exit),
			wantErr: "reserved imm field of ja must be zero", wantIdx: 1},
		{name: "ja32 with offset", insns: ins(r0, raw(asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja), 0, 0, 1, 0), exit),
			wantErr: "reserved offset field of ja32", wantIdx: 1},
		{name: "exit with dst", insns: ins(r0, raw(asm.Return().OpCode, asm.R1, 0, 0, 0), exit),
			wantErr: "reserved fields of exit must be zero", wantIdx: 1},
		{name: "exit in jmp32", insns: ins(r0, raw(asm.OpCode(0x96), 0, 0, 0, 0), exit),
			wantErr: "call and exit exist in the 64-bit jump class only", wantIdx: 1},
		{name: "jump imm with src", insns: ins(r0, raw(asm.JEq.Op(asm.ImmSource), asm.R0, asm.R1, 0, 0), exit),
			wantErr: "reserved src field must be zero", wantIdx: 1},
		{name: "call with dst", insns: ins(raw(asm.Call.Op(asm.ImmSource), asm.R1, 0, 0, int64(jit.HelperGetGlobalTimer)), exit),
			wantErr: "reserved dst field of call must be zero", wantIdx: 0},
		{name: "kfunc", insns: ins(raw(asm.Call.Op(asm.ImmSource), 0, asm.PseudoKfuncCall, 0, 1), exit),
			wantErr: "kfunc calls are not supported", wantIdx: 0},
		{name: "may_goto", insns: ins(r0, raw(asm.JCOND.Op(asm.ImmSource), 0, 0, 0, 0), exit),
			wantErr: "may_goto", wantIdx: 1},
		{name: "atomics", insns: ins(stdw(asm.R10, -8, 0), asm.Mov.Imm(asm.R1, 1), asm.Mov.Imm(asm.R0, 0),
			asm.AddAtomic.Mem(asm.R10, asm.R1, asm.DWord, -8),
			asm.FetchXor.Mem(asm.R10, asm.R1, asm.Word, -4),
			asm.CmpXchg.Mem(asm.R10, asm.R1, asm.DWord, -8),
			asm.Xchg.Mem(asm.R10, asm.R1, asm.DWord, -8), exit)},
		{name: "atomic with stray imm bits", insns: ins(stdw(asm.R10, -8, 0), asm.Mov.Imm(asm.R1, 1),
			raw(asm.AddAtomic.OpCode(asm.DWord), asm.R10, asm.R1, -8, 0x1000), r0, exit),
			wantErr: "atomic imm 0x1000 has reserved bits set", wantIdx: 2},
		{name: "load-acquire", insns: ins(stdw(asm.R10, -8, 0), asm.LoadAcquire(asm.R0, asm.R10, asm.DWord, -8), exit),
			wantErr: "unknown atomic operation", wantIdx: 1},
		{name: "lddw of a function", insns: ins(raw(asm.LoadImmOp(asm.DWord), asm.R0, asm.PseudoFunc, 0, 0), exit),
			wantErr: "function pointer", wantIdx: 0},
	})
}

func TestControlFlow(t *testing.T) {
	r0 := asm.Mov.Imm(asm.R0, 0)
	exit := asm.Return()
	runCases(t, []verifyCase{
		{name: "empty", insns: nil, wantErr: "no instructions", wantIdx: -1},
		{name: "falls off the end", insns: ins(r0), wantErr: "fall off the end of the program", wantIdx: 0},
		{name: "conditional jump last", insns: ins(r0, asm.JEq.Imm(asm.R0, 0, "x").WithSymbol("x")),
			wantErr: "fall off the end", wantIdx: 1},
		{name: "ja last", insns: ins(r0, asm.Ja.Label("e"), exit.WithSymbol("e"), asm.Ja.Label("e"))},
		{name: "jump past the end", insns: ins(r0, raw(asm.Ja.Op(asm.ImmSource), 0, 0, 5, 0), exit),
			wantErr: "jump target +5 is outside the program (3 instructions)", wantIdx: 1},
		{name: "jump before the start", insns: ins(r0, raw(asm.Ja.Op(asm.ImmSource), 0, 0, -3, 0), exit),
			wantErr: "outside the program", wantIdx: 1},
		{name: "jump into LD_IMM64", insns: ins(r0, raw(asm.JEq.Op(asm.ImmSource), asm.R0, 0, 1, 0),
			asm.LoadImm(asm.R0, 1<<40, asm.DWord), exit),
			wantErr: "lands in the middle of the LD_IMM64 at insn 2", wantIdx: 1},
		{name: "jump over LD_IMM64", insns: ins(r0, raw(asm.JEq.Op(asm.ImmSource), asm.R0, 0, 2, 0),
			asm.LoadImm(asm.R0, 1<<40, asm.DWord), exit)},
		{name: "gotol", insns: ins(r0, asm.LongJump("e"), asm.Mov.Imm(asm.R0, 1), exit.WithSymbol("e"))},
		{name: "unlinked label", nolink: true, insns: ins(r0, asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: -1}.WithReference("e"),
			exit.WithSymbol("e")), wantErr: `reference to "e" is not linked`, wantIdx: 1},
		{name: "dead code is fine", insns: ins(r0, exit, asm.Mov.Reg(asm.R0, asm.R9), exit)},
		{name: "pruned branch is not checked", insns: ins(r0, asm.JEq.Imm(asm.R0, 0, "ok"),
			asm.Mov.Reg(asm.R0, asm.R9), exit, exit.WithSymbol("ok"))},
		{name: "unpruned branch is checked", insns: ins(asm.Mov.Reg(asm.R0, asm.R1), asm.JEq.Imm(asm.R0, 0, "ok"),
			asm.Mov.Reg(asm.R0, asm.R9), exit, exit.WithSymbol("ok")),
			wantErr: "r9 is read before it is written", wantIdx: 2},
		{name: "bounded loop", insns: ins(
			asm.Mov.Imm(asm.R0, 0), asm.Mov.Imm(asm.R1, 0),
			asm.Add.Reg(asm.R0, asm.R1).WithSymbol("loop"),
			asm.Add.Imm(asm.R1, 1),
			asm.JLT.Imm(asm.R1, 100, "loop"),
			exit)},
		{name: "infinite loop is accepted (the budget ends it)", insns: ins(r0, asm.Ja.Label("self").WithSymbol("self"), exit)},
		{name: "loop reading an unset register", insns: ins(
			asm.Mov.Imm(asm.R1, 0),
			asm.JEq.Imm(asm.R1, 5, "done").WithSymbol("loop"),
			asm.Mov.Reg(asm.R0, asm.R1),
			asm.Add.Imm(asm.R1, 1),
			asm.Ja.Label("loop"),
			asm.Mov.Reg(asm.R0, asm.R7).WithSymbol("done"),
			exit), wantErr: "r7 is read before it is written", wantIdx: 5},
		{name: "loop walking a map value", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Imm(asm.R1, 0),
			asm.Mov.Reg(asm.R2, asm.R0),
			asm.Add.Reg(asm.R2, asm.R1).WithSymbol("loop"),
			stdw(asm.R2, 0, 0),
			asm.Mov.Reg(asm.R2, asm.R0),
			asm.Add.Imm(asm.R1, 8),
			asm.JLT.Imm(asm.R1, 16, "loop")), out)},
		{name: "loop walking past a map value", insns: cat(lookup("arr"), nullChecked, ins(
			asm.Mov.Imm(asm.R1, 0),
			asm.Mov.Reg(asm.R2, asm.R0),
			asm.Add.Reg(asm.R2, asm.R1).WithSymbol("loop"),
			stdw(asm.R2, 0, 0),
			asm.Mov.Reg(asm.R2, asm.R0),
			asm.Add.Imm(asm.R1, 8),
			asm.JLE.Imm(asm.R1, 16, "loop")), out),
			wantErr: "map value access at offsets 0..16 size 8 exceeds value size 16", wantIdx: 9},
	})
}

func TestCalls(t *testing.T) {
	exit := asm.Return()
	runCases(t, []verifyCase{
		{name: "call keeps r6-r9", insns: ins(
			asm.Mov.Imm(asm.R6, 6), asm.Mov.Imm(asm.R1, 1),
			asm.Call.Label("f"),
			asm.Add.Reg(asm.R0, asm.R6),
			exit,
			asm.Mov.Reg(asm.R0, asm.R1).WithSymbol("f"),
			asm.Mov.Imm(asm.R6, 0),
			exit)},
		{name: "callee reads caller's r6", insns: ins(
			asm.Mov.Imm(asm.R6, 6),
			asm.Call.Label("f"),
			exit,
			asm.Mov.Reg(asm.R0, asm.R6).WithSymbol("f"),
			exit), wantErr: "r6 is read before it is written", wantIdx: 3},
		{name: "r1 dead after a call", insns: ins(
			asm.Mov.Imm(asm.R1, 1),
			asm.Call.Label("f"),
			asm.Mov.Reg(asm.R0, asm.R1),
			exit,
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"),
			exit), wantErr: "r1 is read before it is written", wantIdx: 2},
		{name: "callee writes the caller's stack", insns: ins(
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8),
			asm.Call.Label("f"),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord),
			exit,
			stdw(asm.R1, 0, 42).WithSymbol("f"),
			asm.Mov.Imm(asm.R0, 0),
			exit)},
		{name: "callee has its own stack", insns: ins(
			stdw(asm.R10, -8, 1),
			asm.Call.Label("f"),
			exit,
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord).WithSymbol("f"),
			exit), wantErr: "stack byte at r10-8 is read before it is written", wantIdx: 3},
		{name: "returns a pointer to its own stack", insns: ins(
			asm.Call.Label("f"),
			exit,
			asm.Mov.Reg(asm.R0, asm.R10).WithSymbol("f"),
			exit), wantErr: "returns a pointer to its own stack frame", wantIdx: 3},
		{name: "recursion", insns: ins(
			asm.Call.Label("f"),
			exit,
			asm.Call.Label("f").WithSymbol("f"),
			exit), wantErr: "recursive call to the function at insn 2", wantIdx: 2},
		{name: "jump into another function", insns: ins(
			asm.Mov.Imm(asm.R0, 0),
			asm.Call.Label("f"),
			asm.Ja.Label("in"),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"),
			exit.WithSymbol("in")), wantErr: "jump from the function at insn 0 into the function at insn 3", wantIdx: 2},
		{name: "function falls into the next", insns: ins(
			asm.Call.Label("f"),
			exit,
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"),
			asm.Call.Label("g"),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("g"),
			exit), wantErr: "fall through into the function at insn 4", wantIdx: 3},
	})
}

func TestResult(t *testing.T) {
	p := &jit.Program{Maps: testMaps, Insns: link(cat(ins(
		asm.Mov.Imm(asm.R1, 0),
		asm.Add.Imm(asm.R1, 1).WithSymbol("loop"),
		asm.JLT.Imm(asm.R1, 10, "loop"),
		asm.Call.Label("f"),
		asm.Return(),
		stdw(asm.R10, -24, 7).WithSymbol("f"),
		asm.LoadMem(asm.R0, asm.R10, -20, asm.Word),
		asm.LoadMem(asm.R0, asm.R10, -24, asm.DWord),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0), // dead
		asm.Return())))}
	res, err := Verify(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Result{
		Funcs:        []Func{{Start: 0, End: 5, StackSize: 0}, {Start: 5, End: 11, Name: "f", StackSize: 24}},
		BackEdges:    []Edge{{From: 2, To: 1}},
		MaxCallDepth: 2,
		Unreachable:  []int{9, 10},
		Unaligned:    nil,
	}
	res.Steps, res.States = 0, 0
	if res.StackEscaped(0, -jit.StackSize, 0) || res.StackEscaped(5, -jit.StackSize, 0) {
		t.Errorf("escaped frame bytes: every access is at r10+off")
	}
	res.escaped = nil
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result\n%+v, want\n%+v", res, want)
	}
}

func TestAlignment(t *testing.T) {
	cases := []struct {
		name      string
		insns     asm.Instructions
		ctx       int
		unaligned []int
		ctxAccess []int // CtxAccess
		proven    []int // instructions ProvenAligned must report
		wantErr   string
	}{
		{name: "aligned stack", insns: ins(stdw(asm.R10, -8, 0), asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()),
			proven: []int{0, 1}},
		{name: "unaligned stack", insns: ins(stdw(asm.R10, -16, 0), stdw(asm.R10, -8, 0),
			asm.LoadMem(asm.R0, asm.R10, -12, asm.DWord), asm.Return()), unaligned: []int{2}, proven: []int{0, 1}},
		{name: "unaligned context", ctx: 12, insns: ins(asm.LoadMem(asm.R0, asm.R1, 2, asm.DWord), asm.Return()), unaligned: []int{0},
			ctxAccess: []int{0}},
		{name: "stride of 8 is aligned", ctx: 64, insns: ins(
			asm.LoadMem(asm.R3, asm.R1, 0, asm.Byte), asm.And.Imm(asm.R3, 7), asm.LSh.Imm(asm.R3, 3),
			asm.Add.Reg(asm.R1, asm.R3), asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord), asm.Return()), ctxAccess: []int{0, 4}},
		{name: "stride of 4 is not aligned for 8", ctx: 64, insns: ins(
			asm.LoadMem(asm.R3, asm.R1, 0, asm.Byte), asm.And.Imm(asm.R3, 7), asm.LSh.Imm(asm.R3, 2),
			asm.Add.Reg(asm.R1, asm.R3), asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord), asm.Return()), unaligned: []int{4},
			ctxAccess: []int{0, 4}},
		{name: "unaligned atomic", insns: ins(stdw(asm.R10, -16, 0), stdw(asm.R10, -8, 0), asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R10, asm.R1, asm.DWord, -12), asm.Mov.Imm(asm.R0, 0), asm.Return()),
			wantErr: "atomic access at offset -12 size 8 is not naturally aligned"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Verify(&jit.Program{Insns: tc.insns}, Options{CtxSize: tc.ctx})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Unaligned, tc.unaligned) {
				t.Fatalf("unaligned %v, want %v", res.Unaligned, tc.unaligned)
			}
			for _, i := range tc.unaligned {
				if !res.IsUnaligned(i) {
					t.Fatalf("IsUnaligned(%d) = false", i)
				}
			}
			if !reflect.DeepEqual(res.CtxAccess, tc.ctxAccess) {
				t.Fatalf("ctx accesses %v, want %v", res.CtxAccess, tc.ctxAccess)
			}
			for _, i := range tc.proven {
				if !res.ProvenAligned(i) {
					t.Fatalf("ProvenAligned(%d) = false", i)
				}
			}
			for _, i := range append(tc.unaligned, tc.ctxAccess...) {
				if res.ProvenAligned(i) {
					t.Fatalf("ProvenAligned(%d) = true for an unaligned or context access", i)
				}
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		err  *Error
		want string
	}{
		{&Error{Index: 12, Line: `foo.c:34 "x = *p"`, Reason: "bad"}, `insn 12 (foo.c:34 "x = *p"): bad`},
		{&Error{Index: 3, Reason: "bad"}, "insn 3: bad"},
		{&Error{Index: -1, Reason: "bad"}, "program: bad"},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	// A comment as the source of the first instruction of a line carries
	// over to the instructions after it.
	p := &jit.Program{Insns: ins(
		asm.Mov.Imm(asm.R1, 0).WithSource(asm.Comment("x = *p")),
		asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord),
		asm.Return())}
	_, err := Verify(p, Options{})
	var ve *Error
	if !errors.As(err, &ve) || err.Error() != `insn 1 ("x = *p"): r1 is a number (scalar 0), not a pointer: it cannot be dereferenced` {
		t.Fatalf("got %v", err)
	}
}
