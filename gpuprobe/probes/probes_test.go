package probes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
	"github.com/gpuprobe/gpuprobe/record"
)

// TestObjectsFresh rebuilds every built-in probe set with clang (the flags
// of the go:generate line) and checks that the committed object has the
// same programs, instructions and maps: run `go generate` when it fails.
func TestObjectsFresh(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to rebuild the probe objects: %v", err)
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			obj := filepath.Join(t.TempDir(), name+".o")
			cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
				"-I", filepath.Join("..", "..", "testdata", "bpf"), "-c", name+".c", "-o", obj)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("clang: %v\n%s", err, out)
			}
			b, err := os.ReadFile(obj)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := jit.LoadELFBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			committed, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := describe(fresh), describe(committed); a != b {
				t.Errorf("committed %s.o is stale (run go generate ./gpuprobe/probes):\nfresh:\n%s\ncommitted:\n%s", name, a, b)
			}
		})
	}
}

// describe prints programs, instructions and maps.
func describe(progs []*jit.Program) string {
	s := ""
	for _, p := range progs {
		s += fmt.Sprintf("%s %s %s %q\n%v", p.Name, p.Section, p.Kind, p.Target, p.Insns)
		for _, m := range p.Maps {
			s += fmt.Sprintf("map %+v\n", *m)
		}
	}
	return s
}

// TestKernelPhasesVerifies checks the programs and their maps.
func TestKernelPhasesVerifies(t *testing.T) {
	progs, err := Load(KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]jit.ProbeKind{KernelPhasesEntry: jit.ProbeEntry, KernelPhasesExit: jit.ProbeExit}
	if len(progs) != len(kinds) {
		t.Fatalf("%d programs, want %d", len(progs), len(kinds))
	}
	for _, p := range progs {
		if kinds[p.Name] != p.Kind || p.Target != "*" {
			t.Errorf("program %s: kind %s target %q", p.Name, p.Kind, p.Target)
		}
		if _, err := verifier.Verify(p, verifier.Options{}); err != nil {
			t.Errorf("program %s: %v", p.Name, err)
		}
		for _, m := range p.Maps {
			want := map[string]jit.MapType{KernelPhasesStartMap: jit.MapTypePerWarpArray, KernelPhasesRingMap: jit.MapTypeGPURingbuf}[m.Name]
			if m.Type != want {
				t.Errorf("map %s: type %d, want %d", m.Name, m.Type, want)
			}
		}
	}
	if _, err := Load("nope"); err == nil {
		t.Error("Load(nope) succeeded")
	}
}

// TestKernelPhasesWarp runs the entry and exit programs on one warp in the
// interpreter and checks the single record.Warp the leader writes.
func TestKernelPhasesWarp(t *testing.T) {
	progs, err := Load(KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	var entry, exit *jit.Program
	for _, p := range progs {
		switch p.Name {
		case KernelPhasesEntry:
			entry = p
		case KernelPhasesExit:
			exit = p
		}
	}
	tests := []struct {
		name     string
		lanes    int
		block    [3]uint64
		blockDim [3]uint64
		tid0     [3]uint64 // thread index of lane 0
		warp     uint32
	}{
		{"full warp", 32, [3]uint64{3, 0, 0}, [3]uint64{256, 1, 1}, [3]uint64{64, 0, 0}, 2},
		{"partial warp", 5, [3]uint64{0, 0, 0}, [3]uint64{100, 1, 1}, [3]uint64{96, 0, 0}, 3},
		{"2-D block", 16, [3]uint64{1, 2, 0}, [3]uint64{16, 16, 1}, [3]uint64{0, 6, 0}, 3},
		{"one lane", 1, [3]uint64{7, 1, 1}, [3]uint64{1, 1, 1}, [3]uint64{0, 0, 0}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := &interp.Env{BlockIdx: tc.block, BlockDim: tc.blockDim, GridDim: [3]uint64{8, 4, 2},
				ThreadIdx: tc.tid0, SMID: 17, LaunchID: 0xabc0042}
			now := uint64(1_000_000)
			base.Timer = func() uint64 { return now }
			lanes := interp.WarpLanes(base, nil, tc.lanes)
			if _, err := interp.RunWarp(entry, lanes); err != nil {
				t.Fatal(err)
			}
			// Lane i leaves at 2_000_000 + 37*i (in reverse lane order).
			for i := range lanes {
				exitAt := uint64(2_000_000 + 37*(tc.lanes-1-i))
				lanes[i].Env.Timer = func() uint64 { return exitAt }
			}
			if _, err := interp.RunWarp(exit, lanes); err != nil {
				t.Fatal(err)
			}
			recs, err := base.Maps.Drain(KernelPhasesRingMap)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1 per warp", len(recs))
			}
			var w record.Warp
			if err := w.Decode(recs[0]); err != nil {
				t.Fatal(err)
			}
			want := record.Warp{
				LaunchID:   0xabc0042,
				Block:      [3]uint32{uint32(tc.block[0]), uint32(tc.block[1]), uint32(tc.block[2])},
				Warp:       tc.warp,
				SMID:       17,
				ActiveMask: uint32(uint64(1)<<tc.lanes - 1),
				StartNS:    1_000_000,
				EndNS:      uint64(2_000_000 + 37*(tc.lanes-1)),
				MinExitNS:  2_000_000,
			}
			if w != want {
				t.Errorf("record\n got %+v\nwant %+v", w, want)
			}
		})
	}
}
