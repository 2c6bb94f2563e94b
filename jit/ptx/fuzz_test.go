package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
	"github.com/gpuprobe/gpuprobe/jit/conformance"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// FuzzCompile decodes random instruction words; the compiler must never
// panic, and every program the verifier accepts must compile, with and
// without the verifier's facts, to PTX that ptxas accepts.
func FuzzCompile(f *testing.F) {
	_, progs := conformancePrograms(f)
	// Every 8th conformance program seeds the corpus (all of them go
	// through ptxas in TestConformancePTXAS already; seeds run one ptxas
	// each in plain `go test`).
	for k, p := range progs {
		if k%8 != 0 {
			continue
		}
		var buf bytes.Buffer
		if err := p.Insns.Marshal(&buf, binary.LittleEndian); err == nil {
			f.Add(buf.Bytes(), uint8(8))
		}
	}
	runPtxas := true
	if _, err := PtxasPath(); err != nil {
		runPtxas = false
	}
	f.Fuzz(func(t *testing.T, code []byte, ctxSize uint8) {
		insns, err := bpfasm.Decode(code)
		if err != nil {
			return
		}
		p := &jit.Program{Name: "fuzz", Insns: insns}
		// Whatever the verifier says, compiling must not panic.
		_, _ = Compile(p, Options{Conformance: true})
		res, err := verifier.Verify(p, verifier.Options{CtxSize: int(ctxSize)})
		if err != nil {
			return
		}
		fn, err := Compile(p, Options{Conformance: true})
		if err != nil {
			t.Fatalf("verified program does not compile: %v\n%v", err, insns)
		}
		fv, err := Compile(p, Options{Conformance: true, Verified: res})
		if err != nil {
			t.Fatalf("verified program does not compile with the proofs: %v\n%v", err, insns)
		}
		if !runPtxas {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := Assemble(ctx, TestModule(fn), DefaultArch); err != nil {
			t.Fatalf("ptxas rejects a verified program: %v\n%v", err, insns)
		}
		if _, err := Assemble(ctx, TestModule(fv), DefaultArch); err != nil {
			t.Fatalf("ptxas rejects a verified program compiled with the proofs: %v\n%v", err, insns)
		}
	})
}

// FuzzDifferential runs random verified programs in the reference
// interpreter and, through their PTX (compiled without and with the
// verifier's facts), in the PTX interpreter of the tests: r0 must agree. Programs that call helpers other than the conformance
// suite's are skipped (their results depend on the environment).
func FuzzDifferential(f *testing.F) {
	for k, path := range conformanceFiles(f) {
		if k%4 != 0 {
			continue
		}
		c, err := conformance.ParseFile(path)
		if err != nil {
			f.Fatal(err)
		}
		p, err := c.Program()
		if err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		if err := p.Insns.Marshal(&buf, binary.LittleEndian); err == nil {
			f.Add(buf.Bytes(), c.Mem)
		}
	}
	f.Fuzz(func(t *testing.T, code []byte, mem []byte) {
		if len(mem) > 64 {
			mem = mem[:64]
		}
		if len(mem) == 0 {
			// The emulator passes NULL for an empty context, the
			// interpreter an address: give r1 an address in both, so
			// that a compare of r1 against a number shows up as
			// address-dependent below.
			mem = []byte{0}
		}
		insns, err := bpfasm.Decode(code)
		if err != nil || len(insns) > 256 {
			return
		}
		for _, ins := range insns {
			if ins.IsBuiltinCall() && ins.Constant != conformance.HelperUnwind {
				return
			}
		}
		p := &jit.Program{Name: "fuzz", Insns: insns}
		res, err := verifier.Verify(p, verifier.Options{CtxSize: len(mem)})
		if err != nil {
			return
		}
		want, err := interp.Run(p, append([]byte(nil), mem...), &interp.Env{Helpers: conformance.Helpers()})
		if err != nil {
			t.Skipf("interpreter: %v", err)
		}
		fn, err := Compile(p, Options{Conformance: true})
		if err != nil {
			t.Fatalf("verified program does not compile: %v\n%v", err, insns)
		}
		got, _, err := emuRun(fn, mem, 0, nil)
		if err != nil {
			t.Fatalf("PTX run: %v\n%v", err, insns)
		}
		// A result computed from addresses (verified programs may do
		// arithmetic on pointers) differs between machines: skip those.
		for _, shift := range []uint64{0x123458, 0x7f00_0000_0000} { // nearby, and far up (compares against numbers flip)
			again, _, err := emuRunAt(fn, mem, 0, shift, nil)
			if err != nil {
				t.Fatalf("PTX run at another address: %v\n%v", err, insns)
			}
			if again != got {
				t.Skip("result depends on addresses")
			}
		}
		// The verifier's facts (alignment, dead stores, frame slots in
		// registers, decided jumps) must not change the result: compiled
		// with them, run at the same addresses, r0 is the same.
		fv, err := Compile(p, Options{Conformance: true, Verified: res})
		if err != nil {
			t.Fatalf("verified program does not compile with the proofs: %v\n%v", err, insns)
		}
		if with, _, err := emuRun(fv, mem, 0, nil); err != nil || with != got {
			t.Fatalf("PTX with the proofs: r0 = %#x, %v; without: %#x\n%v", with, err, got, insns)
		}
		if got != want {
			if usesContextValue(insns) {
				t.Skip("r0 may come from the context's address, which differs from the interpreter's")
			}
			t.Fatalf("PTX r0 = %#x, interpreter r0 = %#x\n%v", got, want, insns)
		}
	})
}

// usesContextValue reports whether r1 (the context pointer at entry) is
// used as a value anywhere: in arithmetic, a compare or a store of the
// register, rather than only as the base of a load or store.
func usesContextValue(insns asm.Instructions) bool {
	for _, ins := range insns {
		cls := ins.OpCode.Class()
		reg := ins.OpCode.Source() == asm.RegSource
		switch {
		case cls.IsALU() && (ins.Dst == asm.R1 || reg && ins.Src == asm.R1):
			return true
		case cls.IsJump() && (ins.Dst == asm.R1 || reg && ins.Src == asm.R1):
			return true
		case cls == asm.StXClass && ins.Src == asm.R1:
			return true
		}
	}
	return false
}
