package translate

import (
	"maps"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Span contexts of the tests: a sampled one, an unsampled one, the
// process's TRACEPARENT.
var (
	ctxA   = record.SpanContext{PID: 42, TID: 43, TraceID: [16]byte{0xa0, 1}, SpanID: [8]byte{0xb0, 1}, Flags: 1, Source: record.SpanContextThread}
	ctxB   = record.SpanContext{PID: 42, TID: 43, TraceID: [16]byte{0xc0, 2}, SpanID: [8]byte{0xd0, 2}, Source: record.SpanContextThread}
	ctxEnv = record.SpanContext{PID: 42, TID: 43, TraceID: [16]byte{0x0e, 3}, SpanID: [8]byte{0x0f, 3}, Flags: 1, Source: record.SpanContextEnv}
)

// withTID is sc for thread tid.
func withTID(sc record.SpanContext, tid uint32) *record.SpanContext {
	sc.TID = tid
	return &sc
}

// launchRoots returns the launch spans of td (those named k), and every
// span by id.
func launchRoots(td ptrace.Traces) ([]ptrace.Span, map[pcommon.SpanID]ptrace.Span) {
	var roots []ptrace.Span
	byID := map[pcommon.SpanID]ptrace.Span{}
	for i := range td.ResourceSpans().Len() {
		ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			sp := ss.At(j)
			byID[sp.SpanID()] = sp
			if sp.Name() == "k" {
				roots = append(roots, sp)
			}
		}
	}
	return roots, byID
}

// TestSpanContextParent: a launch made under a thread's span context (or
// the process's TRACEPARENT) is a child of that span in its trace, and so
// are its phases; without one, or after the context is cleared, or under
// another thread's, its trace is its own.
func TestSpanContextParent(t *testing.T) {
	none := &record.SpanContext{PID: 42, TID: 43}
	tests := []struct {
		name   string
		before []*record.SpanContext
		want   *record.SpanContext // nil: a trace of its own
		source string
	}{
		{"no context", nil, nil, ""},
		{"thread", []*record.SpanContext{&ctxA}, &ctxA, "thread"},
		{"unsampled thread", []*record.SpanContext{&ctxB}, &ctxB, "thread"},
		{"traceparent", []*record.SpanContext{&ctxEnv}, &ctxEnv, "env"},
		{"latest wins", []*record.SpanContext{&ctxA, &ctxB}, &ctxB, "thread"},
		{"cleared", []*record.SpanContext{&ctxA, none}, nil, ""},
		{"another thread", []*record.SpanContext{withTID(ctxA, 99)}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 1, Name: "k"})
			for _, sc := range tt.before {
				s.add(sc)
			}
			s.launch(1, 1, 10_000, 1, 32, 1, true)
			tr := newTr(Options{ExpectWarps: true})
			feed(t, tr, &s, time.Now())
			td := tr.TakeTraces()
			roots, byID := launchRoots(td)
			if len(roots) != 1 || td.SpanCount() != 5 {
				t.Fatalf("%d launch spans, %d spans; want 1 and 5", len(roots), td.SpanCount())
			}
			r := roots[0]
			src, hasSrc := r.Attributes().Get(AttrParentSource)
			if tt.want == nil {
				if !r.ParentSpanID().IsEmpty() || hasSrc || r.TraceID() == pcommon.TraceID(ctxA.TraceID) {
					t.Errorf("launch span: trace %v parent %v %s %v, want a trace of its own", r.TraceID(), r.ParentSpanID(), AttrParentSource, src.AsRaw())
				}
			} else if r.TraceID() != pcommon.TraceID(tt.want.TraceID) || r.ParentSpanID() != pcommon.SpanID(tt.want.SpanID) || src.Str() != tt.source {
				t.Errorf("launch span: trace %v parent %v %s %q, want trace %x parent %x %q",
					r.TraceID(), r.ParentSpanID(), AttrParentSource, src.Str(), tt.want.TraceID, tt.want.SpanID, tt.source)
			}
			for id, sp := range byID {
				if id != r.SpanID() && (sp.TraceID() != r.TraceID() || sp.ParentSpanID() != r.SpanID()) {
					t.Errorf("%s: trace %v parent %v, want the launch span's trace and it as parent", sp.Name(), sp.TraceID(), sp.ParentSpanID())
				}
			}
		})
	}
}

