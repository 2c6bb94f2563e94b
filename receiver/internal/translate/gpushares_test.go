package translate

import (
	"fmt"
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
		name   string
		before func(tr *Translator, srcs []uint32) // every shard's, before any emits
		emit   func(tr *Translator) pmetric.Metrics
	}{
		{"lag passed", nil, func(tr *Translator) pmetric.Metrics { return tr.Metrics(now.Add(3*time.Second), nil) }},
		// The shutdown settles what the lag still holds.
		{"shutdown", func(tr *Translator, _ []uint32) { tr.FlushPending(now) },
			func(tr *Translator) pmetric.Metrics { return tr.Metrics(now, nil) }},
		// Both processes gone: their windows are all in, none waits.
		{"all gone", func(tr *Translator, srcs []uint32) {
			for _, src := range srcs {
				tr.Disconnect(src, now)
			}
		}, func(tr *Translator) pmetric.Metrics { return tr.Metrics(now, nil) }},
	} {
		// The two processes' clients in one Translator, and in two that
		// share a Node (the receiver's poll workers): the same shares.
		for _, shards := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d shards", tc.name, shards), func(t *testing.T) {
				checkShares(t, now, shards, func(trs []*Translator, srcsOf [][]uint32) []pmetric.Metrics {
					if tc.before != nil {
						for i, tr := range trs {
							tc.before(tr, srcsOf[i])
						}
					}
					var mds []pmetric.Metrics
					for _, tr := range trs { // the Node's first goes first, as the receiver does
						mds = append(mds, tc.emit(tr))
					}
					return mds
				})
			})
		}
	}
}

// checkShares has two processes' windows overlap, their clients split
// among the given number of Translators of one Node, and checks what
// emit makes of them.
func checkShares(t *testing.T, now time.Time, shards int, emit func([]*Translator, [][]uint32) []pmetric.Metrics) {
	base := newTr(Options{})
	trs := []*Translator{base}
	node := NewNode(base.o)
	if shards > 1 {
		trs = nil
		for range shards {
			trs = append(trs, NewShard(base.o, node))
		}
	}
	srcsOf := make([][]uint32, len(trs))
	trOf := func(src uint32) *Translator { return trs[int(src-1)%len(trs)] }
	for src := uint32(1); src <= 2; src++ {
		trOf(src).Connect(src, Peer{PID: src * 100})
		i := int(src-1) % len(trs)
		srcsOf[i] = append(srcsOf[i], src)
	}
	uuid := [16]byte{1, 2, 3}
	for src := uint32(1); src <= 2; src++ {
		cal := &record.Calibration{MonoNS: 1000, RealtimeNS: realBase + 1000, GPUNS: gpuBase + 1000}
		dev := &record.Device{Device: 0, PID: src * 100, UUID: uuid, SMCount: 132, Name: "mock GPU"}
		for _, r := range []interface{ Append([]byte) []byte }{cal, dev} {
			if err := trOf(src).Handle(src, r.Append(nil), now); err != nil {
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
		if err := trOf(w.src).Handle(w.src, r.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int64]float64{}
	var device float64
	devices := 0
	for _, md := range emit(trs, srcsOf) {
		collectShares(md, t, got, &device, &devices)
	}
	if devices != 1 {
		t.Errorf("%d device time metrics, want 1 (the Node's first Translator's)", devices)
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

// collectShares adds the process and device GPU times of md to got (ms
// by pid) and device, and counts the device time metrics in devices.
func collectShares(md pmetric.Metrics, t *testing.T, got map[int64]float64, device *float64, devices *int) {
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
				*device = m.Sum().DataPoints().At(0).DoubleValue() * 1e3
				*devices++
			}
		})
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
