package translate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestApproximateSpans checks the closing rule of each sync API on
// launches of a shim-less process, and the approximate span's place,
// times, name and attributes.
func TestApproximateSpans(t *testing.T) {
	const pid, tid = 50, 51
	// A runtime launch with its driver call inside, on stream s.
	rtLaunch := func(api record.HostAPI, s uint64) []rec {
		return []rec{
			host(launchCall(record.HostCuLaunchKernel, pid, tid, 1_010, 1_090, 0xabc, s)),
			host(launchCall(api, pid, tid, 1_000, 1_100, 0x401000, s)),
		}
	}
	sync := func(api record.HostAPI, tid uint32, args ...uint64) rec {
		return host(hc(api, pid, tid, 2_000, 5_000, args...))
	}
	unreturned := hc(record.HostCudaDeviceSynchronize, pid, tid, 2_000, 2_000)
	unreturned.Flags = 0
	tests := []struct {
		name     string
		launch   []rec
		sync     rec
		closedBy string // "" when it must stay open
	}{
		{"stream sync on the stream", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCudaStreamSynchronize, tid, 7), "cudaStreamSynchronize"},
		{"driver stream sync", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCuStreamSynchronize, tid+1, 7), "cuStreamSynchronize"},
		{"stream sync on another stream", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCudaStreamSynchronize, tid, 8), ""},
		{"device sync", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCudaDeviceSynchronize, tid), "cudaDeviceSynchronize"},
		{"context sync from another thread", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCuCtxSynchronize, tid+1), "cuCtxSynchronize"},
		{"sync copy closes stream 0", rtLaunch(record.HostCudaLaunchKernel, 0), sync(record.HostCudaMemcpy, tid, 1, 2, 64, 2), "cudaMemcpy"},
		{"sync copy closes legacy stream handle", rtLaunch(record.HostCudaLaunchKernel, streamLegacy), sync(record.HostCuMemcpyDtoH, tid, 1, 2, 64), "cuMemcpyDtoH_v2"},
		{"sync copy leaves other streams", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCudaMemcpy, tid, 1, 2, 64, 2), ""},
		{"async copy closes nothing", rtLaunch(record.HostCudaLaunchKernel, 0), sync(record.HostCudaMemcpyAsync, tid, 1, 2, 64, 2, 0), ""},
		{"event sync closes nothing", rtLaunch(record.HostCudaLaunchKernel, 0), sync(record.HostCudaEventSynchronize, tid, 0xe0), ""},
		{"ptds copy closes the thread's per-thread stream", rtLaunch(record.HostCudaLaunchKernelPtsz, 0), sync(record.HostCudaMemcpyPtds, tid, 1, 2, 64, 2), "cudaMemcpy_ptds"},
		{"ptds copy of another thread", rtLaunch(record.HostCudaLaunchKernelPtsz, 0), sync(record.HostCudaMemcpyPtds, tid+1, 1, 2, 64, 2), ""},
		// The per-thread default stream is blocking: legacy-stream work
		// waits for its earlier work (legacy.go).
		{"legacy copy closes the per-thread stream", rtLaunch(record.HostCudaLaunchKernelPtsz, 0), sync(record.HostCudaMemcpy, tid, 1, 2, 64, 2), "cudaMemcpy"},
		{"per-thread stream handle", rtLaunch(record.HostCudaLaunchKernelPtsz, 0), sync(record.HostCudaStreamSynchronize, tid, streamPerThread), "cudaStreamSynchronize"},
		{"ptsz stream sync of stream 0", rtLaunch(record.HostCudaLaunchKernel, streamPerThread), sync(record.HostCuStreamSynchronizePtsz, tid, 0), "cuStreamSynchronize_ptsz"},
		{"sync that did not return", rtLaunch(record.HostCudaLaunchKernel, 7), host(unreturned), ""},
		{"sync entered before the launch returned", rtLaunch(record.HostCudaLaunchKernel, 7),
			host(hc(record.HostCudaDeviceSynchronize, pid, tid+1, 1_050, 5_000)), ""},
		{"sync arriving before the launch", rtLaunch(record.HostCudaLaunchKernel, 7), sync(record.HostCudaDeviceSynchronize, tid+1), "cudaDeviceSynchronize"},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs := []rec{host(&record.KernelName{PID: pid, Function: 0xabc, Name: "_Z3fooi"}),
				host(&record.KernelName{PID: pid + 1, Function: 0xabc, Name: "_Z3bari"})}
			if strings.HasSuffix(tc.name, "before the launch") {
				recs = append(append(recs, tc.sync), tc.launch...)
			} else {
				recs = append(append(recs, tc.launch...), tc.sync)
			}
			tr := newTr(Options{})
			handleAll(t, tr, t0, recs...)
			tr.Expire(t0.Add(DefaultHostCallGrace))
			x := index(tr.TakeTraces())
			api := tc.launch[1].r.(*record.HostCall).API.String()
			if tc.closedBy == "" {
				if len(x.byName[api]) != 0 || len(x.byName["_Z3fooi"]) != 0 || tr.Counters().ApproxSpans != 0 {
					t.Fatalf("launch closed: %v", keys(x.byName))
				}
				tr.Expire(t0.Add(DefaultHostCallGrace + 5*time.Second))
				x = index(tr.TakeTraces())
				if c := tr.Counters(); c.ApproxUnclosed != 1 || c.ApproxSpans != 0 {
					t.Errorf("unclosed %d, approximate %d, want 1, 0", c.ApproxUnclosed, c.ApproxSpans)
				}
				if len(x.byID) != 2 || len(x.byName["_Z3fooi"]) != 0 {
					t.Errorf("after the timeout: %v, want the launch call and its driver call", keys(x.byName))
				}
			}
			rt := x.one(t, api)
			childOf(t, x.one(t, "cuLaunchKernel"), rt)
			if !rt.ParentSpanID().IsEmpty() {
				t.Error("launch call is not a root")
			}
			if tc.closedBy == "" {
				return
			}
			ap := x.one(t, "_Z3fooi") // the process's own name for handle 0xabc
			childOf(t, ap, rt)
			if ap.StartTimestamp() != ts(1_000) || ap.EndTimestamp() != ts(5_000) {
				t.Errorf("approximate span [%d, %d], want [1000, 5000]", ap.StartTimestamp()-realBase, ap.EndTimestamp()-realBase)
			}
			wantStream := tc.launch[1].r.(*record.HostCall).Args[5]
			attrsEqual(t, ap, map[string]any{"cuda.kernel.approximate": true, "cuda.kernel.approximate.closed_by": tc.closedBy,
				"cuda.kernel.name": "_Z3fooi", "cuda.kernel.mangled_name": "_Z3fooi", "cuda.grid.x": int64(4), "cuda.block.x": int64(128),
				"cuda.stream": int64(wantStream), "process.pid": int64(pid), "thread.id": int64(tid)})
			if _, ok := ap.Attributes().Get("cuda.api.category"); ok {
				t.Error("approximate span has cuda.api.category")
			}
			if _, ok := ap.Attributes().Get("code.function.name"); ok {
				t.Error("approximate span has code.function.name, want the kernel in cuda.kernel.name only")
			}
			attrsEqual(t, rt, map[string]any{"cuda.kernel.name": "_Z3fooi"})
			if c := tr.Counters(); c.ApproxSpans != 1 || c.ApproxUnclosed != 0 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// TestApproximateNaming checks the name of an approximate span: the
