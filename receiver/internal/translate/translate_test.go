package translate

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/receiver/internal/demangle"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const (
	realBase = 1_700_000_000_000_000_000 // realtime of mono 0
	gpuBase  = 50_000_000_000            // gpu time at mono 0
)

// stream builds the records of launches the way the shim and GPU write them.
type stream struct{ b [][]byte }

func (s *stream) add(r interface{ Append([]byte) []byte }) { s.b = append(s.b, r.Append(nil)) }

func (s *stream) calibrate(dev uint32) {
	s.add(&record.Calibration{MonoNS: 1000, RealtimeNS: realBase + 1000, GPUNS: gpuBase + 1000, Device: dev})
}

// launch adds a launch of fn with warps warps, each running 1000 ns from
// gpu (mono) time enq+500, and a completion.
func (s *stream) launch(id, fn uint64, enq uint64, grid, block uint32, warps int, complete bool) {
	s.add(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: enq, ReturnNS: enq + 100, Stream: 7, Function: fn,
		Device: 0, Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{block, 1, 1}})
	for w := range warps {
		st := gpuBase + enq + 500 + uint64(w)
		s.add(&record.Warp{LaunchID: id, Block: [3]uint32{uint32(w), 0, 0}, ActiveMask: 0xffffffff,
			StartNS: st, MinExitNS: st + 900, EndNS: st + 1000})
	}
	if complete {
		s.add(&record.Completion{LaunchID: id, CompleteNS: enq + 3000})
	}
}

