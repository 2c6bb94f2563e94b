package gputime

import (
	"compress/gzip"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture is one mix of scripts/gpu/gputime.sh as an H200 ran it
// (gputime_check.py's GT_FIXTURE): every tenant's windows and its truth.
type fixture struct {
	Mix     string `json:"mix"`
	WallNS  int64  `json:"wall_ns"`
	Tenants []struct {
		Kind     string `json:"kind"`
		Launches int    `json:"launches"`
		TruthNS  int64  `json:"truth_ns"`
	} `json:"tenants"`
	Kernels []string   `json:"kernels"`
	Windows [][4]int64 `json:"windows"` // tenant, kernel, start, end
}

func loadFixture(t *testing.T, path string) fixture {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var fx fixture
	if err := json.NewDecoder(z).Decode(&fx); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(fx.Tenants) == 0 || len(fx.Windows) == 0 || fx.WallNS <= 0 {
		t.Fatalf("%s: %d tenants, %d windows, wall %d ns", path, len(fx.Tenants), len(fx.Windows), fx.WallNS)
	}
	return fx
}

// run turns the fixture into the mock scheduler's run, one bucket for the
// whole mix, so that deliver replays it as the shims would deliver it.
func (fx fixture) run() (simRun, int64) {
	r := simRun{windows: make([][]Window, len(fx.Tenants)), truth: make([][]float64, len(fx.Tenants))}
	var last int64
	for _, w := range fx.Windows {
		r.windows[w[0]] = append(r.windows[w[0]], Window{Proc: uint32(w[0] + 1), Kernel: uint32(w[1] + 1), Start: w[2], End: w[3]})
		last = max(last, w[3])
	}
	for i, ws := range r.windows {
		slices.SortFunc(ws, func(x, y Window) int { return int(x.End - y.End) })
		r.truth[i] = []float64{float64(fx.Tenants[i].TruthNS)}
	}
	return r, (last/100e6 + 1) * 100e6
}

// TestReplayH200 replays the windows an H200 recorded
// (testdata/h200-*.json.gz) through the Attributor and checks each
// tenant's attributed time against its truth (launches × the kernel's
// solo duration with CUDA events), in points of the mix's wall time, and
// that the attributed sum stays within the union.
func TestReplayH200(t *testing.T) {
	paths, _ := filepath.Glob("testdata/h200-*.json.gz")
	if len(paths) == 0 {
		t.Fatal("no testdata/h200-*.json.gz")
	}
	for _, path := range paths {
		fx := loadFixture(t, path)
		name := strings.TrimSuffix(filepath.Base(path), ".json.gz")
		t.Run(name, func(t *testing.T) {
			run, dur := fx.run()
			cum, busy := deliver(New(Options{}), run, dur, dur, 3)
			if len(cum) != 1 {
				t.Fatalf("%d snapshots, want 1", len(cum))
			}
			wall := float64(fx.WallNS) / 1e9
			var worst, attSum, truthSum float64
			for i, tn := range fx.Tenants {
				truth := float64(tn.TruthNS) / 1e9
				errPts := 100 * (cum[0][i] - truth) / wall
				worst = max(worst, math.Abs(errPts))
				attSum += cum[0][i]
				truthSum += truth
				t.Logf("%-11s %5d launches: truth %5.1f%%, attributed %5.1f%% (%+.2f)", tn.Kind, tn.Launches, 100*truth/wall, 100*cum[0][i]/wall, errPts)
			}
			t.Logf("worst %.2f points; truth sum %.2f s, attributed %.2f s, union %.2f s, wall %.2f s", worst, truthSum, attSum, busy[0], wall)
			if attSum > busy[0]*(1+1e-9) || busy[0] > wall {
				t.Errorf("attributed %.3f s, union %.3f s, wall %.3f s", attSum, busy[0], wall)
			}
			bound, ok := replayBound[name]
			if !ok {
				t.Fatalf("no bound for %s", name)
			}
			if worst > bound {
				t.Errorf("worst error %.2f points, bound %.1f", worst, bound)
			}
		})
	}
}

// replayBound bounds each fixture's worst tenant error, in points: what
// the model gives now plus half a point, so that a change that makes it
// worse fails. The target is 2 points; docs/performance.md says why the
// GEMM tenants miss it (their truth, launches × a solo time measured on
// the idle GPU, is below what their windows show even when alone).
var replayBound = map[string]float64{
	"h200-a-three": 4.9, "h200-a-long": 5.4, "h200-a-eight": 3.8,
	"h200-b-three": 4.7, "h200-b-long": 4.2, "h200-b-eight": 3.5,
	"h200-b-solo": 1.0,
}
