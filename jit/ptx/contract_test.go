package ptx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// contractSizes are the size arguments TestHelperContracts passes:
// trace_printk's is past its MaxLen, so the table's bound is what counts.
var contractSizes = map[jit.HelperID]int32{jit.HelperTracePrintk: 250, jit.HelperPerfEventOutput: 24}

// contractMaps are the maps of TestHelperContracts' programs: a host map
// with odd key and value sizes, so that no other count can pass for
// them, and a ring buffer of 64-byte slots.
var contractMaps = []*jit.Map{
	{Name: "tgt", Type: jit.MapTypeHash, KeySize: 12, ValueSize: 20, MaxEntries: 4},
	{Name: "ring", Type: jit.MapTypeGPURingbuf, MaxEntries: 4 * 64},
}

// otherArg is where the pointer arguments not under test point: low in
// the frame, 8-byte aligned, with room for any of them.
const otherArg = -480

// contractProg fills the frame with 0x41 bytes (no NUL: a string argument
// runs to its bound) and calls helper id with its pointer argument a at
// r10-off and the others at r10+otherArg. It returns the call's index.
func contractProg(id jit.HelperID, sig jit.Signature, a int, off int32) (*jit.Program, int) {
	insns := asm.Instructions{asm.LoadImm(asm.R1, 0x4141414141414141, asm.DWord)}
	for o := int16(-jit.StackSize); o < 0; o += 8 {
		insns = append(insns, asm.StoreMem(asm.R10, o, asm.R1, asm.DWord))
	}
	for k, at := range sig.Args {
		r := asm.Register(k + 1)
		switch at {
		case jit.ArgNone:
		case jit.ArgMap:
			insns = append(insns, mapPtr(r, "tgt"))
		case jit.ArgRingbuf:
			insns = append(insns, mapPtr(r, "ring"))
		case jit.ArgSize:
			insns = append(insns, asm.Mov.Imm(r, contractSizes[id]))
		case jit.ArgScalar, jit.ArgAnything:
			insns = append(insns, asm.Mov.Imm(r, 0))
		default: // a pointer
			o := int32(otherArg)
			if k == a {
				o = -off
			}
			insns = append(insns, asm.Mov.Reg(r, asm.R10), asm.Add.Imm(r, o))
		}
	}
	idx := len(insns)
	insns = append(insns, call(id), asm.Mov.Imm(asm.R0, 0), asm.Return())
	return &jit.Program{Name: "contract", Insns: insns, Maps: contractMaps}, idx
}

// TestHelperContracts walks the ABI table (jit.Helpers, Signature.ArgAccess)
// and checks that the verifier, the interpreter and the compiled PTX agree
// on the bytes every pointer argument of every helper touches. With the
// pointer exactly that many bytes below the frame's top, the verifier
// accepts the program, the interpreter runs it and its PTX runs on the
// emulator (which faults on any byte past the frame), sending the host no
// more than the table's bytes. One byte closer to the top, the verifier
// refuses it at the call, naming the helper and the register, and the
// interpreter faults at the call.
func TestHelperContracts(t *testing.T) {
	args := 0
	for _, id := range jit.Helpers() {
		sig, _ := jit.HelperSignature(id)
		for a := range sig.Args {
			acc, ok := sig.ArgAccess(a, uint64(contractSizes[id]), contractMaps[0])
			if !ok {
				continue
			}
			args++
			t.Run(fmt.Sprintf("%s/r%d", sig.Name, a+1), func(t *testing.T) {
				n := int32(acc.Bytes)
				exact(t, id, sig, a, n)
				short(t, id, sig, a, n-1)
			})
		}
	}
	if args < 21 {
		t.Errorf("the table has %d pointer arguments, want at least 21", args)
	}
}

// exact checks that the program with argument a at r10-n runs everywhere.
func exact(t *testing.T, id jit.HelperID, sig jit.Signature, a int, n int32) {
	t.Helper()
	p, _ := contractProg(id, sig, a, n)
	res, err := verifier.Verify(p, verifier.Options{})
	if err != nil {
		t.Fatalf("%d bytes below r10 (the table's count) refused: %v", n, err)
	}
	if _, err := interp.Run(p, nil, &interp.Env{Out: io.Discard}); err != nil {
		t.Fatalf("interpreter, %d bytes below r10: %v", n, err)
	}
	f, err := Compile(p, Options{Verified: res})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	payload, host, err := emuContract(f)
	if err != nil {
		t.Fatalf("compiled code, %d bytes below r10: %v", n, err)
	}
	if want := readBytes(id, sig); host && payload != want {
		t.Errorf("compiled code sent %d payload bytes to the host, the table says %d", payload, want)
	}
}

// short checks that the program with argument a at r10-n, one byte too
// close to the frame's top, is refused at the call and faults there.
func short(t *testing.T, id jit.HelperID, sig jit.Signature, a int, n int32) {
	t.Helper()
	p, idx := contractProg(id, sig, a, n)
	_, err := verifier.Verify(p, verifier.Options{})
	var ve *verifier.Error
	if !errors.As(err, &ve) {
		t.Fatalf("%d bytes below r10, one short, accepted (err %v)", n, err)
	}
	if ve.Index != idx || !strings.HasPrefix(ve.Reason, sig.Name+": ") || !strings.Contains(ve.Reason, fmt.Sprintf("r%d", a+1)) {
		t.Fatalf("refused as %v; want insn %d and a reason starting %q naming r%d", err, idx, sig.Name+": ", a+1)
	}
	_, err = interp.Run(p, nil, &interp.Env{Out: io.Discard})
	at := fmt.Sprintf("insn %d", idx)
	if err == nil || !strings.HasPrefix(err.Error(), at+":") && !strings.HasPrefix(err.Error(), at+" (") {
		t.Fatalf("interpreter, %d bytes below r10: %v; want a fault at insn %d", n, err, idx)
	}
}

// readBytes is what the helper reads through its pointer arguments by
// the table: what a host call copies into the mailbox (the host map
// helpers: key, then value; puts and trace_printk: their text).
func readBytes(id jit.HelperID, sig jit.Signature) int {
	total := 0
	for a := range sig.Args {
		if acc, ok := sig.ArgAccess(a, uint64(contractSizes[id]), contractMaps[0]); ok && !acc.Write {
			total += int(acc.Bytes)
		}
	}
	return total
}

// emuContract runs f on the emulator with a one-slot mailbox whose host
// answers 0 and a ring of four 64-byte slots, and returns the bytes of
// the host-call payload it sent; host says whether f makes host calls.
func emuContract(f *Func) (payload int, host bool, err error) {
	le := binary.LittleEndian
	_, host = f.Global(GlobalMailbox, "")
	_, _, err = emuRun(f, nil, 0, func(e *emu) {
		if host {
			mb, _ := emuMailbox(e, f, 1, true)
			e.hook = (&emuHost{mb: mb, n: 1, ret: func(s []byte) int64 {
				payload = int(le.Uint32(s[mslotPayloadLen:]))
				return 0
			}}).poll
		}
		if _, ok := f.Global(GlobalMap, "ring"); ok {
			r := e.alloc(dataOffset+4*(64+8), false, "ring")
			le.PutUint32(r.data[hdrMaxEntries:], 4)
			le.PutUint32(r.data[hdrStride:], 64)
			setGlobal(e, f, GlobalMap, "ring", r.base)
		}
	})
	return payload, host, err
}
