package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// hc is a host call of pid/tid that returned ret (0: success).
func hc(api record.HostAPI, pid, tid uint32, enter, exit uint64, args ...uint64) *record.HostCall {
	c := &record.HostCall{PID: pid, TID: tid, EnterNS: enter, ExitNS: exit, API: api, Flags: record.HostCallReturned}
	copy(c.Args[:], args)
	return c
}

// launchCall is a launch call of fn on stream with a 4×1×1 grid of
// 128×1×1 blocks and 256 bytes of shared memory.
func launchCall(api record.HostAPI, pid, tid uint32, enter, exit, fn, stream uint64) *record.HostCall {
	c := hc(api, pid, tid, enter, exit, fn)
	c.SetDims([3]uint32{4, 1, 1}, [3]uint32{128, 1, 1})
	c.Args[4], c.Args[5] = 256, stream
	return c
}

// rec is a record and the source it comes from.
type rec struct {
	src uint32
	r   interface{ Append([]byte) []byte }
}

func host(r interface{ Append([]byte) []byte }) rec { return rec{HostProbeSource, r} }
func shim(r interface{ Append([]byte) []byte }) rec { return rec{1, r} }

// handleAll feeds recs through Handle at now, after a calibration that
// maps mono m to realBase+m.
func handleAll(t testing.TB, tr *Translator, now time.Time, recs ...rec) {
	t.Helper()
	cal := &record.Calibration{MonoNS: 1000, RealtimeNS: realBase + 1000, GPUNS: gpuBase + 1000}
	if err := tr.Handle(1, cal.Append(nil), now); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if err := tr.Handle(r.src, r.r.Append(nil), now); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// spanIndex is the spans of a trace batch by name and by span id.
type spanIndex struct {
	byName map[string][]ptrace.Span
	byID   map[pcommon.SpanID]ptrace.Span
}

func index(td ptrace.Traces) spanIndex {
	x := spanIndex{byName: spanByName(td), byID: map[pcommon.SpanID]ptrace.Span{}}
	for _, ss := range x.byName {
		for _, s := range ss {
			x.byID[s.SpanID()] = s
		}
	}
	return x
}

// one returns the only span named name.
func (x spanIndex) one(t *testing.T, name string) ptrace.Span {
	t.Helper()
	s := x.byName[name]
	if len(s) != 1 {
		t.Fatalf("%d %q spans, want 1; have %v", len(s), name, keys(x.byName))
	}
	return s[0]
}

// childOf fails unless c is a child of p in p's trace.
func childOf(t *testing.T, c, p ptrace.Span) {
	t.Helper()
	if c.ParentSpanID() != p.SpanID() || c.TraceID() != p.TraceID() {
		t.Errorf("%s is not a child of %s (parent %v, trace %v vs %v)", c.Name(), p.Name(), c.ParentSpanID(), c.TraceID(), p.TraceID())
	}
}

func attrsEqual(t *testing.T, s ptrace.Span, want map[string]any) {
	t.Helper()
	for k, w := range want {
		v, ok := s.Attributes().Get(k)
		switch {
		case !ok:
			t.Errorf("%s: no %s, want %v", s.Name(), k, w)
		case v.AsRaw() != w:
			t.Errorf("%s: %s = %v, want %v", s.Name(), k, v.AsRaw(), w)
		}
	}
}

func ts(mono uint64) pcommon.Timestamp { return pcommon.Timestamp(realBase + mono) }

// TestHostCallSpans checks the span of each kind of host call of a
// shim-less process: name, kind, times, attributes, status.
func TestHostCallSpans(t *testing.T) {
	unreturned := hc(record.HostCudaDeviceSynchronize, 7, 8, 500, 500)
	unreturned.Flags = record.HostCallArgsFaulted
	failed := hc(record.HostCudaMalloc, 7, 8, 500, 900, 1<<20, 0)
	failed.Ret = 2
	failedDrv := hc(record.HostCuMemFree, 7, 8, 500, 900, 0xd00)
	failedDrv.Ret = 1
	failedLaunch := launchCall(record.HostCuLaunchKernel, 7, 8, 500, 900, 0xf1, 3)
	failedLaunch.Ret = 98
	tests := []struct {
		name    string
		recs    []rec
		span    string
		attrs   map[string]any
		noAttrs []string
		status  string // "" ok, else the error message
	}{
		{"async copy", []rec{host(hc(record.HostCudaMemcpyAsync, 7, 8, 500, 900, 0xd0, 0x70, 4096, uint64(record.MemcpyHostToDevice), 5))},
			"cudaMemcpyAsync", map[string]any{"code.function.name": "cudaMemcpyAsync", "cuda.api.category": "memcpy",
				"process.pid": int64(7), "thread.id": int64(8), "cuda.stream": int64(5), "cuda.memcpy.size": int64(4096),
				"cuda.memcpy.kind": "MemcpyHostToDevice", "cuda.api.async": true, "cuda.api.return_code": int64(0)}, []string{"cuda.api.returned", "error.type"}, ""},
		{"driver copy: kind from the entry point", []rec{host(hc(record.HostCuMemcpyDtoH, 7, 8, 500, 900, 0x70, 0xd0, 64))},
			"cuMemcpyDtoH_v2", map[string]any{"cuda.memcpy.kind": "MemcpyDeviceToHost", "cuda.memcpy.size": int64(64), "cuda.api.async": false},
			[]string{"cuda.stream"}, ""},
		{"malloc", []rec{host(hc(record.HostCudaMalloc, 7, 8, 500, 900, 1<<20, 0x7f0000))},
			"cudaMalloc", map[string]any{"cuda.api.category": "alloc", "cuda.memory.size": int64(1 << 20), "cuda.memory.address": int64(0x7f0000)},
			[]string{"cuda.stream"}, ""},
		{"async alloc", []rec{host(hc(record.HostCudaMallocAsync, 7, 8, 500, 900, 64, 0x7f0000, 0, 0, 9))},
			"cudaMallocAsync", map[string]any{"cuda.memory.size": int64(64), "cuda.stream": int64(9), "cuda.api.async": true}, nil, ""},
		{"async free", []rec{host(hc(record.HostCuMemFreeAsync, 7, 8, 500, 900, 0x7f0000, 0, 0, 0, 9))},
			"cuMemFreeAsync", map[string]any{"cuda.api.category": "free", "cuda.memory.address": int64(0x7f0000), "cuda.stream": int64(9)}, nil, ""},
		{"stream sync", []rec{host(hc(record.HostCuStreamSynchronize, 7, 8, 500, 900, 9))},
			"cuStreamSynchronize", map[string]any{"cuda.api.category": "sync", "cuda.stream": int64(9), "cuda.api.async": false},
			[]string{"cuda.event"}, ""},
		{"event sync", []rec{host(hc(record.HostCudaEventSynchronize, 7, 8, 500, 900, 0xe0))},
			"cudaEventSynchronize", map[string]any{"cuda.event": int64(0xe0)}, []string{"cuda.stream"}, ""},
		{"graph launch", []rec{host(hc(record.HostCudaGraphLaunch, 7, 8, 500, 900, 0x9a, 0, 0, 0, 0, 4))},
			"cudaGraphLaunch", map[string]any{"cuda.api.category": "graph_launch", "cuda.graph.exec": int64(0x9a), "cuda.stream": int64(4),
				"cuda.api.async": true}, nil, ""},
		{"runtime error", []rec{host(failed)}, "cudaMalloc", map[string]any{"cuda.api.return_code": int64(2), "error.type": "cudaErrorMemoryAllocation"}, nil, "cudaError_t 2"},
		{"driver error", []rec{host(failedDrv)}, "cuMemFree_v2", map[string]any{"cuda.api.return_code": int64(1), "error.type": "CUDA_ERROR_INVALID_VALUE"}, nil, "CUresult 1"},
		{"did not return", []rec{host(unreturned)}, "cudaDeviceSynchronize",
			map[string]any{"cuda.api.returned": false, "cuda.api.args_faulted": true}, []string{"cuda.api.return_code", "cuda.stream"}, ""},
		{"failed launch: no approximate span, named kernel", []rec{
			host(&record.KernelName{PID: 7, Function: 0xf1, Name: "_Z3fooi"}), host(failedLaunch)},
			"cuLaunchKernel", map[string]any{"cuda.api.category": "launch", "cuda.kernel.name": "foo(int)", "cuda.grid.x": int64(4),
				"cuda.grid.y": int64(1), "cuda.block.x": int64(128), "cuda.block.z": int64(1), "cuda.shared_memory.size": int64(256),
				"cuda.stream": int64(3), "cuda.api.async": true, "error.type": "98"}, nil, "CUresult 98"},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{Demangle: func(s string) string { return map[string]string{"_Z3fooi": "foo(int)"}[s] }})
			handleAll(t, tr, t0, tc.recs...)
			if n := tr.SpanCount(); n != 0 {
				t.Fatalf("%d spans before the grace, want 0", n)
			}
			tr.Expire(t0.Add(DefaultHostCallGrace))
			// And after the launch timeout: a graph launch no sync closes waits for it.
			tr.Expire(t0.Add(DefaultHostCallGrace + 5*time.Second))
			td := tr.TakeTraces()
			if td.SpanCount() != 1 {
				t.Fatalf("%d spans, want 1: %v", td.SpanCount(), keys(spanByName(td)))
			}
			s := index(td).one(t, tc.span)
			if s.Kind() != ptrace.SpanKindInternal || !s.ParentSpanID().IsEmpty() || s.TraceID().IsEmpty() {
				t.Errorf("kind %v, parent %v, trace %v", s.Kind(), s.ParentSpanID(), s.TraceID())
			}
			if s.StartTimestamp() != ts(500) || s.EndTimestamp() != ts(map[bool]uint64{true: 500, false: 900}[tc.name == "did not return"]) {
				t.Errorf("span [%d, %d]", s.StartTimestamp()-realBase, s.EndTimestamp()-realBase)
			}
			attrsEqual(t, s, tc.attrs)
			for _, k := range tc.noAttrs {
				if v, ok := s.Attributes().Get(k); ok {
					t.Errorf("%s = %v, want none", k, v.AsRaw())
				}
			}
			wantCode := ptrace.StatusCodeUnset
			if tc.status != "" {
				wantCode = ptrace.StatusCodeError
			}
			if s.Status().Code() != wantCode || s.Status().Message() != tc.status {
				t.Errorf("status %v %q, want %v %q", s.Status().Code(), s.Status().Message(), wantCode, tc.status)
			}
			res := td.ResourceSpans().At(0).Resource().Attributes()
			if v, _ := res.Get("process.pid"); v.Int() != 7 {
				t.Errorf("resource process.pid %v", v.AsRaw())
			}
			if c := tr.Counters(); c.HostCalls != 1 || c.ApproxSpans != 0 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// TestShimNesting checks that a shim launch and the host launch calls of
// its thread form one trace (runtime call → launch span → driver call),
// whatever the order the records arrive in.
func TestShimNesting(t *testing.T) {
	const pid, tid = 42, 43
	name := shim(&record.KernelName{Function: 0xf, Name: "vecAdd"})
	launch := shim(&record.Launch{LaunchID: 1, PID: pid, TID: tid, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
		Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{64, 1, 1}})
	done := shim(&record.Completion{LaunchID: 1, CompleteNS: 13_000})
	runtime := host(launchCall(record.HostCudaLaunchKernel, pid, tid, 9_900, 10_200, 0x401000, 7))
	driver := host(launchCall(record.HostCuLaunchKernel, pid, tid, 10_010, 10_090, 0xf, 7))
	otherThread := host(launchCall(record.HostCudaLaunchKernel, pid, tid+1, 9_900, 10_200, 0x401000, 7))
	later := host(hc(record.HostCudaStreamSynchronize, pid, tid, 10_300, 13_100, 7)) // settles the thread
	tests := []struct {
		name       string
		hostProbes bool
		recs       []rec
		runtime    bool // a runtime call is the launch span's parent
		driver     bool // a driver call is its child
		alone      int  // host spans emitted on their own
		unmatched  uint64
	}{
		{"host calls first", false, []rec{driver, runtime, name, launch, done}, true, true, 0, 0},
		{"host calls between launch and completion", true, []rec{name, launch, driver, runtime, done}, true, true, 0, 0},
		{"host calls after completion (held)", true, []rec{name, launch, done, driver, runtime}, true, true, 0, 0},
		{"driver call only, settled by a later call", true, []rec{name, launch, done, driver, later}, false, true, 1, 0},
		{"runtime call only", false, []rec{runtime, name, launch, done}, true, false, 0, 0},
		{"other thread's call does not nest", false, []rec{otherThread, driver, runtime, name, launch, done}, true, true, 1, 1},
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{Host: HostOptions{HostProbes: tc.hostProbes}})
			handleAll(t, tr, t0, tc.recs...)
			if tr.Pending() != 0 {
				t.Fatalf("%d launches pending after the records that settle them", tr.Pending())
			}
			tr.Expire(t0.Add(DefaultHostCallGrace))
			x := index(tr.TakeTraces())
			root := x.one(t, "vecAdd")
			nested := 0
			if tc.runtime {
				rt := x.byName["cudaLaunchKernel"]
				var p ptrace.Span
				for _, s := range rt {
					if s.SpanID() == root.ParentSpanID() {
						p = s
					}
				}
				if p.SpanID().IsEmpty() {
					t.Fatal("launch span's parent is not a cudaLaunchKernel span")
				}
				childOf(t, root, p)
				if !p.ParentSpanID().IsEmpty() {
					t.Error("runtime call is not the trace's root")
				}
				attrsEqual(t, p, map[string]any{"cuda.kernel.name": "vecAdd", "thread.id": int64(tid), "cuda.api.category": "launch"})
				if p.StartTimestamp() != ts(9_900) || p.EndTimestamp() != ts(10_200) {
					t.Errorf("runtime span [%d, %d]", p.StartTimestamp()-realBase, p.EndTimestamp()-realBase)
				}
				nested++
			} else if !root.ParentSpanID().IsEmpty() {
				t.Error("launch span has a parent without a runtime call")
			}
			if tc.driver {
				d := x.one(t, "cuLaunchKernel")
				childOf(t, d, root)
				attrsEqual(t, d, map[string]any{"cuda.kernel.name": "vecAdd"})
				nested++
			}
			for _, ph := range []string{SpanLaunchCall, SpanCompletion} {
				childOf(t, x.one(t, ph), root)
			}
			c := tr.Counters()
			if c.HostCallsMatched != uint64(nested) || c.HostCallsUnmatched != tc.unmatched {
				t.Errorf("matched %d unmatched %d, want %d, %d", c.HostCallsMatched, c.HostCallsUnmatched, nested, tc.unmatched)
			}
			if c.ApproxSpans != 0 {
				t.Errorf("%d approximate spans in a shim process", c.ApproxSpans)
			}
			hostSpans := 0
			for _, s := range x.byID {
				if _, ok := s.Attributes().Get("cuda.api.category"); ok {
					hostSpans++
				}
			}
			if hostSpans != nested+tc.alone {
				t.Errorf("%d host spans, want %d nested + %d alone", hostSpans, nested, tc.alone)
			}
		})
	}
}

