package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// policyLaunch adds launch id of kernel fn of process pid: one warp
// executing execNS from gpu time enq+500, CUresult result, and a
// completion.
func (s *stream) policyLaunch(id, fn, enq uint64, pid, result uint32, execNS uint64) {
	s.add(&record.Launch{LaunchID: id, PID: pid, TID: pid + 1, EnqueueNS: enq, ReturnNS: enq + 100, Stream: 7,
		Function: fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Result: result})
	st := gpuBase + enq + 500
	s.add(&record.Warp{LaunchID: id, ActiveMask: 0xffffffff, StartNS: st, MinExitNS: st + execNS, EndNS: st + execNS})
	s.add(&record.Completion{LaunchID: id, CompleteNS: enq + 1000 + execNS})
}

// reasonCounts returns the roots of td by their gpuprobe.sampling.reason.
func reasonCounts(td ptrace.Traces) map[string]int {
	out := map[string]int{}
	for i := range td.ResourceSpans().Len() {
		ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			if v, ok := ss.At(j).Attributes().Get(AttrSamplingReason); ok {
				out[v.Str()]++
			}
		}
	}
	return out
}

// policyCounts returns the points of the trace policy's self-metrics,
// "kept/<reason>" and "out/<reason>".
func policyCounts(md pmetric.Metrics) map[string]int64 {
	out := map[string]int64{}
	eachMetric(md, func(m pmetric.Metric) {
		prefix := map[string]string{MetricTracesKept: "kept/", MetricTracesSampledOut: "out/"}[m.Name()]
		if prefix == "" {
			return
		}
		for i := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(i)
			r, _ := dp.Attributes().Get(AttrSamplingReason)
			out[prefix+r.Str()] += dp.IntValue()
		}
	})
	return out
}

