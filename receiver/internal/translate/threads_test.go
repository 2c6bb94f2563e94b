package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// threadSeries returns thread index → value of MetricThreadSeries for the
// kernel named k.
func threadSeries(md pmetric.Metrics, k string) map[int64]int64 {
	out := map[int64]int64{}
	eachMetric(md, func(m pmetric.Metric) {
		if m.Name() != MetricThreadSeries {
			return
		}
		for j := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(j)
			if v, _ := dp.Attributes().Get("cuda.kernel.name"); v.Str() != k {
				continue
			}
			idx, _ := dp.Attributes().Get("cuda.thread.index")
			out[idx.Int()] = dp.IntValue()
		}
	})
	return out
}

func TestPerThreadSeries(t *testing.T) {
	tests := []struct {
		name      string
		perThread bool
		maxSeries int
		grid      uint32 // blocks of 32 threads
		counts    []uint64
		launches  int
		want      map[int64]int64
		dist      uint64 // values in the distribution
	}{
		{name: "off", perThread: false, maxSeries: 64, grid: 1, counts: []uint64{1, 2}, launches: 1, want: map[int64]int64{}, dist: 2},
		{name: "small grid", perThread: true, maxSeries: 64, grid: 2, counts: []uint64{1, 2, 3}, launches: 2,
			want: map[int64]int64{10: 2, 11: 4, 12: 6}, dist: 6},
		{name: "grid too large", perThread: true, maxSeries: 63, grid: 2, counts: []uint64{1, 2}, launches: 1, want: map[int64]int64{}, dist: 2},
		{name: "series bounded", perThread: true, maxSeries: 2, grid: 0, counts: []uint64{5, 6, 7}, launches: 1,
			want: map[int64]int64{10: 5, 11: 6}, dist: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 1, Name: "k"})
			for id := range uint64(tc.launches) {
				id++
				l := &record.Launch{LaunchID: id, PID: 42, EnqueueNS: 1000 * id, ReturnNS: 1000*id + 10, Function: 1,
					Grid: [3]uint32{max(tc.grid, 1), 1, 1}, Block: [3]uint32{32, 1, 1}}
				if tc.grid == 0 { // 1×1 threads
					l.Block[0] = 1
				}
				s.add(l)
				s.add(&record.ThreadCount{LaunchID: id, FirstThread: 10, Counts: tc.counts})
				s.add(&record.Completion{LaunchID: id, CompleteNS: 1000*id + 100})
			}
			tr := newTr(Options{Metrics: MetricOptions{PerThreadSeries: tc.perThread, MaxThreadSeries: tc.maxSeries}})
			feed(t, tr, &s, time.Now())
			md := tr.Metrics(time.Now(), nil)
			got := threadSeries(md, "k")
			if len(got) != len(tc.want) {
				t.Fatalf("series %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("thread %d = %d, want %d", k, got[k], v)
				}
			}
			if d := metricPoints(md)[MetricThreadExecs]["k"]; d != tc.dist {
				t.Errorf("distribution count %d, want %d", d, tc.dist)
			}
		})
	}
}

func TestLastDevice(t *testing.T) {
	var s stream
	s.add(&record.KernelName{Function: 1, Name: "k"})
	s.add(&record.Launch{LaunchID: 1, Function: 1, Device: 3, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	tr := newTr(Options{})
	if d := tr.LastDevice(1); d != 0 {
		t.Fatalf("before any launch: %d", d)
	}
	feed(t, tr, &s, time.Now())
	if d := tr.LastDevice(1); d != 3 {
		t.Fatalf("device %d, want 3", d)
	}
}