// driver call's handle, the launch's own, or "kernel 0x<handle>".
func TestApproximateNaming(t *testing.T) {
	const pid = 60
	tests := []struct {
		name string
		recs []rec
		want string
	}{
		{"driver launch named", []rec{host(&record.KernelName{PID: pid, Function: 0xd1, Module: 0, Name: "_Z1kv"}),
			host(launchCall(record.HostCuLaunchKernelEx, pid, 1, 1_000, 1_100, 0xd1, 3))}, "k()"},
		{"name of another process not used", []rec{host(&record.KernelName{PID: pid + 1, Function: 0xd1, Name: "_Z1kv"}),
			host(launchCall(record.HostCuLaunchKernel, pid, 1, 1_000, 1_100, 0xd1, 3))}, "kernel 0xd1"},
		{"runtime launch without driver call", []rec{host(&record.KernelName{PID: pid, Function: 0xd1, Name: "_Z1kv"}),
			host(launchCall(record.HostCudaLaunchKernel, pid, 1, 1_000, 1_100, 0x401000, 3))}, "kernel 0x401000"},
		{"driver call of another thread not used", []rec{host(&record.KernelName{PID: pid, Function: 0xd1, Name: "_Z1kv"}),
			host(launchCall(record.HostCuLaunchKernel, pid, 2, 1_010, 1_090, 0xd1, 4)),
			host(launchCall(record.HostCudaLaunchKernel, pid, 1, 1_000, 1_100, 0x401000, 3))}, "kernel 0x401000"},
		{"names truncated by the probe are marked", []rec{host(&record.KernelName{PID: pid, Function: 0xd1, Name: "_Z1k", Truncated: true}),
			host(launchCall(record.HostCuLaunchKernel, pid, 1, 1_000, 1_100, 0xd1, 3))}, "_Z1k" + TruncatedMarker},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{Demangle: func(s string) string { return map[string]string{"_Z1kv": "k()"}[s] }})
			handleAll(t, tr, t0, append(tc.recs, host(hc(record.HostCuCtxSynchronize, pid, 1, 2_000, 3_000)))...)
			tr.Expire(t0.Add(DefaultHostCallGrace))
			x := index(tr.TakeTraces())
			if got := x.byName[tc.want]; len(got) != 1 {
				t.Fatalf("no approximate span %q: %v", tc.want, keys(x.byName))
			}
			if v, _ := x.byName[tc.want][0].Attributes().Get("cuda.kernel.approximate"); !v.Bool() {
				t.Errorf("%q is not approximate", tc.want)
			}
		})
	}
}