// TestTracePolicyHead launches two kernels 100 times each, in one second
// then in the next: the head bounds keep what their buckets allow, the
// refusals are counted by the bucket that refused, and the metrics count
// every launch, its execution time included.
func TestTracePolicyHead(t *testing.T) {
	tests := []struct {
		name string
		o    TracePolicyOptions
		kept int // in two seconds
		out  map[string]int64
	}{
		{"no limit", TracePolicyOptions{}, 400, map[string]int64{}},
		{"per kernel", TracePolicyOptions{PerKernel: 1}, 4, map[string]int64{"out/kernel": 396}},
		{"per kernel and process", TracePolicyOptions{PerKernel: 10, PerProcess: 5}, 10,
			map[string]int64{"out/process": 390}}, // the process's bucket empties first
		{"node", TracePolicyOptions{PerNode: 3}, 6, map[string]int64{"out/node": 394}},
		{"fraction", TracePolicyOptions{PerKernel: 0.5}, 2, map[string]int64{"out/kernel": 398}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(5000, 0)
			tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{Traces: tt.o}})
			id := uint64(0)
			for range 2 {
				var s stream
				s.calibrate(0)
				s.add(&record.KernelName{Function: 1, Name: "a"})
				s.add(&record.KernelName{Function: 2, Name: "b"})
				for range 100 {
					for fn := range uint64(2) {
						id++
						s.policyLaunch(id, fn+1, 10_000*id, 42, 0, 1000)
					}
				}
				feed(t, tr, &s, now)
				now = now.Add(time.Second)
			}
			if got := reasonCounts(tr.TakeTraces()); got["head"] != tt.kept || len(got) > 1 {
				t.Errorf("kept traces by reason %v, want head: %d", got, tt.kept)
			}
			md := tr.Metrics(now, nil)
			pts := metricPoints(md)
			for _, k := range []string{"a", "b"} {
				if pts[MetricLaunches][k] != 200 || pts[MetricExecDuration][k] != 200 {
					t.Errorf("kernel %s: %d launches, %d execution times, want 200 each",
						k, pts[MetricLaunches][k], pts[MetricExecDuration][k])
				}
			}
			got := policyCounts(md)
			if got["kept/head"] != int64(tt.kept) {
				t.Errorf("traces.kept{head} = %d, want %d", got["kept/head"], tt.kept)
			}
			for k, v := range tt.out {
				if got[k] != v {
					t.Errorf("traces.sampled_out{%s} = %d, want %d (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// TestTracePolicyAnomalies: with a head bound of one trace a second of
// the process, failed and slow launches are kept within the anomaly
// bounds, then within the head bound, and say why.
func TestTracePolicyAnomalies(t *testing.T) {
	now := time.Unix(5000, 0)
	tr := newTr(Options{ExpectWarps: true,
		Sampling: SamplingOptions{Traces: TracePolicyOptions{PerProcess: 1, AnomaliesPerProcess: 3, AnomaliesPerNode: 10, SlowFactor: 4}}})
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k"})
	id := uint64(0)
	add := func(n int, result uint32, execNS uint64) {
		for range n {
			id++
			s.policyLaunch(id, 1, 100_000*id, 42, result, execNS)
		}
	}
	add(50, 0, 1000)  // the median settles at 1 µs; one head trace
	add(1, 0, 10_000) // 10× the median: slow
	add(1, 0, 3000)   // 3×: not slow
	add(4, 1, 1000)   // failed: 2 left in the anomaly bucket, then none
	feed(t, tr, &s, now)
	got := reasonCounts(tr.TakeTraces())
	want := map[string]int{"head": 1, "slow": 1, "failed": 2}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("kept traces by reason %v, want %v", got, want)
			break
		}
	}
	if pc := policyCounts(tr.Metrics(now, nil)); pc["kept/failed"] != 2 || pc["kept/slow"] != 1 || pc["out/process"] != 56-4 {
		t.Errorf("policy counts %v", pc)
	}
}

// TestTraceAnomaly classifies launches: failed first, then slow, then
// host wait.
func TestTraceAnomaly(t *testing.T) {
	warm := func(median float64) *kernel {
		return &kernel{trace: kernelTrace{median: median, n: medianWarmup}}
	}
	o := TracePolicyOptions{SlowFactor: 4, HostWait: time.Millisecond}
	tests := []struct {
		name string
		l    launch
		tm   launchTimes
		o    TracePolicyOptions
		want int
	}{
		{"ordinary", launch{k: warm(1000)}, launchTimes{execNS: 2000, haveExec: true}, o, keepHead},
		{"failed", launch{k: warm(1000), rec: record.Launch{Result: 700}}, launchTimes{execNS: 9000, haveExec: true}, o, keepFailed},
		{"slow", launch{k: warm(1000)}, launchTimes{execNS: 4001, haveExec: true}, o, keepSlow},
		{"slow off", launch{k: warm(1000)}, launchTimes{execNS: 9000, haveExec: true}, TracePolicyOptions{}, keepHead},
		{"cold kernel never slow", launch{k: &kernel{trace: kernelTrace{median: 1000, n: medianWarmup - 1}}},
			launchTimes{execNS: 9000, haveExec: true}, o, keepHead},
		{"no execution time", launch{k: warm(1000)}, launchTimes{}, o, keepHead},
		{"host wait", launch{k: warm(1000), gap: streamGap{known: true, hostWaitNS: 1_000_000}}, launchTimes{}, o, keepHostWait},
		{"host wait under", launch{k: warm(1000), gap: streamGap{known: true, hostWaitNS: 999_999}}, launchTimes{}, o, keepHead},
		{"host wait off", launch{k: warm(1000), gap: streamGap{known: true, hostWaitNS: 1e9}}, launchTimes{}, TracePolicyOptions{}, keepHead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := &tracePolicy{o: &tt.o, nt: &nodeTrace{}}
			if got := tp.anomaly(&tt.l, &tt.tm); got != tt.want {
				t.Errorf("anomaly = %s, want %s", keepReasons[got], keepReasons[tt.want])
			}
		})
	}
}

// TestRunningMedian: the estimate follows a kernel's recent executions
// and a step up in them.
func TestRunningMedian(t *testing.T) {
	var kt kernelTrace
	for i := range 200 {
		kt.slow(uint64(900+i%3*100), 4) // 900, 1000, 1100
	}
	if kt.median < 950 || kt.median > 1050 {
		t.Fatalf("median %.0f, want about 1000", kt.median)
	}
	slow := 0
	for range 200 {
		if kt.slow(10_000, 4) {
			slow++
		}
	}
	if slow == 0 || slow > 30 || kt.median != 10_000 {
		t.Errorf("after a step to 10 µs: %d slow, median %.0f; want a few and 10000", slow, kt.median)
	}
}

// TestTracePolicyFairShare: a process flooding copies and one copying
// ten a second share the node's bound of ten traces a second: the quiet
// one keeps its half, the flood no more than the rest.
func TestTracePolicyFairShare(t *testing.T) {
	now := time.Unix(5000, 0)
	tr := newTr(Options{Sampling: SamplingOptions{Traces: TracePolicyOptions{PerNode: 10}}})
	copyAt := func(src, pid uint32, startNS uint64) {
		t.Helper()
		if err := tr.Handle(src, (&record.Memcpy{PID: pid, Bytes: 1, StartNS: startNS, EndNS: startNS + 1}).Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	perPID := map[int64]int{}
	const seconds = 10
	for tick := range seconds * 10 {
		for i := range 100 {
			copyAt(1, 7, uint64(tick*1000+i))
		}
		copyAt(2, 8, uint64(tick))
		now = now.Add(100 * time.Millisecond)
	}
	td := tr.TakeTraces()
	for i := range td.ResourceSpans().Len() {
		rs := td.ResourceSpans().At(i)
		pid, _ := rs.Resource().Attributes().Get("process.pid")
		perPID[pid.Int()] += rs.ScopeSpans().At(0).Spans().Len()
	}
	if total := perPID[7] + perPID[8]; total > seconds*10+10 {
		t.Errorf("%d traces in %d s, over the node's bound (%v)", total, seconds, perPID)
	}
	if perPID[8] < 40 || perPID[7] > 65 {
		t.Errorf("traces per pid %v, want 8 to keep about half of 100 and 7 at most about 60", perPID)
	}
}

// BenchmarkTracePolicy is the cost of deciding a launch's trace: no
// bound, and a kernel over its head bound (the cheap path of a
// launch-bound loop).
func BenchmarkTracePolicy(b *testing.B) {
	for _, bc := range []struct {
		name string
		o    TracePolicyOptions
	}{{"no_limit", TracePolicyOptions{}}, {"over_kernel_bound", TracePolicyOptions{PerKernel: 1, PerProcess: 10, PerNode: 100, SlowFactor: 4, HostWait: time.Millisecond}}} {
		b.Run(bc.name, func(b *testing.B) {
			// The clock stands still, as within a poll pass: past its
			// first launch the kernel's bucket is empty.
			tp := &tracePolicy{o: &bc.o, now: time.Now(), byPID: map[uint32]*procTrace{}, nt: &nodeTrace{}}
			l := launch{k: &kernel{}, rec: record.Launch{PID: 42}}
			tm := launchTimes{execNS: 1000, haveExec: true}
			b.ReportAllocs()
			for range b.N {
				tp.launch(&l, tp.anomaly(&l, &tm))
			}
		})
	}
}

// TestTraceExemplars: the kept traces of a series are exemplars of its
// next launches and execution-time points, at most two, an anomaly in
// place of a head trace, and only once.
func TestTraceExemplars(t *testing.T) {
	now := time.Unix(5000, 0)
	tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{Traces: TracePolicyOptions{PerKernel: 3}}})
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k"})
	for id := range uint64(10) {
		s.policyLaunch(id+1, 1, 10_000*(id+1), 42, 0, 1000)
	}
	s.policyLaunch(11, 1, 200_000, 42, 700, 1000) // failed: kept, in place of a head exemplar
	feed(t, tr, &s, now)
	spans := map[pcommon.SpanID]string{}
	td := tr.TakeTraces()
	for i := range td.ResourceSpans().Len() {
		ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			if r, ok := ss.At(j).Attributes().Get(AttrSamplingReason); ok {
				spans[ss.At(j).SpanID()] = r.Str()
			}
		}
	}
	if len(spans) != 4 {
		t.Fatalf("%d kept traces, want 3 head and 1 failed: %v", len(spans), spans)
	}
	exemplars := func(md pmetric.Metrics) map[string][]string {
		out := map[string][]string{}
		eachMetric(md, func(m pmetric.Metric) {
			var xs pmetric.ExemplarSlice
			switch m.Name() {
			case MetricLaunches:
				xs = m.Sum().DataPoints().At(0).Exemplars()
			case MetricExecDuration:
				xs = m.ExponentialHistogram().DataPoints().At(0).Exemplars()
			default:
				return
			}
			for i := range xs.Len() {
				x := xs.At(i)
				r, _ := x.FilteredAttributes().Get(AttrSamplingReason)
				if spans[x.SpanID()] != r.Str() {
					t.Errorf("%s: exemplar of span %v reason %q, its span says %q", m.Name(), x.SpanID(), r.Str(), spans[x.SpanID()])
				}
				out[m.Name()] = append(out[m.Name()], r.Str())
			}
		})
		return out
	}
	got := exemplars(tr.Metrics(now, nil))
	for _, name := range []string{MetricLaunches, MetricExecDuration} {
		if rs := got[name]; len(rs) != 2 || rs[0] == rs[1] {
			t.Errorf("%s exemplars %v, want one head and one failed", name, rs)
		}
	}
	if got := exemplars(tr.Metrics(now, nil)); len(got) != 0 {
		t.Errorf("exemplars again at the next emission: %v", got)
	}
}
