package translate

import (
	"slices"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// TestDurationHistogramKind checks that MetricOptions.DurationBounds turns
// the duration histograms, and only them, into explicit-bucket ones.
func TestDurationHistogramKind(t *testing.T) {
	bounds := []float64{500e-9, 2e-6, 1e-3}
	tests := []struct {
		name   string
		bounds []float64
		want   map[string]pmetric.MetricType
	}{
		{"exponential", nil, map[string]pmetric.MetricType{
			MetricExecDuration:   pmetric.MetricTypeExponentialHistogram,
			MetricWarpDuration:   pmetric.MetricTypeExponentialHistogram,
			MetricMemcpyDuration: pmetric.MetricTypeExponentialHistogram,
		}},
		{"explicit", bounds, map[string]pmetric.MetricType{
			MetricExecDuration:   pmetric.MetricTypeHistogram,
			MetricQueueDuration:  pmetric.MetricTypeHistogram,
			MetricWarpDuration:   pmetric.MetricTypeHistogram,
			MetricWarpExitSkew:   pmetric.MetricTypeHistogram,
			MetricMemcpyDuration: pmetric.MetricTypeHistogram,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 0xf, Name: "k"})
			s.launch(1, 0xf, 10_000, 2, 64, 4, true)
			s.add(&record.Memcpy{Bytes: 8, StartNS: 20_000, EndNS: 21_500, PID: 42})
			tr := newTr(Options{ExpectWarps: true, Metrics: MetricOptions{DurationBounds: tt.bounds}})
			feed(t, tr, &s, time.Now())
			got := map[string]pmetric.Metric{}
			md := tr.Metrics(time.Now(), nil)
			for i := range md.ResourceMetrics().Len() {
				ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
				for j := range ms.Len() {
					got[ms.At(j).Name()] = ms.At(j)
				}
			}
			for name, typ := range tt.want {
				m, ok := got[name]
				if !ok || m.Type() != typ {
					t.Errorf("%s: %v (present %v), want %v", name, m.Type(), ok, typ)
				}
			}
			// thread executions are counts: exponential whatever the bounds.
			if m, ok := got[MetricThreadExecs]; ok && m.Type() != pmetric.MetricTypeExponentialHistogram {
				t.Errorf("%s: %v", MetricThreadExecs, m.Type())
			}
			if tt.bounds == nil {
				return
			}
			// 4 warps of 1000 ns each: all in (500 ns, 2 µs]; the copy's 1.5 µs too.
			for name, want := range map[string][]uint64{
				MetricWarpDuration:   {0, 4, 0, 0},
				MetricMemcpyDuration: {0, 1, 0, 0},
			} {
				dp := got[name].Histogram().DataPoints().At(0)
				if c := dp.BucketCounts().AsRaw(); !slices.Equal(c, want) || dp.ExplicitBounds().Len() != len(bounds) {
					t.Errorf("%s: buckets %v over %v, want %v", name, c, dp.ExplicitBounds().AsRaw(), want)
				}
			}
		})
	}
}