func feed(t testing.TB, tr *Translator, s *stream, now time.Time) {
	for i, r := range s.b {
		if err := tr.Handle(1, r, now); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

func newTr(o Options) *Translator {
	if o.Clock == nil {
		// The collector's own reading of realtime − monotonic, as the
		// receiver sets it; calibrations agree with it.
		o.Clock = clock.New()
		o.Clock.SetMonoOffset(realBase)
	}
	o.ProcessName = func(uint32) string { return "trainer" }
	return New(o)
}

func spanByName(td ptrace.Traces) map[string][]ptrace.Span {
	out := map[string][]ptrace.Span{}
	for i := range td.ResourceSpans().Len() {
		ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			out[ss.At(j).Name()] = append(out[ss.At(j).Name()], ss.At(j))
		}
	}
	return out
}

func TestLaunchSpans(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.Device{Device: 0, UUID: [16]byte{1, 2, 3, 4}})
	s.add(&record.KernelName{Function: 0xf, Name: "_Z6vecAddPfS_S_i"})
	s.launch(1, 0xf, 10_000, 2, 64, 4, true)
	tr := newTr(Options{ExpectWarps: true, Demangle: func(string) string { return "vecAdd(float*, float*, float*, int)" }})
	feed(t, tr, &s, time.Now())
	if tr.Pending() != 0 {
		t.Fatalf("%d launches still pending", tr.Pending())
	}
	td := tr.TakeTraces()
	if td.SpanCount() != 5 {
		t.Fatalf("%d spans, want 5", td.SpanCount())
	}
	res := td.ResourceSpans().At(0).Resource().Attributes()
	for k, want := range map[string]any{"process.pid": int64(42), "process.executable.name": "trainer", "service.name": "unknown_service:trainer"} {
		if v, ok := res.Get(k); !ok || v.AsRaw() != want {
			t.Errorf("resource %s = %v, want %v", k, v.AsRaw(), want)
		}
	}
	by := spanByName(td)
	root := by["vecAdd(float*, float*, float*, int)"]
	if len(root) != 1 {
		t.Fatalf("spans: %v", keys(by))
	}
	r := root[0]
	ts := func(mono uint64) pcommon.Timestamp { return pcommon.Timestamp(realBase + mono) }
	want := []struct {
		name       string
		start, end pcommon.Timestamp
	}{
		{SpanLaunchCall, ts(10_000), ts(10_100)},
		{SpanQueued, ts(10_000), ts(10_500)},
		{SpanExecuting, ts(10_500), ts(11_503)},
		{SpanCompletion, ts(11_503), ts(13_000)},
	}
	for _, w := range want {
		got := by[w.name]
		if len(got) != 1 {
			t.Fatalf("%d %s spans", len(got), w.name)
		}
		c := got[0]
		if c.ParentSpanID() != r.SpanID() || c.TraceID() != r.TraceID() {
			t.Errorf("%s is not a child of the launch span", w.name)
		}
		if c.StartTimestamp() != w.start || c.EndTimestamp() != w.end {
			t.Errorf("%s: [%d, %d], want [%d, %d]", w.name, c.StartTimestamp()-realBase, c.EndTimestamp()-realBase, w.start-realBase, w.end-realBase)
		}
	}
	if r.StartTimestamp() != ts(10_000) || r.EndTimestamp() != ts(13_000) {
		t.Errorf("launch span [%d, %d]", r.StartTimestamp()-realBase, r.EndTimestamp()-realBase)
	}
	wantAttrs := map[string]any{
		"cuda.kernel.name": "vecAdd(float*, float*, float*, int)", "cuda.kernel.mangled_name": "_Z6vecAddPfS_S_i",
		"cuda.launch.id": int64(1), "cuda.device.index": int64(0), "cuda.device.uuid": "01020304-0000-0000-0000-000000000000",
		"cuda.stream": int64(7), "cuda.grid.x": int64(2), "cuda.grid.y": int64(1), "cuda.block.x": int64(64),
		"process.pid": int64(42), "thread.id": int64(43), "cuda.warps.observed": int64(4), "cuda.warps.expected": int64(4),
		"cuda.warp.exit_skew.max": int64(100), "cuda.launch.api": "cuLaunchKernel",
	}
	for k, w := range wantAttrs {
		if v, ok := r.Attributes().Get(k); !ok || v.AsRaw() != w {
			t.Errorf("attribute %s = %v, want %v", k, v.AsRaw(), w)
		}
	}
	// The kernel is cuda.kernel.name (OBI's), as on host-call launch
	// spans and the kernel series; code.function.name is a CUDA entry
	// point's, on host-call spans only.
	if v, ok := r.Attributes().Get("code.function.name"); ok {
		t.Errorf("launch span has code.function.name = %v", v.AsRaw())
	}
	if v, _ := r.Attributes().Get("cuda.device.uuid"); strings.HasPrefix(v.Str(), "GPU-") {
		t.Errorf("cuda.device.uuid %q has nvidia-smi's prefix, want OBI's bare UUID", v.Str())
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLaunchLifecycle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name        string
		expectWarps bool
		warps       int
		complete    bool
		advance     time.Duration
		wantPending int
		wantSpans   int
		wantCounter func(c Counters) bool
	}{
		{"all warps and completion", true, 2, true, 0, 0, 5, func(c Counters) bool { return c.LaunchesEmitted == 1 }},
		{"missing warp waits", true, 1, true, 0, 1, 0, func(c Counters) bool { return c.LaunchesEmitted == 0 }},
		{"missing warp after grace", true, 1, true, 50 * time.Millisecond, 0, 5, func(c Counters) bool { return c.LaunchesEmitted == 1 }},
		{"no completion before timeout", true, 2, false, time.Second, 1, 0, func(c Counters) bool { return c.LaunchesExpired == 0 }},
		{"no completion after timeout", true, 2, false, 6 * time.Second, 0, 4, func(c Counters) bool { return c.LaunchesExpired == 1 }},
		{"host only (SASS kernel)", false, 0, true, 0, 0, 3, func(c Counters) bool { return c.LaunchesEmitted == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 1, Name: "k"})
			s.launch(9, 1, 5000, 1, 64, tt.warps, tt.complete)
			tr := newTr(Options{ExpectWarps: tt.expectWarps})
			feed(t, tr, &s, t0)
			tr.Expire(t0.Add(tt.advance))
			if tr.Pending() != tt.wantPending {
				t.Errorf("pending %d, want %d", tr.Pending(), tt.wantPending)
			}
			if n := tr.TakeTraces().SpanCount(); n != tt.wantSpans {
				t.Errorf("%d spans, want %d", n, tt.wantSpans)
			}
			if !tt.wantCounter(tr.Counters()) {
				t.Errorf("counters %+v", tr.Counters())
			}
		})
	}
}

// metricPoints returns name → attribute string → value (int sums, or
// histogram counts).
func metricPoints(md pmetric.Metrics) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	eachMetric(md, func(m pmetric.Metric) {
		pts := out[m.Name()]
		if pts == nil {
			pts = map[string]uint64{}
			out[m.Name()] = pts
		}
		switch m.Type() {
		case pmetric.MetricTypeSum:
			for j := range m.Sum().DataPoints().Len() {
				dp := m.Sum().DataPoints().At(j)
				pts[attrString(dp.Attributes())] += uint64(dp.IntValue())
			}
		case pmetric.MetricTypeExponentialHistogram:
			for j := range m.ExponentialHistogram().DataPoints().Len() {
				dp := m.ExponentialHistogram().DataPoints().At(j)
				pts[attrString(dp.Attributes())] += dp.Count()
			}
		}
	})
	return out
}

func attrString(a pcommon.Map) string {
	if v, ok := a.Get("cuda.kernel.name"); ok {
		return v.Str()
	}
	if v, ok := a.Get("cuda.memcpy.kind"); ok {
		return v.Str()
	}
	return ""
}

