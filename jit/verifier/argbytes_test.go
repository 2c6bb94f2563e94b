package verifier

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// argSizes are the size arguments TestHelperArgBytes passes: trace_printk's
// is past its MaxLen, so the table's bound is what is checked.
var argSizes = map[jit.HelperID]int32{jit.HelperTracePrintk: 250, jit.HelperPerfEventOutput: 24}

// argTarget is the map the ArgMap argument of TestHelperArgBytes names:
// odd key and value sizes, so that they cannot be mistaken for others.
var argTarget = &jit.Map{Name: "tgt", Type: jit.MapTypeHash, KeySize: 12, ValueSize: 20, MaxEntries: 4}

// argCall builds a call of helper id whose pointer argument a points to
// the start of the value of map "buf"; other pointer arguments point to
// 256 written bytes at r10-256. It returns the call's index.
func argCall(id jit.HelperID, sig jit.Signature, a int) (asm.Instructions, int) {
	var insns asm.Instructions
	for off := int16(-256); off < 0; off += 8 {
		insns = append(insns, stdw(asm.R10, off, 0))
	}
	insns = append(insns,
		asm.StoreImm(asm.R10, -264, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference("buf"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -264),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R6, asm.R0))
	for k, at := range sig.Args {
		r := asm.Register(k + 1)
		switch at {
		case jit.ArgNone:
		case jit.ArgMap:
			insns = append(insns, asm.LoadMapPtr(r, 0).WithReference(argTarget.Name))
		case jit.ArgRingbuf:
			insns = append(insns, asm.LoadMapPtr(r, 0).WithReference("ring"))
		case jit.ArgSize:
			insns = append(insns, asm.Mov.Imm(r, argSizes[id]))
		case jit.ArgScalar, jit.ArgAnything:
			insns = append(insns, asm.Mov.Imm(r, 0))
		default: // a pointer
			if k == a {
				insns = append(insns, asm.Mov.Reg(r, asm.R6))
			} else {
				insns = append(insns, asm.Mov.Reg(r, asm.R10), asm.Add.Imm(r, -256))
			}
		}
	}
	idx := len(insns)
	insns = append(insns, call(id), asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
	return insns, idx
}

// TestHelperArgBytes: for every pointer argument of every helper of the
// ABI table, the verifier accepts a buffer of exactly the bytes the table
// says the helper touches (Signature.ArgAccess) and refuses one a byte
// short, naming the call's instruction and the helper.
func TestHelperArgBytes(t *testing.T) {
	kinds := map[jit.ArgType]bool{}
	for _, id := range jit.Helpers() {
		sig, _ := jit.HelperSignature(id)
		for a, at := range sig.Args {
			acc, ok := sig.ArgAccess(a, uint64(argSizes[id]), argTarget)
			if !ok {
				continue
			}
			kinds[at] = true
			t.Run(fmt.Sprintf("%s/r%d", sig.Name, a+1), func(t *testing.T) {
				insns, idx := argCall(id, sig, a)
				for _, n := range []uint64{acc.Bytes, acc.Bytes - 1} {
					buf := &jit.Map{Name: "buf", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: uint32(n), MaxEntries: 1}
					p := &jit.Program{Name: sig.Name, Insns: link(insns), Maps: []*jit.Map{buf, argTarget, ringMap}}
					_, err := Verify(p, Options{})
					if n == acc.Bytes {
						if err != nil {
							t.Fatalf("%d-byte buffer (the table's count) refused: %v", n, err)
						}
						continue
					}
					var ve *Error
					if !errors.As(err, &ve) {
						t.Fatalf("%d-byte buffer, one short of %d, accepted (err %v)", n, acc.Bytes, err)
					}
					want := fmt.Sprintf("%s: ", sig.Name)
					if ve.Index != idx || !strings.HasPrefix(ve.Reason, want) || !strings.Contains(ve.Reason, fmt.Sprintf("r%d", a+1)) {
						t.Fatalf("refused as %v; want insn %d, a reason starting %q naming r%d", err, idx, want, a+1)
					}
				}
			})
		}
	}
	for _, at := range []jit.ArgType{jit.ArgMapKey, jit.ArgMapValue, jit.ArgMem, jit.ArgOut8, jit.ArgString, jit.ArgAtomic8} {
		if !kinds[at] {
			t.Errorf("no helper of the table has an argument of type %d", at)
		}
	}
}

// unterminated stores 8 non-zero bytes at r10-8 and points r1 at them.
var unterminated = ins(asm.LoadImm(asm.R1, 0x4141414141414141, asm.DWord), asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
	asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8))