// TestShimGrace checks that host launch calls of a shim process that no
// launch takes are emitted alone after the grace, not before, and that a
// launch held for host calls that never come finishes after the grace.
func TestShimGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		hostProbes bool
		recs       []rec
		after      time.Duration
		wantSpans  int
		unmatched  uint64
		pending    int
	}{
		{"calls wait for the grace", false, []rec{
			shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}),
			host(launchCall(record.HostCudaLaunchKernel, 42, 43, 5_000, 5_500, 0x401000, 0)),
			host(launchCall(record.HostCuLaunchKernel, 42, 43, 5_100, 5_400, 1, 0)),
		}, DefaultHostCallGrace - 1, 0, 0, 1},
		{"calls alone after the grace", false, []rec{
			shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}),
			host(launchCall(record.HostCudaLaunchKernel, 42, 43, 5_000, 5_500, 0x401000, 0)),
			host(launchCall(record.HostCuLaunchKernel, 42, 43, 5_100, 5_400, 1, 0)),
		}, DefaultHostCallGrace, 2, 2, 1},
		{"held launch waits for host calls", true, []rec{
			shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}),
			shim(&record.Completion{LaunchID: 1, CompleteNS: 2_000}),
		}, DefaultHostCallGrace - 1, 0, 0, 1},
		{"held launch finishes after the grace", true, []rec{
			shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}),
			shim(&record.Completion{LaunchID: 1, CompleteNS: 2_000}),
		}, DefaultHostCallGrace, 3, 0, 0},
		{"without host probes nothing is held", false, []rec{
			shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}),
			shim(&record.Completion{LaunchID: 1, CompleteNS: 2_000}),
		}, 0, 3, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{Host: HostOptions{HostProbes: tc.hostProbes}})
			handleAll(t, tr, t0, tc.recs...)
			tr.Expire(t0.Add(tc.after))
			td := tr.TakeTraces()
			if td.SpanCount() != tc.wantSpans {
				t.Errorf("%d spans, want %d: %v", td.SpanCount(), tc.wantSpans, keys(spanByName(td)))
			}
			if c := tr.Counters(); c.HostCallsUnmatched != tc.unmatched || c.HostCallsMatched != 0 || c.ApproxSpans != 0 {
				t.Errorf("counters %+v", c)
			}
			if tr.Pending() != tc.pending {
				t.Errorf("pending %d, want %d", tr.Pending(), tc.pending)
			}
		})
	}
	// Once a held launch's process showed it sends no host calls, its
	// later launches are not held.
	tr := newTr(Options{Host: HostOptions{HostProbes: true}})
	l := func(id uint64) []rec {
		return []rec{shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: 1_000 * id, ReturnNS: 1_000*id + 100, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}), shim(&record.Completion{LaunchID: id, CompleteNS: 1_000*id + 500})}
	}
	handleAll(t, tr, t0, l(1)...)
	tr.Expire(t0.Add(DefaultHostCallGrace))
	handleAll(t, tr, t0.Add(DefaultHostCallGrace), l(2)...)
	if tr.Pending() != 0 {
		t.Errorf("second launch of a process without host calls is held")
	}
}

