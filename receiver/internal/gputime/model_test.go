package gputime

import (
	"fmt"
	"math"
	"testing"
)

// The mixes of the model test: the measured three tenants, one
// with kernels longer than a time slice, and eight tenants.
// pts is the bound on each share's error, by time slice: the target is 2
// points; what misses it says why (the report of each run logs its
// worst).
var modelMixes = []struct {
	name    string
	tenants []simTenant
	pts     map[int64]float64
}{
	// 1 ms slices: a 20 µs context switch per slice is 2% of the GPU,
	// charged to the tenants, not in their truth.
	{"three", []simTenant{{1_440_000, 0.9}, {2_750_000, 0.5}, {137_000, 0.3}}, map[int64]float64{1e6: 2.5}},
	// Two kernels longer than a slice that never run alone: no solo
	// estimate, equal shares of their overlaps, but the one whose window
	// opens and closes an overlap ran at both its edges: up to 5 points
	// with 4 ms slices.
	{"long", []simTenant{{12_000_000, 0.8}, {25_000_000, 0.5}, {500_000, 0.4}}, map[int64]float64{2e6: 3, 4e6: 5.5}},
	{"eight", []simTenant{
		{1_440_000, 0.9}, {2_750_000, 0.5}, {137_000, 0.3}, {400_000, 0.6},
		{5_000_000, 0.25}, {90_000, 0.8}, {800_000, 0.4}, {11_000_000, 0.2}}, map[int64]float64{1e6: 2.5}},
}

// TestModelTimeSlicing checks, for each mix and time slice, that each
// tenant's share of each 10 s window is within 2 points (mix.pts) of the truth of
// the mock scheduler, and that attributed ≤ union ≤ wall.
func TestModelTimeSlicing(t *testing.T) {
	const bucket, dur = int64(10e9), int64(30e9)
	for _, mix := range modelMixes {
		for _, slice := range []int64{1e6, 2e6, 4e6} {
			t.Run(fmt.Sprintf("%s/slice=%dms", mix.name, slice/1e6), func(t *testing.T) {
				run := simGPU{sliceNS: slice, switchNS: 20_000, bucketNS: bucket, seed: uint64(slice)}.run(mix.tenants, dur)
				a := New(Options{})
				cum, busy := deliver(a, run, bucket, dur, 3)
				if len(cum) != int(dur/bucket) {
					t.Fatalf("%d windows of 10 s, want %d", len(cum), dur/bucket)
				}
				var worst float64
				bound := 2.0
				if b, ok := mix.pts[slice]; ok {
					bound = b
				}
				for b := range cum {
					var sum, prevBusy float64
					if b > 0 {
						prevBusy = busy[b-1]
					}
					for i := range mix.tenants {
						got := cum[b][i]
						if b > 0 {
							got -= cum[b-1][i]
						}
						sum += got
						truth := run.truth[i][b] / 1e9
						errPts := 100 * (got - truth) / (float64(bucket) / 1e9)
						worst = max(worst, math.Abs(errPts))
						if math.Abs(errPts) > bound {
							t.Errorf("window %d tenant %d: attributed %.3f s, truth %.3f s: %+.2f points", b, i, got, truth, errPts)
						}
					}
					union := busy[b] - prevBusy
					if sum > union*(1+1e-9) || union > float64(bucket)/1e9*(1+1e-9) {
						t.Errorf("window %d: attributed %.4f s, union %.4f s, wall %d s", b, sum, union, bucket/1e9)
					}
				}
				var naive float64
				for i := range run.windows {
					for _, w := range run.windows[i] {
						naive += float64(w.End - w.Start)
					}
				}
				t.Logf("worst %.2f points; windows sum %.1f s in %d s", worst, naive/1e9, dur/1e9)
			})
		}
	}
}

// TestModelSolo checks that a process alone gets its windows' sum, within 1%.
func TestModelSolo(t *testing.T) {
	run := simGPU{sliceNS: 2e6, switchNS: 20_000, bucketNS: 10e9, seed: 1}.run([]simTenant{{1_440_000, 0.7}}, 20e9)
	a := New(Options{})
	cum, _ := deliver(a, run, 10e9, 20e9, 5)
	var sum float64
	for _, w := range run.windows[0] {
		if w.End <= 20e9 {
			sum += float64(w.End-w.Start) / 1e9
		} else if w.Start < 20e9 {
			sum += float64(20e9-w.Start) / 1e9
		}
	}
	got := cum[len(cum)-1][0]
	if math.Abs(got-sum) > 0.01*sum {
		t.Fatalf("solo: attributed %.4f s, windows %.4f s", got, sum)
	}
}
