package verifier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
	"github.com/gpuprobe/gpuprobe/jit/interp"
)

// memoryFaults are interpreter errors that a verified program must never
// produce: each one means the verifier let an unsafe access through.
var memoryFaults = []string{
	"out of bounds", "outside the", "null pointer", "not a valid pointer",
	"beyond the value", "crosses the end", "read-only", "map handles are not pointers",
	"register out of range", "invalid opcode", "jump target",
}

// FuzzVerify feeds random instruction bytes through cilium/ebpf's decoder
// into the verifier. The verifier must never panic, must reject with an
// *Error, and every program it accepts must run in the reference
// interpreter without a memory fault.
func FuzzVerify(f *testing.F) {
	for _, insns := range fuzzSeeds(f) {
		var buf bytes.Buffer
		if err := insns.Marshal(&buf, binary.LittleEndian); err == nil {
			f.Add(uint8(16), buf.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, ctxSize uint8, code []byte) {
		insns, err := asm.AppendInstructions(nil, bytes.NewReader(code), binary.LittleEndian, "linux")
		if err != nil || len(insns) > 4096 {
			return
		}
		p := &jit.Program{Name: "fuzz", Insns: insns, Maps: testMaps}
		opts := Options{CtxSize: int(ctxSize % 65), Helpers: ConformanceHelpers, MaxSteps: 200_000}
		_, err = Verify(p, opts)
		if err != nil {
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("rejection is a %T, not an *Error: %v", err, err)
			}
			if ve.Index >= len(insns) || ve.Reason == "" {
				t.Fatalf("bad error %+v", ve)
			}
			return
		}
		runVerified(t, p, opts.CtxSize, &interp.Env{Helpers: map[int32]interp.HelperFunc{
			5: func(c *interp.HelperCall) (uint64, error) { return c.Args[0], nil },
		}})
	})
}

// runVerified runs p, which the verifier accepted, in the interpreter and
// fails t if it makes a memory fault.
func runVerified(t *testing.T, p *jit.Program, ctxSize int, env *interp.Env) {
	t.Helper()
	_, err := interp.Run(p, make([]byte, ctxSize), env)
	if err == nil {
		return
	}
	for _, fault := range memoryFaults {
		if strings.Contains(err.Error(), fault) {
			t.Fatalf("verified program faults in the interpreter: %v\n%v", err, p.Insns)
		}
	}
}

// FuzzVerifyHelpers is FuzzVerify for helper calls: helperProgram turns
// the input into stack stores (known and unknown bytes), map lookups and
// calls of the ABI's helpers with pointers into the stack or a map value
// at offsets and sizes from the input. Every program the verifier
// accepts must run in the interpreter without a memory fault: a helper
// argument the verifier checks for fewer bytes than the helper touches
// shows up as one.
func FuzzVerifyHelpers(f *testing.F) {
	// Indexes of jit.Helpers(): 4 trace_printk, 7 puts.
	for _, seed := range [][]byte{
		{1, 0, 3, 7, 0x07},          // 8 unknown bytes at r10-8, puts(r10-8)
		{1, 0, 0, 3, 0, 3, 7, 0x07}, // the same with a 0 at r10-4
		{1, 0, 3, 4, 0x07, 0xa8},    // trace_printk(r10-8, 168)
		{2, 3, 7, 0x80},             // puts(a value of arr)
		{2, 3, 26, 0x88, 0},         // atomic_min_u64(a value of arr + 8, 0)
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &jit.Program{Name: "fuzz", Insns: link(helperProgram(b)), Maps: testMaps}
		if _, err := Verify(p, Options{CtxSize: 16, MaxSteps: 200_000}); err != nil {
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("rejection is a %T, not an *Error: %v", err, err)
			}
			return
		}
		runVerified(t, p, 16, &interp.Env{})
	})
}