// TestNoShimLaunchCalls: when the host probes skip the launch entry points
// of shim processes, a shim launch finishes with its completion although
// the process sends other host calls (no launch call will come to nest),
// and a launch call that does come (probed before the process connected)
// is emitted alone after the grace.
func TestNoShimLaunchCalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	alloc := host(hc(record.HostCudaMalloc, 42, 43, 500, 600, 4096, 0xd000))
	launch := shim(&record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 1_000, ReturnNS: 1_100, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	done := shim(&record.Completion{LaunchID: 1, CompleteNS: 2_000})
	for _, skip := range []bool{false, true} {
		tr := newTr(Options{Host: HostOptions{HostProbes: true, NoShimLaunchCalls: skip}})
		handleAll(t, tr, t0, alloc, launch, done)
		tr.Expire(t0)
		if want := map[bool]int{false: 1, true: 0}[skip]; tr.Pending() != want {
			t.Errorf("NoShimLaunchCalls %v: %d launches pending, want %d", skip, tr.Pending(), want)
		}
	}
	tr := newTr(Options{Host: HostOptions{HostProbes: true, NoShimLaunchCalls: true}})
	handleAll(t, tr, t0, launch, host(launchCall(record.HostCuLaunchKernel, 42, 43, 1_010, 1_090, 1, 0)), done)
	tr.Expire(t0)
	if n := tr.TakeTraces().SpanCount(); n != 3 {
		t.Errorf("%d spans at once, want the launch's 3", n)
	}
	tr.Expire(t0.Add(DefaultHostCallGrace))
	x := index(tr.TakeTraces())
	if c := x.one(t, "cuLaunchKernel"); !c.ParentSpanID().IsEmpty() {
		t.Error("the launch call nested although shim launches take no host calls")
	}
	if c := tr.Counters(); c.HostCallsUnmatched != 1 || c.HostCallsMatched != 0 {
		t.Errorf("matched %d unmatched %d, want 0, 1", c.HostCallsMatched, c.HostCallsUnmatched)
	}
}
