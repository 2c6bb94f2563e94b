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
				"-I", filepath.Join("..", "..", "jit", "include"), "-c", name+".c", "-o", obj)
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
			want := map[string]jit.MapType{KernelPhasesBlockMap: jit.MapTypePerBlockArray, KernelPhasesTableMap: jit.MapTypeGPUArray,
				KernelPhasesRingMap: jit.MapTypeGPURingbuf}[m.Name]
			if m.Type != want {
				t.Errorf("map %s: type %d, want %d", m.Name, m.Type, want)
			}
			if m.Name == KernelPhasesTableMap && m.MaxEntries != KernelPhasesSlots*65 {
				t.Errorf("map %s: %d cells, want KernelPhasesSlots × 65 = %d (KP_SLOTS and KernelPhasesSlots differ)", m.Name, m.MaxEntries, KernelPhasesSlots*65)
			}
		}
	}
	if _, err := Load("nope"); err == nil {
		t.Error("Load(nope) succeeded")
	}
}

// TestKernelPhasesExec runs the entry and exit programs over whole grids
// in the interpreter, warp by warp, blocks interleaved and warps exiting
// in scrambled order (some in two divergent halves), and checks the one
// record.Exec the launch's last block writes: the earliest block start
// (the first warp of a block to enter, not thread 0's), the latest exit, the blocks and threads. A second
// launch that reuses the slot (launch id + KernelPhasesSlots) must find it
// reset.
func TestKernelPhasesExec(t *testing.T) {
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
		grid     [3]uint64
		blockDim [3]uint64
	}{
		{"one block, one lane", [3]uint64{1, 1, 1}, [3]uint64{1, 1, 1}},
		{"partial last warp", [3]uint64{3, 1, 1}, [3]uint64{100, 1, 1}},
		{"2-D grid and block", [3]uint64{5, 3, 1}, [3]uint64{16, 6, 1}},
		{"more blocks than stripes", [3]uint64{70, 2, 1}, [3]uint64{64, 1, 1}},
		{"3-D", [3]uint64{2, 2, 3}, [3]uint64{8, 4, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			maps := interp.NewMaps()
			// The second launch takes the first one's slot after it,
			// and finds its cells reset.
			for run, lid := range []uint64{0xabc0042, 0xabc0042 + KernelPhasesSlots} {
				blocks := tc.grid[0] * tc.grid[1] * tc.grid[2]
				bt := tc.blockDim[0] * tc.blockDim[1] * tc.blockDim[2]
				base := uint64(1_000_000 * (run + 1))
				type warp struct {
					lanes []interp.Lane
					block uint64
				}
				var warps []warp
				// Entries: warp w of block b reads the timer at
				// base + 10*b + (warps-1-w): the block's last warp
				// enters first (below) and is its earliest start, so
				// a start taken from thread 0's warp would be late.
				nw := (bt + 31) / 32
				for b := range blocks {
					idx := [3]uint64{b % tc.grid[0], b / tc.grid[0] % tc.grid[1], b / (tc.grid[0] * tc.grid[1])}
					for w := uint64(0); w*32 < bt; w++ {
						n := int(min(32, bt-32*w))
						at := base + 10*b + (nw - 1 - w)
						env := &interp.Env{BlockIdx: idx, BlockDim: tc.blockDim, GridDim: tc.grid, LaunchID: lid, Maps: maps,
							Timer: func() uint64 { return at }}
						lanes := interp.WarpLanes(env, nil, n)
						for i := range lanes {
							tl := 32*w + uint64(i)
							lanes[i].Env.ThreadIdx = [3]uint64{tl % tc.blockDim[0], tl / tc.blockDim[0] % tc.blockDim[1], tl / (tc.blockDim[0] * tc.blockDim[1])}
						}
						warps = append(warps, warp{lanes, b})
					}
				}
				// Interleave the blocks' entries: the last warp of every
				// block enters first.
				for i := len(warps) - 1; i >= 0; i-- {
					if _, err := interp.RunWarp(entry, warps[i].lanes); err != nil {
						t.Fatal(err)
					}
				}
				// Exits in a scrambled order; every third warp exits in
				// two halves (divergent exits). Exit times grow with the
				// order, the last one is the launch's end.
				var end uint64
				order := make([]int, len(warps))
				for i := range order {
					order[i] = (i*7 + 3) % len(warps)
				}
				if !isPermutation(order) {
					for i := range order {
						order[i] = len(warps) - 1 - i
					}
				}
				for k, i := range order {
					at := base + 500_000 + uint64(k)*3
					end = at
					for j := range warps[i].lanes {
						warps[i].lanes[j].Env.Timer = func() uint64 { return at }
					}
					ls := warps[i].lanes
					if k%3 == 0 && len(ls) > 1 {
						if _, err := interp.RunWarp(exit, ls[:len(ls)/2]); err != nil {
							t.Fatal(err)
						}
						ls = ls[len(ls)/2:]
					}
					if _, err := interp.RunWarp(exit, ls); err != nil {
						t.Fatal(err)
					}
				}
				recs, err := maps.Drain(KernelPhasesRingMap)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 1 {
					t.Fatalf("run %d: %d records, want 1 per launch", run, len(recs))
				}
				var e record.Exec
				if err := e.Decode(recs[0]); err != nil {
					t.Fatal(err)
				}
				want := record.Exec{LaunchID: lid, StartNS: base, EndNS: end, Blocks: blocks, Threads: blocks * bt}
				if e != want {
					t.Errorf("run %d: record\n got %+v\nwant %+v", run, e, want)
				}
			}
		})
	}
}

func isPermutation(p []int) bool {
	seen := make([]bool, len(p))
	for _, v := range p {
		if v < 0 || v >= len(p) || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}
