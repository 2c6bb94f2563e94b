package ptx

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit/conformance"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// emuRun runs f's test entry as one thread in the PTX interpreter, with
// mem placed misalign bytes past an 8-byte boundary, and returns r0.
func emuRun(f *Func, mem []byte, misalign int, setup func(e *emu)) (uint64, *emu, error) {
	return emuRunAt(f, mem, misalign, 0, setup)
}

// emuRunAt is emuRun with every allocation moved up by shift bytes.
func emuRunAt(f *Func, mem []byte, misalign int, shift uint64, setup func(e *emu)) (uint64, *emu, error) {
	e, err := newEmu(TestModule(f))
	if err != nil {
		return 0, nil, err
	}
	e.next += shift
	memR := e.alloc(len(mem)+16, false, "mem")
	copy(memR.data[misalign:], mem)
	res := e.alloc(8, false, "result")
	if setup != nil {
		setup(e)
	}
	if _, err := e.call(TestEntry(f), []uint64{memR.base + uint64(misalign), uint64(len(mem)), res.base}); err != nil {
		return 0, e, err
	}
	return binary.LittleEndian.Uint64(res.data), e, nil
}

// TestConformanceEmulated runs every conformance program through its
// generated PTX in the interpreter above, with the memory aligned and
// misaligned (which exercises the byte-wise paths), and checks r0; then
// again compiled with the verifier's alignment proofs (Options.Verified):
// the memory is the context there, whose accesses keep their run-time
// check, and the emulator faults on any misaligned access that lost it.
func TestConformanceEmulated(t *testing.T) {
	decided := 0 // jumps the proofs compile away: the suite runs them
	defer func() {
		if decided < 100 {
			t.Errorf("only %d decided jumps in the suite: the proofs' branch folding is hardly run", decided)
		}
	}()
	for _, path := range conformanceFiles(t) {
		c, err := conformance.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		res, err := verifier.Verify(p, verifier.Options{CtxSize: len(c.Mem), Helpers: verifier.ConformanceHelpers})
		if err != nil {
			t.Errorf("%s: verifier: %v", filepath.Base(path), err)
			continue
		}
		decided += len(res.Decided)
		for _, o := range []Options{{Conformance: true}, {Conformance: true, Verified: res}} {
			f, err := Compile(p, o)
			if err != nil {
				t.Errorf("%s: %v", filepath.Base(path), err)
				continue
			}
			for _, mis := range []int{0, 1, 3} {
				got, _, err := emuRun(f, c.Mem, mis, nil)
				if err != nil {
					t.Errorf("%s (mem at +%d, proofs %v): %v", filepath.Base(path), mis, o.Verified != nil, err)
					continue
				}
				if got != c.Result {
					t.Errorf("%s (mem at +%d, proofs %v): r0 = %#x, want %#x", filepath.Base(path), mis, o.Verified != nil, got, c.Result)
				}
			}
		}
	}
}
