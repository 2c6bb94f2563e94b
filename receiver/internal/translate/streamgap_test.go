package translate

import (
	"math"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// gapLaunch is one launch of the stream-gap cases: its stream and thread,
// host call [enq, ret] and device window [start, end] (mono ns; end 0: the
// launch ran no probe), and its CUresult.
type gapLaunch struct {
	id, stream    uint64
	tid           uint32
	enq, ret      uint64
	start, end    uint64
	result        uint32
	execLater     bool // its window arrives in the second phase
	copyAfter     bool // a memory copy on the same stream follows its launch record
	copyElsewhere bool // a memory copy on another stream follows it
}

// gapWant is what a launch's span says: its stream idle time and host
// wait, each when present.
type gapWant struct {
	hasIdle, hasWait bool
	idle, wait       int64
}

// both: a launch with both figures; waitOnly: host_wait alone (a launch
// that ran no probe); none: neither.
func both(idle, wait int64) gapWant { return gapWant{true, true, idle, wait} }
func waitOnly(wait int64) gapWant   { return gapWant{hasWait: true, wait: wait} }

var none = gapWant{}

// TestStreamGap: a launch's span carries the idle time of its stream
// before it and the host's part of it exactly when the launch counted just
// before it on the same stream ran probes and finished first; host_wait is
// the part of the gap before the launch call returned, clamped to the gap
// when the launch ran probes itself (else it has no stream_idle);
// gpu.cuda.kernel.host_wait.duration counts and sums the same, plus the
// host waits of launches that finished before their predecessor (early).
func TestStreamGap(t *testing.T) {
	l := func(id, stream uint64, enq, ret, start, end uint64) gapLaunch {
		return gapLaunch{id: id, stream: stream, tid: 43, enq: enq, ret: ret, start: start, end: end}
	}
	tests := []struct {
		name     string
		launches []gapLaunch
		want     map[uint64]gapWant // launch id → want (missing: no span expected)
		early    []int64            // host waits recorded in the metric only
	}{
		{"queued before the previous kernel ended", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 1200, 1300, 3100, 4000)},
			map[uint64]gapWant{1: none, 2: both(100, 0)}, nil},
		{"the host launched late", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{1: none, 2: both(700, 600)}, nil},
		{"host wait clamped to the idle time", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 3400, 3600, 3550, 4000)},
			map[uint64]gapWant{2: both(550, 550)}, nil},
		{"started before the previous kernel ended (overlap): no idle, no wait", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 2900, 3200, 2950, 4000)},
			map[uint64]gapWant{1: none, 2: waitOnly(0)}, nil},
		{"three in a row", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 3500, 3600, 3700, 4000), l(3, 7, 3800, 3900, 4050, 5000)},
			map[uint64]gapWant{1: none, 2: both(700, 600), 3: both(50, 0)}, nil},
		{"another stream", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 8, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{1: none, 2: none}, nil},
		{"legacy stream as 0 and 0x1", []gapLaunch{
			l(1, 0, 1000, 1100, 1500, 3000), l(2, streamLegacy, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{2: both(700, 600)}, nil},
		{"per-thread default streams of two threads", []gapLaunch{
			l(1, streamPerThread, 1000, 1100, 1500, 3000),
			{id: 2, stream: streamPerThread, tid: 44, enq: 3500, ret: 3600, start: 3700, end: 4000},
			l(3, streamPerThread, 4500, 4600, 4700, 5000)},
			map[uint64]gapWant{1: none, 2: none, 3: both(1700, 1600)}, nil},
		{"a copy on the stream in between", []gapLaunch{
			{id: 1, stream: 7, tid: 43, enq: 1000, ret: 1100, start: 1500, end: 3000, copyAfter: true},
			l(2, 7, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{1: none, 2: none}, nil},
		{"a copy on another stream in between", []gapLaunch{
			{id: 1, stream: 7, tid: 43, enq: 1000, ret: 1100, start: 1500, end: 3000, copyElsewhere: true},
			l(2, 7, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{2: both(700, 600)}, nil},
		{"an unprobed launch gets host_wait alone, the next one nothing", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 3100, 3200, 0, 0), l(3, 7, 4500, 4600, 4700, 5000)},
			map[uint64]gapWant{1: none, 2: waitOnly(200), 3: none}, nil},
		{"an unprobed launch queued in time", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), l(2, 7, 1800, 2000, 0, 0)},
			map[uint64]gapWant{1: none, 2: waitOnly(0)}, nil},
		{"an unprobed launch that finished before its predecessor: metric only", []gapLaunch{
			{id: 1, stream: 7, tid: 43, enq: 1000, ret: 1100, start: 1500, end: 3000, execLater: true},
			l(2, 7, 3500, 3600, 0, 0)},
			map[uint64]gapWant{1: none, 2: none}, []int64{600}},
		{"a failed launch in between runs nothing", []gapLaunch{
			l(1, 7, 1000, 1100, 1500, 3000), {id: 2, stream: 7, tid: 43, enq: 3100, ret: 3200, result: 1},
			l(3, 7, 3500, 3600, 3700, 4000)},
			map[uint64]gapWant{1: none, 2: none, 3: both(700, 600)}, nil},
		{"the previous launch finished after this one", []gapLaunch{
			{id: 1, stream: 7, tid: 43, enq: 1000, ret: 1100, start: 1500, end: 3000, execLater: true},
			l(2, 7, 3500, 3600, 3700, 4000),
			{id: 3, stream: 7, tid: 43, enq: 4500, ret: 4600, start: 4700, end: 5000, execLater: true}},
			map[uint64]gapWant{1: none, 2: none, 3: both(700, 600)}, []int64{600}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var phases [2]stream
			phases[0].calibrate(0)
			phases[0].add(&record.KernelName{Function: 0xf, Name: "k"})
			for _, g := range tc.launches {
				r := &record.Launch{LaunchID: g.id, PID: 42, TID: g.tid, EnqueueNS: g.enq, ReturnNS: g.ret, Stream: g.stream,
					Function: 0xf, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Result: g.result}
				if g.end == 0 {
					r.Flags = record.LaunchUnprobed
				}
				phases[0].add(r)
				if g.copyAfter || g.copyElsewhere {
					st := g.stream
					if g.copyElsewhere {
						st++
					}
					phases[0].add(&record.Memcpy{Bytes: 64, StartNS: g.ret, EndNS: g.ret + 10, Stream: st, PID: 42, TID: g.tid,
						Kind: record.MemcpyHostToDevice, Flags: record.MemcpyAsync})
				}
				if g.end != 0 {
					p := 0
					if g.execLater {
						p = 1
					}
					phases[p].add(&record.Exec{LaunchID: g.id, StartNS: gpuBase + g.start, EndNS: gpuBase + g.end, Blocks: 4, Threads: 1024})
				}
			}
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Now()
			for i := range phases {
				feed(t, tr, &phases[i], now)
				tr.Expire(now)
				now = now.Add(11 * time.Millisecond)
				tr.Expire(now)
			}
			now = now.Add(time.Second) // the failed launch: no device record comes
			tr.Expire(now)
			tr.Expire(now.Add(2 * time.Hour))
			byID := map[uint64]gapWant{}
			for _, sp := range spanByName(tr.TakeTraces())["k"] {
				a := sp.Attributes()
				id, _ := a.Get("cuda.launch.id")
				idle, ok1 := a.Get("cuda.launch.stream_idle")
				wait, ok2 := a.Get("cuda.launch.host_wait")
				byID[uint64(id.Int())] = gapWant{ok1, ok2, idle.Int(), wait.Int()}
			}
			var n uint64
			var sum float64
			for id, w := range tc.want {
				got, ok := byID[id]
				if !ok {
					t.Errorf("launch %d: no span", id)
					continue
				}
				if got != w {
					t.Errorf("launch %d: %+v, want %+v", id, got, w)
				}
				if w.hasWait {
					n++
					sum += float64(w.wait) / 1e9
				}
			}
			for _, w := range tc.early {
				n++
				sum += float64(w) / 1e9
			}
			hn, hsum := hostWaitHist(tr.Metrics(now, nil))
			if hn != n || math.Abs(hsum-sum) > 1e-12 {
				t.Errorf("%s: count %d sum %g, want %d and %g", MetricHostWait, hn, hsum, n, sum)
			}
		})
	}
}

// hostWaitHist returns the count and sum of gpu.cuda.kernel.host_wait.duration
// over its points.
func hostWaitHist(md pmetric.Metrics) (uint64, float64) {
	var n uint64
	var sum float64
	eachMetric(md, func(m pmetric.Metric) {
		if m.Name() == MetricHostWait {
			for j := range m.ExponentialHistogram().DataPoints().Len() {
				dp := m.ExponentialHistogram().DataPoints().At(j)
				n += dp.Count()
				sum += dp.Sum()
			}
		}
	})
	return n, sum
}
