package inject

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// TestExitOrder: entry probes run in program order, exit probes in reverse
// (like deferred calls), so kernel_phases, given first, brackets the other
// programs' probes and its warp window covers their timestamps.
func TestExitOrder(t *testing.T) {
	kp := kernelPhases(t)
	ret := bpfObject(t, "kernelretsnoop")
	progs := append(append([]*jit.Program{}, kp...), ret...)
	const kernel = "_Z9vectorAddPKfS0_Pf"
	out, rep, err := Inject(samplePTX(t, "vectoradd", "sm_90"), progs, Options{Kernels: []string{kernel}, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kernels) != 1 {
		t.Fatalf("patched %d kernels", len(rep.Kernels))
	}
	var exits []string
	for _, p := range progs {
		if p.Kind == jit.ProbeExit {
			exits = append(exits, p.Name)
		}
	}
	if len(exits) < 2 {
		t.Fatalf("want at least two exit programs, have %v", exits)
	}
	slices.Reverse(exits)
	if got := rep.Kernels[0].Exit; !slices.Equal(got, exits) {
		t.Fatalf("exit probes run as %v, want %v (reverse of the program order)", got, exits)
	}
	// The PTX runs them in that order too.
	last := -1
	for _, name := range exits {
		i := strings.Index(string(out), "// gpuprobe: "+name+" (inlined)\n")
		if i < 0 || i < last {
			t.Fatalf("call of %s at %d, after %d expected", name, i, last)
		}
		last = i
	}
}