// TestApproximateFIFO checks that a sync closes every launch of its stream
// that returned before it, each from its own enter time, and that a late
// shim record turns the process into a shim one only for calls not yet
// released.
func TestApproximateFIFO(t *testing.T) {
	const pid = 70
	var recs []rec
	for i := range uint64(3) {
		recs = append(recs, host(launchCall(record.HostCuLaunchKernel, pid, 1, 1_000+100*i, 1_050+100*i, 0xd1, 5)))
	}
	recs = append(recs,
		host(hc(record.HostCudaStreamSynchronize, pid, 1, 1_400, 2_000, 5)),
		host(launchCall(record.HostCuLaunchKernel, pid, 1, 2_100, 2_150, 0xd1, 5)), // after the sync: stays open
	)
	t0 := time.Unix(1000, 0)
	tr := newTr(Options{})
	handleAll(t, tr, t0, recs...)
	tr.Expire(t0.Add(DefaultHostCallGrace))
	x := index(tr.TakeTraces())
	aps := x.byName["kernel 0xd1"]
	if len(aps) != 3 {
		t.Fatalf("%d approximate spans, want 3", len(aps))
	}
	starts := map[uint64]bool{}
	for _, a := range aps {
		starts[uint64(a.StartTimestamp()-realBase)] = true
		if a.EndTimestamp() != ts(2_000) {
			t.Errorf("end %d, want 2000", a.EndTimestamp()-realBase)
		}
		p, ok := x.byID[a.ParentSpanID()]
		if !ok || p.Name() != "cuLaunchKernel" || p.StartTimestamp() != a.StartTimestamp() || p.TraceID() != a.TraceID() {
			t.Errorf("approximate span at %d not under its launch call", a.StartTimestamp()-realBase)
		}
	}
	if !starts[1_000] || !starts[1_100] || !starts[1_200] {
		t.Errorf("starts %v", starts)
	}
	// The fourth launch: a shim record of the process now does not undo
	// its release, and no sync ever closes it.
	handleAll(t, tr, t0.Add(DefaultHostCallGrace), shim(&record.Launch{LaunchID: 1, PID: pid, TID: 1, EnqueueNS: 9_000, ReturnNS: 9_100,
		Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}))
	tr.Expire(t0.Add(DefaultHostCallGrace + 5*time.Second))
	if c := tr.Counters(); c.ApproxSpans != 3 || c.ApproxUnclosed != 1 {
		t.Errorf("counters %+v", c)
	}
}