// TestHostileStrings: a string helper given a stack buffer without a NUL
// would copy the bytes past it (local memory of the kernel) to the host.
func TestHostileStrings(t *testing.T) {
	runCases(t, []verifyCase{
		{name: "puts of an 8-byte buffer without a NUL", insns: cat(unterminated, ins(call(jit.HelperPuts), asm.Return())),
			wantErr: "puts: string argument r1", wantIdx: 4},
		{name: "trace_printk of an 8-byte buffer, fmt_size 168", insns: cat(unterminated, ins(asm.Mov.Imm(asm.R2, 168),
			asm.FnTracePrintk.Call(), asm.Return())),
			wantErr: "trace_printk: buffer argument r1", wantIdx: 5},
	})
}

// TestStackStrings: on the stack, a byte known to be 0 ends the string
// (bpf_printk and bpftime's programs build theirs from constants);
// without one the whole window must be written and in the frame.
func TestStackStrings(t *testing.T) {
	sig, _ := jit.HelperSignature(jit.HelperPuts)
	max := int32(sig.MaxLen)
	unknownWindow := func(lo int32) asm.Instructions {
		l := ins(call(jit.HelperGetGlobalTimer))
		for off := lo; off < 0; off++ {
			l = append(l, asm.StoreMem(asm.R10, int16(off), asm.R0, asm.Byte))
		}
		return cat(l, stackPtr(asm.R1, lo), ins(call(jit.HelperPuts), asm.Return()))
	}
	runCases(t, []verifyCase{
		{name: "constant with its NUL", insns: cat(ins(asm.StoreImm(asm.R10, -3, 'h', asm.Byte), asm.StoreImm(asm.R10, -2, 'i', asm.Byte),
			asm.StoreImm(asm.R10, -1, 0, asm.Byte)), stackPtr(asm.R1, -3), ins(call(jit.HelperPuts), asm.Return()))},
		{name: "constant without its NUL", insns: cat(ins(asm.StoreImm(asm.R10, -2, 'h', asm.Byte), asm.StoreImm(asm.R10, -1, 'i', asm.Byte)),
			stackPtr(asm.R1, -2), ins(call(jit.HelperPuts), asm.Return())),
			wantErr: fmt.Sprintf("puts reads up to %d bytes", max), wantIdx: 4},
		{name: "NUL from a register constant", insns: cat(ins(asm.LoadImm(asm.R1, 0x0021216968, asm.DWord), asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord)),
			stackPtr(asm.R1, -8), ins(call(jit.HelperPuts), asm.Return()))},
		{name: "unknown bytes, whole window", insns: unknownWindow(-max)},
		{name: "unknown bytes, a byte short", insns: unknownWindow(-max + 1),
			wantErr: "puts: string argument r1: stack access at offset", wantIdx: int(max) + 2},
		{name: "NUL on one path only", insns: cat(ins(asm.StoreImm(asm.R10, -8, 0x41414141, asm.Word), asm.StoreImm(asm.R10, -4, 0x41414141, asm.Word),
			call(jit.HelperGetGlobalTimer), asm.JEq.Imm(asm.R0, 0, "call"), asm.StoreImm(asm.R10, -1, 0, asm.Byte)),
			ins(asm.Mov.Reg(asm.R1, asm.R10).WithSymbol("call"), asm.Add.Imm(asm.R1, -8), call(jit.HelperPuts), asm.Return())),
			wantErr: "puts: string argument r1", wantIdx: 7},
	})
}