// TestSpanContextPolicy: under a sampled application span a launch skips
// its kernel's head bound and sampling::one_in, keeps the process's and
// the node's, and says "parent"; so does an anomalous one past the
// anomaly bounds (it keeps its reason); under an unsampled one the head
// bounds apply as without a context.
func TestSpanContextPolicy(t *testing.T) {
	tests := []struct {
		name   string
		sc     *record.SpanContext
		o      SamplingOptions
		result uint32 // every launch's CUresult
		want   map[string]int
		out    map[string]int64
	}{
		{"sampled, kernel bound", &ctxA, SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1}}, 0,
			map[string]int{"parent": 100}, nil},
		{"sampled, one_in", &ctxA, SamplingOptions{OneIn: 10, Traces: TracePolicyOptions{PerKernel: 1}}, 0,
			map[string]int{"parent": 100}, nil},
		{"sampled, process bound", &ctxA, SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1, PerProcess: 5}}, 0,
			map[string]int{"parent": 5}, map[string]int64{"out/process": 95}},
		{"sampled, node bound", &ctxA, SamplingOptions{Traces: TracePolicyOptions{PerNode: 3}}, 0,
			map[string]int{"parent": 3}, map[string]int64{"out/node": 97}},
		{"sampled, failed past the anomaly bound", &ctxA,
			SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1, AnomaliesPerProcess: 3}}, 1,
			map[string]int{"failed": 100}, nil},
		{"sampled, failed past the anomaly and process bounds", &ctxA,
			SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1, PerProcess: 5, AnomaliesPerProcess: 3}}, 1,
			map[string]int{"failed": 8}, map[string]int64{"out/process": 92}},
		{"unsampled", &ctxB, SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1}}, 0,
			map[string]int{"head": 1}, map[string]int64{"out/kernel": 99}},
		{"unsampled, failed past the anomaly bound", &ctxB,
			SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1, AnomaliesPerProcess: 3}}, 1,
			map[string]int{"failed": 4}, map[string]int64{"out/kernel": 96}},
		{"none", nil, SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1}}, 0,
			map[string]int{"head": 1}, map[string]int64{"out/kernel": 99}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(5000, 0)
			tr := newTr(Options{ExpectWarps: true, Sampling: tt.o})
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 1, Name: "k"})
			if tt.sc != nil {
				s.add(withTID(*tt.sc, 43))
			}
			for id := range uint64(100) {
				s.policyLaunch(id+1, 1, 10_000*(id+1), 42, tt.result, 1000)
			}
			feed(t, tr, &s, now)
			got := reasonCounts(tr.TakeTraces())
			if !maps.Equal(got, tt.want) {
				t.Errorf("kept traces by reason %v, want %v", got, tt.want)
			}
			pc := policyCounts(tr.Metrics(now, nil))
			for k, v := range tt.out {
				if pc[k] != v {
					t.Errorf("%s = %d, want %d (all: %v)", k, pc[k], v, pc)
				}
			}
		})
	}
}