// helperProgram builds a program of at most 16 steps from b, three or so
// bytes each: a known stack byte (often 0), 8 unknown stack bytes, r6 =
// a value of arr, or a call of one of jit.Helpers() (fuzzArg sets its
// arguments). Every path ends at "out" with r0 = 0.
func helperProgram(b []byte) asm.Instructions {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	ids := jit.Helpers()
	var insns asm.Instructions
	haveValue := false
	for n := 0; len(b) > 0 && n < 16; n++ {
		switch next() % 4 {
		case 0:
			off, v := -1-int16(next()%96), next()
			if v < 0x40 {
				v = 0
			}
			insns = append(insns, asm.StoreImm(asm.R10, off, int64(v), asm.Byte))
		case 1:
			insns = append(insns, call(jit.HelperGetGlobalTimer), asm.StoreMem(asm.R10, -8*(1+int16(next()%12)), asm.R0, asm.DWord))
		case 2:
			insns = append(insns, lookup("arr")...)
			insns = append(insns, asm.JEq.Imm(asm.R0, 0, "out"), asm.Mov.Reg(asm.R6, asm.R0))
			haveValue = true
		case 3:
			id := ids[int(next())%len(ids)]
			sig, _ := jit.HelperSignature(id)
			for a, at := range sig.Args {
				insns = append(insns, fuzzArg(at, asm.Register(a+1), next(), haveValue)...)
			}
			insns = append(insns, call(id))
		}
	}
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}

// fuzzArg sets register r for an argument of type at from c: a map, a
// number, a size up to 199 (past the mailbox payload), or a pointer to
// r10-1..r10-128 or, when r6 holds one, into a value of arr.
func fuzzArg(at jit.ArgType, r asm.Register, c byte, haveValue bool) asm.Instructions {
	switch at {
	case jit.ArgNone:
		return nil
	case jit.ArgMap:
		return ins(asm.LoadMapPtr(r, 0).WithReference([]string{"arr", "hash"}[c%2]))
	case jit.ArgRingbuf:
		return ins(asm.LoadMapPtr(r, 0).WithReference("ring"))
	case jit.ArgScalar, jit.ArgAnything:
		return ins(asm.Mov.Imm(r, int32(c)))
	case jit.ArgSize:
		return ins(asm.Mov.Imm(r, int32(c%200)))
	}
	if haveValue && c&0x80 != 0 {
		return ins(asm.Mov.Reg(r, asm.R6), asm.Add.Imm(r, int32(c%24)))
	}
	return stackPtr(r, -1-int32(c%128))
}

// fuzzSeeds are the test programs of this package and the conformance suite.
func fuzzSeeds(f *testing.F) []asm.Instructions {
	seeds := []asm.Instructions{
		cat(lookup("arr"), nullChecked, ins(asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord)), out),
		ins(stdw(asm.R10, -16, 1), stdw(asm.R10, -8, 2), asm.And.Imm(asm.R1, 8), asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Reg(asm.R2, asm.R1), asm.LoadMem(asm.R0, asm.R2, -16, asm.DWord), asm.Return()),
		ins(asm.Mov.Imm(asm.R0, 0), asm.Mov.Imm(asm.R1, 0),
			asm.Add.Reg(asm.R0, asm.R1).WithSymbol("loop"), asm.Add.Imm(asm.R1, 1),
			asm.JLT.Imm(asm.R1, 100, "loop"), asm.Return()),
	}
	for i := range seeds {
		seeds[i] = link(seeds[i])
	}
	files, _ := os.ReadDir(conformanceDir + "/tests")
	for _, e := range files {
		b, err := os.ReadFile(conformanceDir + "/tests/" + e.Name())
		if err != nil {
			continue
		}
		_, src, ok := strings.Cut(string(b), "-- asm\n")
		if !ok {
			continue
		}
		src, _, _ = strings.Cut(src, "\n-- ")
		if insns, err := bpfasm.Assemble(src); err == nil {
			seeds = append(seeds, insns)
		}
	}
	return seeds
}
