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
		ctx := make([]byte, opts.CtxSize)
		_, err = interp.Run(p, ctx, &interp.Env{Helpers: map[int32]interp.HelperFunc{
			5: func(c *interp.HelperCall) (uint64, error) { return c.Args[0], nil },
		}})
		if err == nil {
			return
		}
		for _, fault := range memoryFaults {
			if strings.Contains(err.Error(), fault) {
				t.Fatalf("verified program faults in the interpreter: %v\n%v", err, insns)
			}
		}
	})
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