func TestMetricsAndFolding(t *testing.T) {
	var s stream
	s.calibrate(0)
	for fn := range uint64(5) {
		s.add(&record.KernelName{Function: fn, Name: fmt.Sprintf("kernel%d", fn)})
	}
	id := uint64(0)
	for fn := range uint64(5) {
		for range fn + 1 { // kernel i launched i+1 times
			id++
			s.launch(id, fn, 1000*id, 1, 32, 1, true)
		}
	}
	s.add(&record.Memcpy{Bytes: 1000, StartNS: 1, EndNS: 11, Kind: record.MemcpyHostToDevice})
	s.add(&record.Memcpy{Bytes: 24, StartNS: 1, EndNS: 5, Kind: record.MemcpyHostToDevice})
	s.add(&record.ThreadCount{LaunchID: 15, Counts: []uint64{1, 2, 3}})
	tr := newTr(Options{MaxKernelNames: 3, ExpectWarps: true})
	feed(t, tr, &s, time.Now())
	got := metricPoints(tr.Metrics(time.Now(), []SelfMetric{{Name: "gpuprobe.receiver.records.read", Unit: "{record}", Value: 7}}))
	want := map[string]map[string]uint64{
		MetricLaunches:                   {"kernel0": 1, "kernel1": 2, "kernel2": 3, OtherKernel: 4 + 5},
		MetricExecDuration:               {"kernel0": 1, "kernel1": 2, "kernel2": 3, OtherKernel: 9},
		MetricQueueDuration:              {"kernel0": 1, "kernel1": 2, "kernel2": 3, OtherKernel: 9},
		MetricWarpDuration:               {"kernel0": 1, "kernel1": 2, "kernel2": 3, OtherKernel: 9},
		MetricWarpExitSkew:               {"kernel0": 1, "kernel1": 2, "kernel2": 3, OtherKernel: 9},
		MetricThreadExecs:                {OtherKernel: 3},
		MetricMemcpyBytes:                {"MemcpyHostToDevice": 1024},
		MetricMemcpyDuration:             {"MemcpyHostToDevice": 2},
		"gpuprobe.receiver.records.read": {"": 7},
	}
	for name, pts := range want {
		for attr, v := range pts {
			if got[name][attr] != v {
				t.Errorf("%s{%s} = %d, want %d", name, attr, got[name][attr], v)
			}
		}
		if len(got[name]) != len(pts) {
			t.Errorf("%s has %d series, want %d: %v", name, len(got[name]), len(pts), got[name])
		}
	}
}

func TestFilterAndSampling(t *testing.T) {
	tests := []struct {
		name      string
		kernels   config.KernelsConfig
		oneIn     uint32
		minDur    time.Duration
		wantRoots int
		wantLaun  uint64
	}{
		{"all", config.KernelsConfig{}, 1, 0, 100, 100},
		{"exclude all", config.KernelsConfig{Exclude: []string{"^k"}}, 1, 0, 0, 0},
		{"one in 10", config.KernelsConfig{}, 10, 0, -10, 100},
		{"min duration drops spans only", config.KernelsConfig{}, 1, time.Second, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := config.NewKernelFilter(tt.kernels)
			if err != nil {
				t.Fatal(err)
			}
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 1, Name: "k"})
			for id := range uint64(100) {
				s.launch(id+1, 1, 1000*(id+1), 1, 32, 1, true)
			}
			tr := newTr(Options{Filter: f, Sampling: SamplingOptions{OneIn: tt.oneIn, MinDuration: tt.minDur}, ExpectWarps: true})
			feed(t, tr, &s, time.Now())
			roots := len(spanByName(tr.TakeTraces())["k"])
			if tt.wantRoots >= 0 && roots != tt.wantRoots {
				t.Errorf("%d launch spans, want %d", roots, tt.wantRoots)
			}
			if tt.wantRoots < 0 && (roots < 1 || roots > 30) { // about 1 in 10 of 100
				t.Errorf("%d launch spans, want about %d", roots, -tt.wantRoots)
			}
			if got := metricPoints(tr.Metrics(time.Now(), nil))[MetricLaunches]["k"]; got != tt.wantLaun {
				t.Errorf("launches metric %d, want %d", got, tt.wantLaun)
			}
		})
	}
}

func TestPendingBounded(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k"})
	for id := range uint64(1000) {
		s.launch(id+1, 1, 1000*(id+1), 1, 32, 0, false) // never complete
	}
	tr := newTr(Options{MaxPendingLaunches: 100, ExpectWarps: true})
	feed(t, tr, &s, time.Now())
	if tr.Pending() != 100 {
		t.Fatalf("pending %d, want 100", tr.Pending())
	}
	if c := tr.Counters(); c.LaunchesEvicted != 900 {
		t.Fatalf("evicted %d, want 900", c.LaunchesEvicted)
	}
}

