package shim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/record"
)

// TestWindowsGraphWhole: a graph launch's kernels get one window each
// (GRAPH, named by the launch's first node record and their kernel's name
// hash) with windows::graphs node, and with graph one window of the whole
// launch (GRAPH|GRAPH_EXEC, name hash 0) from the MOCK CUPTI's graph
// trace, spanning its nodes, and none of their own;
// GPUPROBE_GRAPH_WINDOWS in the application's environment overrides the
// collector's choice.
func TestWindowsGraphWhole(t *testing.T) {
	b := binaries(t)
	for _, tc := range []struct{ name, graphs, env, mode string }{
		{"node", config.WindowGraphsNode, "", "node"},
		{"graph", config.WindowGraphsWhole, "", "graph"},
		{"env graph over node", config.WindowGraphsNode, "graph", "graph"},
		{"env node over graph", config.WindowGraphsWhole, "node", "node"},
	} {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Windows.Graphs, cfg.PollInterval = tc.graphs, 10*time.Millisecond
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			a := startAgent(t, 256, 1024, agent.Options{Settings: cfg.AgentSettings()})
			env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_GRAPH_WINDOWS="+tc.env, "GPUPROBE_TRACE=1")
			_, errOut, err := run(t, b, env, b.program("cudart"), "cudart", "graph")
			if err != nil {
				t.Fatalf("run: %v\n%s", err, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			// Two launches of a two-node graph: four node records, the
			// first of each launch naming it.
			var firsts []record.Launch
			for i, l := range st.launches {
				if l.API != record.APIGraphLaunch {
					t.Fatalf("launch %d: API %v, want cuGraphLaunch", i, l.API)
				}
				if i%2 == 0 {
					firsts = append(firsts, l)
				}
			}
			if len(st.launches) != 4 {
				t.Fatalf("%d launch records, want 4", len(st.launches))
			}
			want, got := map[string]int{}, map[string]int{}
			for i, l := range st.launches {
				first := firsts[i/2].LaunchID
				switch {
				case mode == "node":
					want[key(first, record.NameHash(st.names[l.Function]), record.WindowGraph)]++
				case i%2 == 0:
					want[key(first, 0, record.WindowGraph|record.WindowGraphExec)]++
				}
			}
			for _, w := range st.windows {
				got[key(w.LaunchID, w.NameHash, w.Flags)]++
				if w.EndNS <= w.StartNS {
					t.Errorf("window %+v: not timed", w)
				}
				if mode == "graph" && w.EndNS-w.StartNS < 1000 {
					t.Errorf("whole window %+v: shorter than a node (1 us)", w)
				}
			}
			if len(got) != len(want) {
				t.Errorf("windows %v, want %v", got, want)
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("window %s: %d, want %d (all: %v)", k, got[k], n, got)
				}
			}
			if word := map[string]string{"node": "by node", "graph": "whole"}[mode]; !strings.Contains(errOut, "graphs timed "+word) {
				t.Errorf("the trace does not say graphs are timed %s:\n%s", word, errOut)
			}
		})
	}
}

// key names a window by launch id, name hash and flags.
func key(id uint64, hash uint32, flags record.WindowFlags) string {
	return fmt.Sprintf("%d/%#x/%v", id, hash, flags)
}
