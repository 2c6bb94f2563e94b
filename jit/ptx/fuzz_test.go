package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// FuzzCompile decodes random instruction words; the compiler must never
// panic, and every program the verifier accepts must compile to PTX that
// ptxas accepts.
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
		if _, err := verifier.Verify(p, verifier.Options{CtxSize: int(ctxSize)}); err != nil {
			return
		}
		fn, err := Compile(p, Options{Conformance: true})
		if err != nil {
			t.Fatalf("verified program does not compile: %v\n%v", err, insns)
		}
		if !runPtxas {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := Assemble(ctx, TestModule(fn), DefaultArch); err != nil {
			t.Fatalf("ptxas rejects a verified program: %v\n%v", err, insns)
		}
	})
}
