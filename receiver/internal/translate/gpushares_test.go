package translate

import (
	"math"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// TestGPUShares: two processes' overlapping windows on one GPU (the same
// UUID) are charged so that their GPU time sums to the union, on each
// process's resource, and the GPU's time is the union.
func TestGPUShares(t *testing.T) {
	now := time.Unix(0, realBase+10e9)
	for _, tc := range []struct {
		name string
		emit func(tr *Translator) pmetric.Metrics
	}{
		{"lag passed", func(tr *Translator) pmetric.Metrics { return tr.Metrics(now.Add(3*time.Second), nil) }},
		// The shutdown settles what the lag still holds.
		{"shutdown", func(tr *Translator) pmetric.Metrics { tr.FlushPending(now); return tr.Metrics(now, nil) }},
		// Both processes gone: their windows are all in, none waits.
		{"all gone", func(tr *Translator) pmetric.Metrics {
			tr.Disconnect(1, now)
			tr.Disconnect(2, now)
			return tr.Metrics(now, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkShares(t, now, tc.emit) })
	}
}

// checkShares has two processes' windows overlap and checks what emit
// makes of them.
func checkShares(t *testing.T, now time.Time, emit func(*Translator) pmetric.Metrics) {
	tr := newTr(Options{})
	tr.Connect(1, Peer{PID: 100})
	tr.Connect(2, Peer{PID: 200})
	uuid := [16]byte{1, 2, 3}
	for src := uint32(1); src <= 2; src++ {
		cal := &record.Calibration{MonoNS: 1000, RealtimeNS: realBase + 1000, GPUNS: gpuBase + 1000}
		dev := &record.Device{Device: 0, PID: src * 100, UUID: uuid, SMCount: 132, Name: "mock GPU"}
		for _, r := range []interface{ Append([]byte) []byte }{cal, dev} {
			if err := tr.Handle(src, r.Append(nil), now); err != nil {
				t.Fatal(err)
			}
		}
	}
	ms := uint64(time.Millisecond)
	for _, w := range []struct {
		src        uint32
		start, end uint64
	}{{1, 9000 * ms, 9010 * ms}, {2, 9005 * ms, 9010 * ms}} {
		r := &record.Window{StartNS: w.start, EndNS: w.end, NameHash: 7, Flags: record.WindowNoLaunch}
		if err := tr.Handle(w.src, r.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	md := emit(tr)
	got := map[int64]float64{}
	var device float64
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		pid, _ := rm.Resource().Attributes().Get("process.pid")
		eachResMetric(rm, func(m pmetric.Metric) {
			switch m.Name() {
			case MetricProcessGPUTime:
				dp := m.Sum().DataPoints().At(0)
				if u, _ := dp.Attributes().Get("cuda.device.uuid"); u.Str() != "01020300-0000-0000-0000-000000000000" {
					t.Errorf("uuid %q", u.Str())
				}
				got[pid.Int()] = dp.DoubleValue() * 1e3
			case MetricDeviceGPUTime:
				device = m.Sum().DataPoints().At(0).DoubleValue() * 1e3
			}
		})
	}
	want := map[int64]float64{100: 7.5, 200: 2.5} // 5 ms alone + half of 5 shared
	for pid, w := range want {
		if math.Abs(got[pid]-w) > 1e-6 {
			t.Errorf("pid %d: %.4f ms, want %.4f (all %v)", pid, got[pid], w, got)
		}
	}
	if math.Abs(device-10) > 1e-6 {
		t.Errorf("device time %.4f ms, want the 10 ms union", device)
	}
}

func eachResMetric(rm pmetric.ResourceMetrics, f func(pmetric.Metric)) {
	for j := range rm.ScopeMetrics().Len() {
		sm := rm.ScopeMetrics().At(j).Metrics()
		for k := range sm.Len() {
			f(sm.At(k))
		}
	}
}
