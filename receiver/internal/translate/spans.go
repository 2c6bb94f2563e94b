package translate

import (
	"strconv"

	"github.com/gpuprobe/gpuprobe/receiver/internal/otelid"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ScopeName is the instrumentation scope of everything the receiver emits.
const ScopeName = "github.com/gpuprobe/gpuprobe/receiver"

// Span names of the phases of a launch (the launch span itself is named
// after the kernel).
const (
	SpanLaunchCall = "cuda.launch_call" // host: the launch API call
	SpanQueued     = "cuda.queued"      // host enqueue → first warp start (or the driver's kernel start)
	SpanExecuting  = "cuda.executing"   // first warp start → last warp end (or the driver's window)
	SpanCompletion = "cuda.completion"  // end of execution (or of the call) → host saw completion
	SpanMemcpy     = "cuda.memcpy"      // one memory copy
	SpanSync       = "cuda.sync"        // one synchronisation call
)

// spanOut owns the spans built since the last TakeTraces, one resource
// per process.
type spanOut struct {
	o        *Options
	counters *Counters
	res      *resourceBook // what the spans say of their process and device (resource.go)
	limit    *spanLimit    // limits::spans_per_second (spanlimit.go)

	traces ptrace.Traces
	byPID  map[uint32]ptrace.SpanSlice
	nSpans int
}

func (so *spanOut) resetTraces() {
	so.traces = ptrace.NewTraces()
	so.byPID = map[uint32]ptrace.SpanSlice{}
	so.nSpans = 0
}

// TakeTraces returns the spans built since the last call (possibly none).
func (t *Translator) TakeTraces() ptrace.Traces {
	out := t.spans.traces
	t.spans.resetTraces()
	return out
}

// SpanCount is the number of spans waiting in TakeTraces.
func (t *Translator) SpanCount() int { return t.spans.nSpans }

// spansOf returns the span slice of a process's resource.
func (so *spanOut) spansOf(pid uint32) ptrace.SpanSlice {
	if ss, ok := so.byPID[pid]; ok {
		return ss
	}
	rs := so.traces.ResourceSpans().AppendEmpty()
	so.res.fillResource(rs.Resource().Attributes(), pid)
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName(ScopeName)
	ss := sc.Spans()
	so.byPID[pid] = ss
	return ss
}

// mono maps a CLOCK_MONOTONIC reading of source src to a timestamp (0 when
// unknown).
func (so *spanOut) mono(src uint32, ns uint64) pcommon.Timestamp {
	r, _ := so.o.Clock.ClientMonoToReal(src, ns)
	return pcommon.Timestamp(r)
}

// launchSpans appends the launch span and its phase children.
func (so *spanOut) launchSpans(l *launch) {
	if !so.limit.admit(l.rec.PID, so.launchSpanCount(l)) {
		return
	}
	r := &l.rec
	ss := so.spansOf(r.PID)
	tid := otelid.NewTraceID()
	parent := so.hostParents(ss, l, tid)
	root := ss.AppendEmpty()
	root.SetTraceID(tid)
	rootID := otelid.NewSpanID()
	root.SetSpanID(rootID)
	root.SetParentSpanID(parent)
	root.SetName(l.k.name)
	root.SetKind(ptrace.SpanKindInternal)
	start, end := so.mono(l.key.src, r.EnqueueNS), so.mono(l.key.src, r.ReturnNS)
	root.SetStartTimestamp(start)

	a := root.Attributes()
	a.EnsureCapacity(20)
	a.PutStr("cuda.kernel.name", l.k.name)
	a.PutStr("cuda.kernel.mangled_name", l.k.mangled)
	a.PutInt("cuda.launch.id", int64(r.LaunchID))
	if l.graph.chain != nil {
		a.PutInt("cuda.graph.replay", int64(l.graph.replay))
	}
	a.PutStr("cuda.launch.api", r.API.String())
	if r.Flags&record.LaunchUnprobed != 0 && so.o.ExpectWarps {
		// Device probes are on, but this launch ran none (kernel not
		// patched, or left out by sampling::device_one_in): no phases.
		a.PutBool("cuda.launch.probed", false)
	}
	so.res.putDevice(a, l.key.src, r.Device)
	a.PutInt("cuda.stream", int64(r.Stream))
	a.PutInt("cuda.grid.x", int64(r.Grid[0]))
	a.PutInt("cuda.grid.y", int64(r.Grid[1]))
	a.PutInt("cuda.grid.z", int64(r.Grid[2]))
	a.PutInt("cuda.block.x", int64(r.Block[0]))
	a.PutInt("cuda.block.y", int64(r.Block[1]))
	a.PutInt("cuda.block.z", int64(r.Block[2]))
	a.PutInt("cuda.shared_memory.size", int64(r.SharedMem))
	a.PutInt("process.pid", int64(r.PID))
	a.PutInt("thread.id", int64(r.TID))
	if r.Result != 0 {
		root.Status().SetCode(ptrace.StatusCodeError)
		root.Status().SetMessage("CUresult " + strconv.FormatUint(uint64(r.Result), 10))
		a.PutStr("error.type", errorType(int64(r.Result), true))
	}

	child := func(name string, s, e pcommon.Timestamp) {
		c := ss.AppendEmpty()
		c.SetTraceID(tid)
		c.SetSpanID(otelid.NewSpanID())
		c.SetParentSpanID(rootID)
		c.SetName(name)
		c.SetStartTimestamp(s)
		c.SetEndTimestamp(max(s, e))
		so.nSpans++
		end = max(end, e)
	}
	child(SpanLaunchCall, start, so.mono(l.key.src, r.ReturnNS))
	so.hostChildren(ss, l, tid, rootID)

	execEnd := so.mono(l.key.src, r.ReturnNS)
	if l.gpu.exec != nil {
		a.PutInt("cuda.blocks.observed", int64(l.gpu.exec.Blocks))
		a.PutInt("cuda.threads.observed", int64(l.gpu.exec.Threads))
	}
	if rt := l.route(); rt != routeNone {
		a.PutStr("cuda.launch.window", rt.String())
	}
	if l.gap.idleKnown {
		a.PutInt("cuda.launch.stream_idle", int64(l.gap.idleNS))
	}
	if l.gap.known {
		a.PutInt("cuda.launch.host_wait", int64(l.gap.hostWaitNS))
	}
	if l.gpu.warps > 0 {
		a.PutInt("cuda.warps.observed", int64(l.gpu.warps))
		a.PutInt("cuda.warps.expected", int64(expectedWarps(r)))
		a.PutInt("cuda.warp.exit_skew.max", int64(l.gpu.maxSkew))
	}
	if ds, de, ok := so.o.window(l); ok {
		fs, ok1 := so.o.toReal(l.key.src, r.Device, ds)
		le, ok2 := so.o.toReal(l.key.src, r.Device, de)
		if ok1 && ok2 {
			child(SpanQueued, start, max(start, pcommon.Timestamp(fs)))
			child(SpanExecuting, pcommon.Timestamp(fs), pcommon.Timestamp(le))
			execEnd = max(execEnd, pcommon.Timestamp(le))
		}
	}
	if l.completed {
		child(SpanCompletion, execEnd, so.mono(l.key.src, l.completeNS))
	}
	root.SetEndTimestamp(end)
	so.nSpans++
}

func (so *spanOut) onSync(src uint32, s *record.Sync) {
	a, ok := so.hostSpan(SpanSync, src, s.PID, s.StartNS, s.EndNS)
	if !ok {
		return
	}
	a.PutStr("cuda.sync.kind", s.Kind.String())
	a.PutInt("cuda.device.index", deviceIndex(s.Device))
	a.PutInt("cuda.stream", int64(s.Stream))
	a.PutInt("thread.id", int64(s.TID))
}

func (so *spanOut) memcpySpan(src uint32, m *record.Memcpy) {
	a, ok := so.hostSpan(SpanMemcpy, src, m.PID, m.StartNS, m.EndNS)
	if !ok {
		return
	}
	a.PutStr("cuda.memcpy.kind", m.Kind.String())
	a.PutInt("cuda.memcpy.size", int64(m.Bytes))
	a.PutBool("cuda.memcpy.async", m.Flags&record.MemcpyAsync != 0)
	so.res.putDevice(a, src, m.Device)
	a.PutInt("cuda.stream", int64(m.Stream))
	a.PutInt("thread.id", int64(m.TID))
}

// hostSpan appends the span of a host call (a sync or a copy) of process
// pid and returns its attributes, or false when sampling or the span cap
// drops the call.
func (so *spanOut) hostSpan(name string, src, pid uint32, startNS, endNS uint64) (pcommon.Map, bool) {
	if !sampled(srcKey{pid, startNS}, so.o.Sampling.OneIn) || !so.limit.admit(pid, 1) {
		return pcommon.Map{}, false
	}
	sp := so.spansOf(pid).AppendEmpty()
	sp.SetTraceID(otelid.NewTraceID())
	sp.SetSpanID(otelid.NewSpanID())
	sp.SetName(name)
	sp.SetStartTimestamp(so.mono(src, startNS))
	sp.SetEndTimestamp(so.mono(src, endNS))
	so.nSpans++
	return sp.Attributes(), true
}