// TestHostCallBounds checks that the per-process queues stay within
// MaxHostCalls and that what goes over is counted and still emitted.
func TestHostCallBounds(t *testing.T) {
	const limit, n = 4, 10
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name        string
		shimProcess bool
		evicted     uint64
		unmatched   uint64
		unclosed    uint64
	}{
		// Deferred queue full at calls 5..10 (6 released early); the open
		// FIFO full for releases 5..10 (6 more, emitted alone); 4 left open.
		{"shim-less launches never synced", false, 12, 0, 4},
		// Unmatched list full at calls 5..10: 6 emitted early, 4 after the grace.
		{"unmatched launch calls of a shim process", true, 6, 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{Host: HostOptions{MaxHostCalls: limit}})
			var recs []rec
			if tc.shimProcess {
				recs = append(recs, shim(&record.Launch{LaunchID: 1, PID: 80, TID: 1, EnqueueNS: 1, ReturnNS: 2, Function: 1,
					Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}))
			}
			for i := range uint64(n) {
				recs = append(recs, host(launchCall(record.HostCuLaunchKernel, 80, 1, 1_000*(i+1), 1_000*(i+1)+10, 0xd1, 5)))
			}
			handleAll(t, tr, t0, recs...)
			p := tr.launches.hosts.procs[80]
			if d, u := len(p.deferred)-p.dhead, len(p.unmatched)-p.uhead; d > limit || u > limit || p.shimless.nOpen > limit {
				t.Errorf("deferred %d, unmatched %d, open %d: over %d", d, u, p.shimless.nOpen, limit)
			}
			spans := hostSpanCount(tr.TakeTraces())
			tr.Expire(t0.Add(DefaultHostCallGrace))
			if p.shimless.nOpen > limit {
				t.Errorf("open %d over %d", p.shimless.nOpen, limit)
			}
			spans += hostSpanCount(tr.TakeTraces())
			tr.Expire(t0.Add(DefaultHostCallGrace + 5*time.Second))
			spans += hostSpanCount(tr.TakeTraces())
			if spans != n {
				t.Errorf("%d spans in all, want %d (none lost)", spans, n)
			}
			c := tr.Counters()
			if c.HostCallsEvicted != tc.evicted || c.HostCallsUnmatched != tc.unmatched || c.ApproxUnclosed != tc.unclosed {
				t.Errorf("evicted %d unmatched %d unclosed %d, want %d %d %d", c.HostCallsEvicted, c.HostCallsUnmatched, c.ApproxUnclosed,
					tc.evicted, tc.unmatched, tc.unclosed)
			}
		})
	}
}

// hostSpanCount is the number of host call spans in td.
func hostSpanCount(td ptrace.Traces) int {
	n := 0
	for _, s := range index(td).byID {
		if _, ok := s.Attributes().Get("cuda.api.category"); ok {
			n++
		}
	}
	return n
}

// TestHostProcsBounded checks that host-call state is kept for at most
// maxHostProcs processes, and that flushing a busy one emits its calls.
func TestHostProcsBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := newTr(Options{})
	for pid := range uint32(maxHostProcs + 10) {
		handleAll(t, tr, t0, host(hc(record.HostCudaMalloc, pid+1, 1, 100, 200, 64, 0xd0)))
	}
	if len(tr.launches.hosts.procs) > maxHostProcs {
		t.Fatalf("%d processes held, limit %d", len(tr.launches.hosts.procs), maxHostProcs)
	}
	if c := tr.Counters(); c.HostProcsEvicted != 10 {
		t.Errorf("evicted %d processes, want 10", c.HostProcsEvicted)
	}
	tr.Expire(t0.Add(DefaultHostCallGrace))
	if n := tr.TakeTraces().SpanCount(); n != maxHostProcs+10 {
		t.Errorf("%d spans, want %d", n, maxHostProcs+10)
	}
}

// TestHostMetrics checks the per-API duration histogram and the count of
// approximate spans.
func TestHostMetrics(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := newTr(Options{})
	unreturned := hc(record.HostCudaMalloc, 1, 1, 5_000, 5_000)
	unreturned.Flags = 0
	handleAll(t, tr, t0,
		host(launchCall(record.HostCuLaunchKernel, 1, 1, 1_000, 1_100, 0xd1, 0)),
		host(launchCall(record.HostCuLaunchKernel, 1, 1, 1_200, 1_300, 0xd1, 0)),
		host(hc(record.HostCudaDeviceSynchronize, 1, 1, 2_000, 3_000)),
		host(unreturned),
	)
	tr.Expire(t0.Add(DefaultHostCallGrace))
	md := tr.Metrics(t0, nil)
	sm := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	got := map[string]uint64{}
	var approx int64 = -1
	for i := range sm.Len() {
		m := sm.At(i)
		switch m.Name() {
		case MetricHostCallDuration:
			if m.Unit() != "s" {
				t.Errorf("unit %q", m.Unit())
			}
			for j := range m.ExponentialHistogram().DataPoints().Len() {
				dp := m.ExponentialHistogram().DataPoints().At(j)
				n, _ := dp.Attributes().Get("cuda.api.name")
				c, _ := dp.Attributes().Get("cuda.api.category")
				got[n.Str()+"/"+c.Str()] = dp.Count()
				if n.Str() == "cudaDeviceSynchronize" && dp.Sum() != 1e-6 {
					t.Errorf("cudaDeviceSynchronize sum %g s, want 1e-6", dp.Sum())
				}
			}
		case MetricApproxKernels:
			approx = m.Sum().DataPoints().At(0).IntValue()
		}
	}
	want := map[string]uint64{"cuLaunchKernel/launch": 2, "cudaDeviceSynchronize/sync": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("durations %v, want %v (a call that did not return has no duration)", got, want)
	}
	if approx != 2 {
		t.Errorf("%s = %d, want 2", MetricApproxKernels, approx)
	}
}

