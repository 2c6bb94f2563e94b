package hostprobe

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf"
)

// TestObjectsPerArch: the committed host-probe objects for x86-64 and
// arm64 hold the same programs and maps, so either architecture attaches
// the same probes (the arm64 one cannot run here; its ELF and BTF load).
func TestObjectsPerArch(t *testing.T) {
	names := func(path string) (progs, maps []string) {
		t.Helper()
		spec, err := ebpf.LoadCollectionSpec(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for n := range spec.Programs {
			progs = append(progs, n)
		}
		for n := range spec.Maps {
			maps = append(maps, n)
		}
		slices.Sort(progs)
		slices.Sort(maps)
		return progs, maps
	}
	xp, xm := names("cudahost_x86_bpfel.o")
	ap, am := names("cudahost_arm64_bpfel.o")
	if len(xp) == 0 || !slices.Equal(xp, ap) || !slices.Equal(xm, am) {
		t.Fatalf("x86-64 programs %v maps %v; arm64 programs %v maps %v", xp, xm, ap, am)
	}
}
