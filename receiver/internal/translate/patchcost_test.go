package translate

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// patchPoints returns the cold-start points by "metric pid[/attr]".
func patchPoints(md pmetric.Metrics) map[string]float64 {
	got := map[string]float64{}
	sm := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range sm.Len() {
		m := sm.At(i)
		if m.Name() != MetricLaunchesPreswap && m.Name() != MetricPatchTime && m.Name() != MetricPatchCache {
			continue
		}
		for j := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(j)
			pid, _ := dp.Attributes().Get("process.pid")
			k := fmt.Sprintf("%s %d", m.Name(), pid.Int())
			for _, a := range []string{AttrPatchStage, AttrPatchCache} {
				if v, ok := dp.Attributes().Get(a); ok {
					k += "/" + v.Str()
				}
			}
			got[k] = dp.DoubleValue() + float64(dp.IntValue())
		}
	}
	return got
}

// TestPatchCost: launches flagged preswap are counted per process and
// their spans say so; Patch records add their stages' times and cache
// results; a bad Patch record is refused.
func TestPatchCost(t *testing.T) {
	launch := func(id uint64, flags record.LaunchFlags) rec {
		return shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: 10_000 * id, ReturnNS: 10_000*id + 100, Stream: 1,
			Function: 0xf, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: flags})
	}
	tr := winTr(false)
	tr.Connect(1, Peer{PID: 4242})
	now := time.Unix(1000, 0)
	handleAll(t, tr, now, windowsOn, shim(&record.KernelName{Function: 0xf, Name: "k"}),
		launch(1, record.LaunchUnprobed|record.LaunchPreswap), launch(2, record.LaunchUnprobed|record.LaunchPreswap), launch(3, 0),
		shim(&record.Patch{Module: 1, RequestNS: 2_000_000, CompileNS: 40_000_000, PID: 42, Kernels: 3, Cache: record.PatchCacheMiss}),
		shim(&record.Patch{Module: 2, RequestNS: 1_000_000, CompileNS: 500_000, PID: 42, Kernels: 3, Cache: record.PatchCacheHit}),
		shim(&record.Patch{Module: 3, RequestNS: 1_000_000, CompileNS: 9_000_000, PID: 42, Cache: record.PatchCacheCorrupt, Outcome: record.PatchFailed}))
	if got := expireSteps(tr, now); got < 0 {
		t.Fatalf("launches still pending: %d", tr.Pending())
	}
	got := patchPoints(tr.Metrics(now, nil))
	want := map[string]float64{
		"gpuprobe.receiver.launches.preswap 4242":    2,
		"gpuprobe.receiver.patch.time 4242/request":  4e-3,
		"gpuprobe.receiver.patch.time 4242/compile":  49.5e-3,
		"gpuprobe.receiver.patch.cache 4242/hit":     1,
		"gpuprobe.receiver.patch.cache 4242/miss":    1,
		"gpuprobe.receiver.patch.cache 4242/corrupt": 1,
	}
	if len(got) != len(want) {
		t.Errorf("points %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-12 {
			t.Errorf("%s = %g, want %g", k, g, w)
		}
	}
	pre := 0
	for _, s := range index(tr.TakeTraces()).byName["k"] {
		id := attr(s, "cuda.launch.id").(int64)
		if v, ok := s.Attributes().Get("cuda.launch.preswap"); ok {
			pre++
			if !v.Bool() || id == 3 {
				t.Errorf("launch %d: cuda.launch.preswap %v", id, v.AsRaw())
			}
		}
	}
	if pre != 2 {
		t.Errorf("%d spans with cuda.launch.preswap, want 2", pre)
	}
	bad := (&record.Patch{PID: 42, Cache: 9}).Append(nil)
	if err := tr.Handle(1, bad, now); err == nil {
		t.Error("a Patch record with cache result 9 was accepted")
	}
}