// BenchmarkHostCallsToPdata measures host call records/s turned into spans
// (a shim-less process: runtime launches with their driver call, a stream
// sync every 4 launches, async copies), including TakeTraces.
func BenchmarkHostCallsToPdata(b *testing.B) {
	const pid = 90
	var recs [][]byte
	recs = append(recs, (&record.KernelName{PID: pid, Function: 0xd1, Name: "_Z6vecAddPfS_S_i"}).Append(nil))
	ns := uint64(1_000)
	for i := range 1000 {
		ns += 1_000
		recs = append(recs, launchCall(record.HostCuLaunchKernel, pid, 1, ns+10, ns+90, 0xd1, 5).Append(nil))
		recs = append(recs, launchCall(record.HostCudaLaunchKernel, pid, 1, ns, ns+100, 0x401000, 5).Append(nil))
		recs = append(recs, hc(record.HostCudaMemcpyAsync, pid, 1, ns+200, ns+300, 1, 2, 4096, 1, 5).Append(nil))
		if i%4 == 3 {
			recs = append(recs, hc(record.HostCudaStreamSynchronize, pid, 1, ns+400, ns+900, 5).Append(nil))
		}
	}
	tr := newTr(Options{})
	now := time.Unix(1000, 0)
	b.ResetTimer()
	for range b.N {
		for _, r := range recs {
			_ = tr.Handle(HostProbeSource, r, now)
		}
		now = now.Add(DefaultHostCallGrace)
		tr.Expire(now)
		if td := tr.TakeTraces(); td.SpanCount() < 4000 {
			b.Fatalf("%d spans", td.SpanCount())
		}
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestApproximateCapture checks that a shim-less launch into a capturing
// stream gets no approximate kernel span (it is a graph node; it runs at a
// graph launch, if ever), and that launches outside the capture's stream
// or time still do.
func TestApproximateCapture(t *testing.T) {
	const pid, tid = 60, 61
	begin := func(api record.HostAPI, tid uint32, stream uint64, args ...uint64) rec {
		return host(hc(api, pid, tid, 500, 600, append([]uint64{stream}, args...)...))
	}
	failed := hc(record.HostCuStreamBeginCaptureV2, pid, tid, 500, 600, 7)
	failed.Ret = 900
	// The driver's begin inside the runtime's, as libcudart calls it.
	nestedBegin := []rec{host(hc(record.HostCuStreamBeginCaptureV2, pid, tid, 510, 590, 7, 0)), begin(record.HostCudaStreamBeginCapture, tid, 7, 0)}
	tests := []struct {
		name     string
		capture  []rec // returned before the launch returned
		launch   *record.HostCall
		end      *record.HostCall // nil: the capture is not ended
		captured bool
	}{
		{"runtime capture on the stream", []rec{begin(record.HostCudaStreamBeginCapture, tid, 7, 1)},
			launchCall(record.HostCudaLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), hc(record.HostCudaStreamEndCapture, pid, tid, 1_500, 1_600, 7), true},
		{"nested runtime and driver begin", nestedBegin,
			launchCall(record.HostCuLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), hc(record.HostCudaStreamEndCapture, pid, tid, 1_500, 1_600, 7), true},
		{"to graph, v1 driver end", []rec{begin(record.HostCuStreamBeginCaptureToGraph, tid, 7, 0x6b)},
			launchCall(record.HostCuLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), hc(record.HostCuStreamEndCapture, pid, tid, 1_500, 1_600, 7), true},
		{"capture never ended", []rec{begin(record.HostCuStreamBeginCapture, tid, 7)},
			launchCall(record.HostCuLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), nil, true},
		{"per-thread stream of the capturing thread", []rec{begin(record.HostCudaStreamBeginCapturePtsz, tid, 0, 2)},
			launchCall(record.HostCudaLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, streamPerThread), hc(record.HostCudaStreamEndCapturePtsz, pid, tid, 1_500, 1_600, 0), true},
		{"per-thread stream of another thread", []rec{begin(record.HostCudaStreamBeginCapturePtsz, tid+1, 0, 2)},
			launchCall(record.HostCudaLaunchKernelPtsz, pid, tid, 1_000, 1_100, 0xabc, 0), nil, false},
		{"capture of another stream", []rec{begin(record.HostCudaStreamBeginCapture, tid, 8, 0)},
			launchCall(record.HostCudaLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), hc(record.HostCudaStreamEndCapture, pid, tid, 1_500, 1_600, 8), false},
		{"capture ended before the launch", []rec{begin(record.HostCudaStreamBeginCapture, tid, 7, 0), host(hc(record.HostCudaStreamEndCapture, pid, tid, 700, 800, 7))},
			launchCall(record.HostCudaLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), nil, false},
		{"begin that failed", []rec{host(failed)},
			launchCall(record.HostCuLaunchKernel, pid, tid, 1_000, 1_100, 0xabc, 7), hc(record.HostCuStreamEndCapture, pid, tid, 1_500, 1_600, 7), false},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs := append([]rec{host(&record.KernelName{PID: pid, Function: 0xabc, Name: "_Z3fooi"})}, tc.capture...)
			recs = append(recs, host(tc.launch))
			if tc.end != nil {
				recs = append(recs, host(tc.end))
			}
			// What runs the graph, and a sync that would close the launch.
			recs = append(recs, host(hc(record.HostCudaGraphLaunch, pid, tid, 1_700, 1_800, 0x6e, 0, 0, 0, 0, 7)),
				host(hc(record.HostCudaDeviceSynchronize, pid, tid, 2_000, 5_000)))
			tr := newTr(Options{})
			handleAll(t, tr, t0, recs...)
			tr.Expire(t0.Add(DefaultHostCallGrace))
			x := index(tr.TakeTraces())
			c := tr.Counters()
			lc := x.one(t, tc.launch.API.String())
			if tc.captured {
				if len(x.byName["_Z3fooi"]) != 0 || c.ApproxSpans != 0 || c.ApproxCaptured != 1 {
					t.Errorf("captured launch: kernel spans %d, approximate %d, captured %d; want 0, 0, 1", len(x.byName["_Z3fooi"]), c.ApproxSpans, c.ApproxCaptured)
				}
				attrsEqual(t, lc, map[string]any{"cuda.graph.captured": true, "cuda.kernel.name": "_Z3fooi"})
				return
			}
			if len(x.byName["_Z3fooi"]) != 1 || c.ApproxSpans != 1 || c.ApproxCaptured != 0 {
				t.Errorf("launch outside a capture: kernel spans %d, approximate %d, captured %d; want 1, 1, 0", len(x.byName["_Z3fooi"]), c.ApproxSpans, c.ApproxCaptured)
			}
			if _, ok := lc.Attributes().Get("cuda.graph.captured"); ok {
				t.Error("a launch outside a capture has cuda.graph.captured")
			}
		})
	}
}