// TestSpanContextBound: past maxThreadContexts threads of one client, a
// new thread's context is ignored; a cleared one frees its place.
func TestSpanContextBound(t *testing.T) {
	tr := newTr(Options{})
	now := time.Now()
	for tid := range uint32(maxThreadContexts + 1) {
		if err := tr.Handle(1, withTID(ctxA, tid+1).Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.clients.spanOf(1, maxThreadContexts+1); got.set() {
		t.Errorf("thread %d past the bound has a context", maxThreadContexts+1)
	}
	clear := record.SpanContext{PID: 42, TID: 1}
	if err := tr.Handle(1, clear.Append(nil), now); err != nil {
		t.Fatal(err)
	}
	if err := tr.Handle(1, withTID(ctxB, maxThreadContexts+1).Append(nil), now); err != nil {
		t.Fatal(err)
	}
	if got := tr.clients.spanOf(1, maxThreadContexts+1); got.span != pcommon.SpanID(ctxB.SpanID) {
		t.Errorf("after a clear, thread %d has context %+v, want ctxB's", maxThreadContexts+1, got)
	}
	if got := tr.clients.spanOf(1, 1); got.set() {
		t.Errorf("cleared thread 1 still has a context")
	}
}

// TestSpanContextCopySync: a copy or a sync made under a thread's span
// context is a child of that span; without one, a trace of its own. Under
// a sampled parent one_in does not leave it out.
func TestSpanContextCopySync(t *testing.T) {
	tests := []struct {
		name   string
		sc     *record.SpanContext
		oneIn  uint32
		parent bool
		reason string
	}{
		{"none", nil, 1, false, "head"},
		{"sampled", &ctxA, 1, true, "parent"},
		{"unsampled", &ctxB, 1, true, "head"},
		{"sampled, one_in", &ctxA, 1 << 30, true, "parent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			if tt.sc != nil {
				s.add(tt.sc)
			}
			s.add(&record.Memcpy{Bytes: 4096, StartNS: 2000, EndNS: 3000, PID: 42, TID: 43, Kind: record.MemcpyHostToDevice})
			s.add(&record.Sync{StartNS: 4000, EndNS: 5000, PID: 42, TID: 43, Kind: record.SyncStream})
			tr := newTr(Options{Sampling: SamplingOptions{OneIn: tt.oneIn}})
			feed(t, tr, &s, time.Now())
			by := spanByName(tr.TakeTraces())
			for _, name := range []string{SpanMemcpy, SpanSync} {
				if len(by[name]) != 1 {
					t.Fatalf("%d %s spans, want 1", len(by[name]), name)
				}
				sp := by[name][0]
				reason, _ := sp.Attributes().Get(AttrSamplingReason)
				if reason.Str() != tt.reason {
					t.Errorf("%s: reason %q, want %q", name, reason.Str(), tt.reason)
				}
				if !tt.parent {
					if !sp.ParentSpanID().IsEmpty() {
						t.Errorf("%s: parent %v, want none", name, sp.ParentSpanID())
					}
					continue
				}
				if sp.TraceID() != pcommon.TraceID(tt.sc.TraceID) || sp.ParentSpanID() != pcommon.SpanID(tt.sc.SpanID) {
					t.Errorf("%s: trace %v parent %v, want the context's", name, sp.TraceID(), sp.ParentSpanID())
				}
			}
		})
	}
}

// TestSpanContextHostCalls: with host probes, the outermost host call over
// a launch (the runtime's cudaLaunchKernel) is the child of the
// application's span, the launch span the child of that call, and the
// driver call the launch span's child, all in the application's trace.
func TestSpanContextHostCalls(t *testing.T) {
	const pid, tid = 42, 43
	t0 := time.Unix(1000, 0)
	tr := newTr(Options{})
	sc := ctxA
	handleAll(t, tr, t0,
		shim(&sc),
		host(launchCall(record.HostCuLaunchKernel, pid, tid, 10_010, 10_090, 0xf, 7)),
		host(launchCall(record.HostCudaLaunchKernel, pid, tid, 9_900, 10_200, 0x401000, 7)),
		shim(&record.KernelName{Function: 0xf, Name: "vecAdd"}),
		shim(&record.Launch{LaunchID: 1, PID: pid, TID: tid, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
			Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{64, 1, 1}}),
		shim(&record.Completion{LaunchID: 1, CompleteNS: 13_000}))
	tr.Expire(t0.Add(DefaultHostCallGrace))
	x := index(tr.TakeTraces())
	root, rt, drv := x.one(t, "vecAdd"), x.one(t, "cudaLaunchKernel"), x.one(t, "cuLaunchKernel")
	if rt.TraceID() != pcommon.TraceID(ctxA.TraceID) || rt.ParentSpanID() != pcommon.SpanID(ctxA.SpanID) {
		t.Errorf("cudaLaunchKernel: trace %v parent %v, want the application's span", rt.TraceID(), rt.ParentSpanID())
	}
	childOf(t, root, rt)
	childOf(t, drv, root)
	attrsEqual(t, root, map[string]any{AttrParentSource: "thread", AttrSamplingReason: "parent"})
}
