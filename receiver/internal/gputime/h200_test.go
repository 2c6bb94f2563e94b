package gputime

import (
	"fmt"
	"math"
	"testing"
)

// The H200 mixes of scripts/gpu/gputime.sh, as measured there (solo
// durations of the kernels, duty cycles): three tenants, the long mix
// with the 16384² GEMM (166 ms) it first had and the ~15 ms one it has
// now, and eight tenants with each. pts bounds every tenant's error over
// the run, in points of wall time.
var h200Mixes = []struct {
	name    string
	tenants []simTenant
	pts     float64
}{
	{"three", []simTenant{{1_411_000, 0.9}, {2_701_000, 0.5}, {142_000, 0.3}}, 2.5},
	{"long166", []simTenant{{166_400_000, 0.8}, {9_120_000, 0.5}, {142_000, 0.4}}, 2.5},
	{"long15", []simTenant{{14_600_000, 0.8}, {9_120_000, 0.5}, {142_000, 0.4}}, 2.5},
	{"eight166", []simTenant{{2_701_000, 0.5}, {1_411_000, 0.9}, {9_120_000, 0.6}, {2_701_000, 0.4},
		{142_000, 0.3}, {142_000, 0.8}, {166_400_000, 0.25}, {166_400_000, 0.2}}, 4},
	{"eight15", []simTenant{{2_701_000, 0.5}, {1_411_000, 0.9}, {9_120_000, 0.6}, {2_701_000, 0.4},
		{142_000, 0.3}, {142_000, 0.8}, {14_600_000, 0.25}, {14_600_000, 0.2}}, 4},
}

// TestModelH200 runs the H200 mixes on the mock scheduler with 1 and 2 ms
// slices for 15 s and checks each tenant's attributed time against the
// truth (mix.pts), logging truth/attributed/error per tenant. With
// skewUS, each tenant's windows are shifted by −skew, 0 or +skew µs (by
// tenant), as clocks of processes that disagree would: the log then
// shows what such offsets do (a fake overlap at each hand-over between
// processes, the union below the truth).
func TestModelH200(t *testing.T) {
	const dur = int64(15e9)
	for _, skewUS := range []int64{0, 50, 200} {
		for _, mix := range h200Mixes {
			for _, slice := range []int64{1e6, 2e6} {
				run := simGPU{sliceNS: slice, switchNS: 20_000, bucketNS: dur, seed: uint64(slice)}.run(mix.tenants, dur)
				for i := range run.windows {
					off := skewUS * 1000 * int64(i%3-1)
					for j := range run.windows[i] {
						run.windows[i][j].Start += off
						run.windows[i][j].End += off
					}
				}
				cum, busy := deliver(New(Options{}), run, dur, dur, 3)
				line := fmt.Sprintf("skew=%dus %s/%dms:", skewUS, mix.name, slice/1e6)
				var truthSum, attSum, worst float64
				for i := range mix.tenants {
					truth := run.truth[i][0] / 1e9
					truthSum += truth
					attSum += cum[0][i]
					errPts := 100 * (cum[0][i] - truth) / (float64(dur) / 1e9)
					worst = max(worst, math.Abs(errPts))
					line += fmt.Sprintf(" %.1f/%.1f(%+.1f)", 100*truth/15, 100*cum[0][i]/15, errPts)
				}
				t.Logf("%s worst %.1f points; truth sum %.2f s, attributed %.2f s, union %.2f s", line, worst, truthSum, attSum, busy[0])
				if skewUS == 0 && worst > mix.pts {
					t.Errorf("%s: worst %.2f points, bound %.1f", line, worst, mix.pts)
				}
				if attSum > busy[0]*(1+1e-9) || busy[0] > float64(dur)/1e9 {
					t.Errorf("%s: attributed %.3f s, union %.3f s, wall %d s", line, attSum, busy[0], dur/1e9)
				}
			}
		}
	}
}