// TestApproximateGraph checks the approximate cuda.graph span of a
// shim-less process's graph launch: closed by a sync like a kernel launch,
// under its graph-launch call.
func TestApproximateGraph(t *testing.T) {
	const pid, tid = 70, 71
	failed := hc(record.HostCuGraphLaunch, pid, tid, 1_000, 1_100, 0x6e, 0, 0, 0, 0, 7)
	failed.Ret = 1
	tests := []struct {
		name     string
		o        Options
		launch   *record.HostCall
		sync     *record.HostCall
		closedBy string // "": no graph span
	}{
		{"stream sync", Options{}, hc(record.HostCudaGraphLaunch, pid, tid, 1_000, 1_100, 0x6e, 0, 0, 0, 0, 7),
			hc(record.HostCudaStreamSynchronize, pid, tid, 2_000, 5_000, 7), "cudaStreamSynchronize"},
		{"device sync, driver launch", Options{}, hc(record.HostCuGraphLaunchPtsz, pid, tid, 1_000, 1_100, 0x6e, 0, 0, 0, 0, 7),
			hc(record.HostCuCtxSynchronize, pid, tid+1, 2_000, 5_000), "cuCtxSynchronize"},
		{"sync of another stream", Options{}, hc(record.HostCudaGraphLaunch, pid, tid, 1_000, 1_100, 0x6e, 0, 0, 0, 0, 7),
			hc(record.HostCudaStreamSynchronize, pid, tid, 2_000, 5_000, 8), ""},
		{"failed launch", Options{}, failed, hc(record.HostCuCtxSynchronize, pid, tid, 2_000, 5_000), ""},
		{"approximate spans off", Options{Host: HostOptions{NoApproximateKernels: true}}, hc(record.HostCudaGraphLaunch, pid, tid, 1_000, 1_100, 0x6e, 0, 0, 0, 0, 7),
			hc(record.HostCudaStreamSynchronize, pid, tid, 2_000, 5_000, 7), ""},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(tc.o)
			handleAll(t, tr, t0, host(tc.launch), host(tc.sync))
			tr.Expire(t0.Add(DefaultHostCallGrace))
			tr.Expire(t0.Add(DefaultHostCallGrace + 5*time.Second))
			x := index(tr.TakeTraces())
			c := tr.Counters()
			gl := x.one(t, tc.launch.API.String())
			if tc.closedBy == "" {
				if len(x.byName["cuda.graph"]) != 0 || c.ApproxGraphs != 0 {
					t.Fatalf("graph spans %d (counted %d), want none", len(x.byName["cuda.graph"]), c.ApproxGraphs)
				}
				return
			}
			g := x.one(t, "cuda.graph")
			childOf(t, g, gl)
			if g.StartTimestamp() != ts(1_000) || g.EndTimestamp() != ts(5_000) {
				t.Errorf("graph span [%d, %d], want [1000, 5000]", g.StartTimestamp()-realBase, g.EndTimestamp()-realBase)
			}
			attrsEqual(t, g, map[string]any{"cuda.graph.exec": int64(0x6e), "cuda.stream": int64(7), "cuda.graph.approximate": true,
				"cuda.graph.approximate.closed_by": tc.closedBy, "process.pid": int64(pid), "thread.id": int64(tid)})
			if c.ApproxGraphs != 1 || c.ApproxSpans != 0 {
				t.Errorf("graph spans counted %d, kernel spans %d; want 1, 0", c.ApproxGraphs, c.ApproxSpans)
			}
		})
	}
}

