package interp

import (
	"bytes"
	"encoding/binary"

	"github.com/cilium/ebpf/asm"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
)

// FuzzRun runs every instruction stream the decoder accepts: a run may
// fail with an *Error, but it must never panic or hang.
func FuzzRun(f *testing.F) {
	for _, src := range []string{
		"mov %r0, 1\nexit",
		"ldxdw %r0, [%r1+0]\nexit",
		"mov %r1, 0\nloop:\nadd %r1, 1\nja loop",
		"call local f\nexit\nf:\nstdw [%r10-8], 1\nexit",
		"lock fetch add [%r10-8], %r1\nexit",
	} {
		insns, err := bpfasm.Assemble(src)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := Prepare(&jit.Program{Insns: insns}); err != nil {
			f.Fatal(err)
		}
		f.Add(encode(f, insns))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		insns, err := bpfasm.Decode(b)
		if err != nil {
			return
		}
		p := &jit.Program{Insns: insns}
		_, err = Run(p, make([]byte, 16), &Env{})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T %v is not an *interp.Error", err, err)
			}
		}
	})
}

func encode(tb testing.TB, insns asm.Instructions) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