func TestInvalidRecordCounted(t *testing.T) {
	tr := newTr(Options{})
	bad := (&record.Launch{LaunchID: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{0, 1, 1}}).Append(nil)
	err := tr.Handle(3, bad, time.Now())
	if err == nil || err.Error() != "source 3: record launch: field block_x at offset 76: must be ≥ 1, got 0" {
		t.Fatalf("err = %v", err)
	}
	unknown := []byte{99, 0, 1, 0, 8, 0, 0, 0}
	if err := tr.Handle(3, unknown, time.Now()); err == nil {
		t.Fatal("unknown type accepted")
	}
	if c := tr.Counters(); c.RecordsRead != 2 || c.RecordsInvalid != 2 {
		t.Fatalf("counters %+v", c)
	}
}

// BenchmarkDecodeAggregate measures records/s through Handle (decode, join,
// histograms) with the record mix of launches of 8 warps.
func BenchmarkDecodeAggregate(b *testing.B) {
	var s stream
	s.calibrate(0)
	for fn := range uint64(50) {
		s.add(&record.KernelName{Function: fn, Name: fmt.Sprintf("kernel%d", fn)})
	}
	for id := range uint64(1000) {
		s.launch(id+1, id%50, 1000*(id+1), 2, 128, 8, true)
	}
	now := time.Now()
	b.ResetTimer()
	n := 0
	for i := range b.N {
		tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{OneIn: 1 << 30}})
		for _, r := range s.b {
			_ = tr.Handle(uint32(i), r, now)
		}
		n += len(s.b)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkLaunchesToPdata measures launches/s turned into spans (every
// launch sampled, 4 warps each) and metrics, including TakeTraces.
func BenchmarkLaunchesToPdata(b *testing.B) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "_ZN7cutlass6KernelINS_4gemm6kernel4GemmIfEEEEvNT_6ParamsE"})
	const perBatch = 1000
	for id := range uint64(perBatch) {
		s.launch(id+1, 1, 1000*(id+1), 1, 128, 4, true)
	}
	now := time.Now()
	tr := newTr(Options{ExpectWarps: true, Demangle: demangle.Short})
	b.ResetTimer()
	for i := range b.N {
		for _, r := range s.b {
			_ = tr.Handle(uint32(i), r, now)
		}
		td := tr.TakeTraces()
		if td.SpanCount() != perBatch*5 {
			b.Fatalf("%d spans", td.SpanCount())
		}
		if i%100 == 0 {
			_ = tr.Metrics(now, nil)
		}
	}
	b.ReportMetric(float64(perBatch*b.N)/b.Elapsed().Seconds(), "launches/s")
}

// BenchmarkOverloadMemory feeds 10× the pending limit of never-completing
// launches and reports the heap in use afterwards.
func BenchmarkOverloadMemory(b *testing.B) {
	const limit = 10000
	var s stream
	s.add(&record.KernelName{Function: 1, Name: "k"})
	for id := range uint64(limit * 10) {
		s.launch(id+1, 1, 1000*(id+1), 1, 128, 4, false)
	}
	for range b.N {
		tr := newTr(Options{MaxPendingLaunches: limit, ExpectWarps: true, Sampling: SamplingOptions{OneIn: 1 << 30}})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		feed(b, tr, &s, time.Now())
		_ = tr.TakeTraces()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if tr.Pending() != limit {
			b.Fatalf("pending %d", tr.Pending())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/limit, "heap-B/pending-launch")
		runtime.KeepAlive(tr)
	}
}

// TestFinishWithoutCompletion: the shim writes no completion records; a
// launch whose warps have all reported is emitted after CompletionGrace
// (no completion child), not held until LaunchTimeout.
func TestFinishWithoutCompletion(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 0xf, Name: "k"})
	s.launch(1, 0xf, 10_000, 2, 64, 4, false)
	tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
	now := time.Now()
	feed(t, tr, &s, now)
	steps := []struct {
		at      time.Duration
		pending int
	}{{0, 1}, {5 * time.Millisecond, 1}, {11 * time.Millisecond, 0}}
	for _, st := range steps {
		tr.Expire(now.Add(st.at))
		if tr.Pending() != st.pending {
			t.Fatalf("after %s: %d pending, want %d", st.at, tr.Pending(), st.pending)
		}
	}
	by := spanByName(tr.TakeTraces())
	if len(by[SpanExecuting]) != 1 || len(by[SpanCompletion]) != 0 {
		t.Fatalf("spans %v: want an executing phase and no completion", keys(by))
	}
	if c := tr.Counters(); c.LaunchesExpired != 0 {
		t.Fatalf("counted as expired: %+v", c)
	}
}