// TestApproximateEvents checks what event records and stream waits add: an
// event sync closes the launches on the event's stream enqueued before its
// record, and a stream that waits on an event recorded in a capture joins
// that capture until it ends.
func TestApproximateEvents(t *testing.T) {
	const pid, tid = 80, 81
	launch := func(enter uint64, stream uint64) rec {
		return host(launchCall(record.HostCudaLaunchKernel, pid, tid, enter, enter+100, 0xabc, stream))
	}
	call := func(api record.HostAPI, enter uint64, args ...uint64) rec {
		return host(hc(api, pid, tid, enter, enter+50, args...))
	}
	tests := []struct {
		name     string
		recs     []rec // in return order
		approx   int   // approximate kernel spans
		captured int   // launch calls marked captured
		closedBy string
	}{
		{"event sync closes launches before the record", []rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_200, 0xe0, 7),
			launch(1_300, 7), call(record.HostCudaEventSynchronize, 2_000, 0xe0)}, 1, 0, "cudaEventSynchronize"},
		{"driver record and sync", []rec{launch(1_000, 7), call(record.HostCuEventRecordWithFlags, 1_200, 0xe0, 7, 1),
			call(record.HostCuEventSynchronize, 2_000, 0xe0)}, 1, 0, "cuEventSynchronize"},
		{"event of another stream", []rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_200, 0xe0, 8),
			call(record.HostCudaEventSynchronize, 2_000, 0xe0)}, 0, 0, ""},
		{"event recorded before the launch", []rec{call(record.HostCudaEventRecord, 900, 0xe0, 7), launch(1_000, 7),
			call(record.HostCudaEventSynchronize, 2_000, 0xe0)}, 0, 0, ""},
		{"a stream sync follows the stream's waits", []rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_200, 0xe0, 7),
			call(record.HostCudaStreamWaitEvent, 1_300, 0, 0xe0, 0), launch(1_400, 0), call(record.HostCudaStreamSynchronize, 2_000, 0)},
			2, 0, "cudaStreamSynchronize"},
		{"two streams deep", []rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_200, 0xe0, 7),
			call(record.HostCuStreamWaitEvent, 1_300, 8, 0xe0, 0), call(record.HostCuEventRecord, 1_400, 0xe1, 8),
			call(record.HostCudaStreamWaitEvent, 1_500, 0, 0xe1, 0), call(record.HostCudaStreamSynchronize, 2_000, 0)}, 1, 0, "cudaStreamSynchronize"},
		{"a wait after the sync", []rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_200, 0xe0, 7),
			call(record.HostCudaStreamSynchronize, 1_500, 0), call(record.HostCudaStreamWaitEvent, 1_600, 0, 0xe0, 0)}, 0, 0, ""},
		{"a launch after the waited record", []rec{call(record.HostCudaEventRecord, 900, 0xe0, 7), launch(1_000, 7),
			call(record.HostCudaStreamWaitEvent, 1_200, 0, 0xe0, 0), call(record.HostCudaStreamSynchronize, 2_000, 0)}, 0, 0, ""},
		{"stream joins a capture through an event", []rec{call(record.HostCudaStreamBeginCapture, 500, 7, 0),
			call(record.HostCudaEventRecord, 600, 0xe0, 7), call(record.HostCudaStreamWaitEvent, 700, 8, 0xe0, 0),
			launch(1_000, 8), call(record.HostCudaEventRecord, 1_200, 0xe1, 8), call(record.HostCudaStreamWaitEvent, 1_300, 7, 0xe1, 0),
			call(record.HostCudaStreamEndCapture, 1_500, 7), launch(2_000, 8), call(record.HostCudaDeviceSynchronize, 3_000)}, 1, 1, "cudaDeviceSynchronize"},
		{"wait on an event recorded before the capture", []rec{call(record.HostCudaEventRecord, 400, 0xe0, 7),
			call(record.HostCudaStreamBeginCapture, 500, 7, 0), call(record.HostCuStreamWaitEvent, 700, 8, 0xe0, 0),
			launch(1_000, 8), call(record.HostCudaStreamEndCapture, 1_500, 7), call(record.HostCudaDeviceSynchronize, 3_000)}, 1, 0, "cudaDeviceSynchronize"},
		{"a sync on an event recorded in a capture closes nothing", []rec{call(record.HostCudaStreamBeginCapture, 500, 7, 0),
			launch(600, 7), call(record.HostCudaEventRecord, 800, 0xe0, 7), call(record.HostCudaStreamEndCapture, 1_500, 7),
			call(record.HostCudaEventSynchronize, 2_000, 0xe0)}, 0, 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, c := approxRun(t, pid, tc.recs)
			if len(x.byName["_Z3fooi"]) != tc.approx || c.ApproxSpans != uint64(tc.approx) || c.ApproxCaptured != uint64(tc.captured) {
				t.Fatalf("approximate spans %d (counted %d), captured %d; want %d, %d", len(x.byName["_Z3fooi"]), c.ApproxSpans, c.ApproxCaptured, tc.approx, tc.captured)
			}
			if tc.approx > 0 {
				attrsEqual(t, x.byName["_Z3fooi"][0], map[string]any{"cuda.kernel.approximate.closed_by": tc.closedBy})
			}
			marked := 0
			for _, s := range x.byName["cudaLaunchKernel"] {
				if v, ok := s.Attributes().Get("cuda.graph.captured"); ok && v.Bool() {
					marked++
				}
			}
			if marked != tc.captured {
				t.Errorf("%d launch calls marked captured, want %d", marked, tc.captured)
			}
		})
	}
}

// approxRun feeds the host calls recs of process pid (kernel 0xabc named
// _Z3fooi) to a translator without the shim, lets the grace pass and
// returns the spans and counters.
func approxRun(t *testing.T, pid uint32, recs []rec) (spanIndex, Counters) {
	t.Helper()
	t0 := time.Unix(1000, 0)
	tr := newTr(Options{})
	handleAll(t, tr, t0, append([]rec{host(&record.KernelName{PID: pid, Function: 0xabc, Name: "_Z3fooi"})}, recs...)...)
	tr.Expire(t0.Add(DefaultHostCallGrace))
	return index(tr.TakeTraces()), tr.Counters()
}
