package translate

import (
	"slices"
	"strconv"
	"strings"

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
	policy   *tracePolicy  // sampling::traces_per_second_* and anomalies (tracepolicy.go)
	examples *exemplarBook // the kept launch traces, for the metrics (tracepolicy_exemplars.go)
	sym      stackSym      // symbolises kept launches' stacks (stacks.go)
	hw       *hwCounters   // the device's counters over a launch's window (hwcounters.go)

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

// launchSpans appends the launch span and its phase children, at times
// tm, kept by the trace policy for reason why (keepReasons), and keeps
// the trace as an exemplar of l's series s.
func (so *spanOut) launchSpans(l *launch, tm *launchTimes, why int, s *devSeries) {
	if !so.limit.admit(l.rec.PID, so.launchSpanCount(l, tm)) {
		so.policy.out[outSpanRate]++
		return
	}
	so.policy.kept[why]++
	r := &l.rec
	ss := so.spansOf(r.PID)
	tid, top := traceOf(&l.host.app)
	parent := so.hostParents(ss, l, tid, top)
	root := ss.AppendEmpty()
	root.SetTraceID(tid)
	rootID := otelid.NewSpanID()
	root.SetSpanID(rootID)
	root.SetParentSpanID(parent)
	root.SetName(l.k.name)
	root.SetKind(ptrace.SpanKindInternal)
	start, end := pcommon.Timestamp(tm.enqReal), pcommon.Timestamp(tm.retReal)
	root.SetStartTimestamp(start)
	so.examples.add(s, exemplar{trace: tid, span: rootID, ts: start, execS: float64(tm.execNS) / 1e9, haveExec: tm.haveExec, why: why})

	a := root.Attributes()
	a.EnsureCapacity(22)
	a.PutStr("cuda.kernel.name", l.k.name)
	a.PutStr("cuda.kernel.mangled_name", l.k.mangled)
	a.PutInt("cuda.launch.id", int64(r.LaunchID))
	if l.graph.chain != nil {
		a.PutInt("cuda.graph.replay", int64(l.graph.replay))
	}
	a.PutStr("cuda.launch.api", r.API.String())
	if r.API == record.APILaunchCooperativeKernel || r.Flags&record.LaunchCooperative != 0 {
		a.PutBool("cuda.launch.cooperative", true)
	}
	if r.Flags&record.LaunchCluster != 0 {
		a.PutBool("cuda.launch.cluster", true)
	}
	if r.Flags&record.LaunchUnprobed != 0 && so.o.ExpectWarps {
		// Device probes are on, but this launch ran none (kernel not
		// patched, or left out by sampling::device_one_in): no phases.
		a.PutBool("cuda.launch.probed", false)
	}
	if r.Flags&record.LaunchPreswap != 0 {
		// Its kernel's patched image was still compiling: it ran the
		// original kernel, windows only.
		a.PutBool("cuda.launch.preswap", true)
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
	a.PutStr(AttrSamplingReason, keepReasons[why])
	if l.host.app.set() {
		a.PutStr(AttrParentSource, l.host.app.source.String())
	}
	so.putStack(a, r.PID, l.host.app.stack)
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
	child(SpanLaunchCall, start, pcommon.Timestamp(tm.retReal))
	so.hostChildren(ss, l, tid, rootID)

	execEnd := pcommon.Timestamp(tm.retReal)
	if l.gpu.exec != nil {
		a.PutInt("cuda.blocks.observed", int64(l.gpu.exec.Blocks))
		a.PutInt("cuda.threads.observed", int64(l.gpu.exec.Threads))
	}
	if rt := l.route(); rt != routeNone {
		a.PutStr("cuda.launch.window", rt.String())
	}
	if w := l.gpu.win; w.ok && !w.untimed && !w.whole && so.hw != nil {
		so.hw.putSpan(a, gpuID(so.res.devicesOf(l.key.src), l.key.src, r.Device), w.start, w.end)
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
	if tm.dev {
		fs, le := tm.startReal, tm.endReal
		if tm.startOK && tm.endOK {
			child(SpanQueued, start, max(start, pcommon.Timestamp(fs)))
			child(SpanExecuting, pcommon.Timestamp(fs), pcommon.Timestamp(le))
			execEnd = max(execEnd, pcommon.Timestamp(le))
		}
	}
	if l.completed {
		child(SpanCompletion, execEnd, pcommon.Timestamp(tm.doneReal))
	}
	root.SetEndTimestamp(end)
	so.nSpans++
}

func (so *spanOut) onSync(src uint32, s *record.Sync, app appSpan) {
	a, ok := so.hostSpan(SpanSync, src, s.PID, s.StartNS, s.EndNS, &app)
	if !ok {
		return
	}
	a.PutStr("cuda.sync.kind", s.Kind.String())
	a.PutInt("cuda.device.index", deviceIndex(s.Device))
	a.PutInt("cuda.stream", int64(s.Stream))
	a.PutInt("thread.id", int64(s.TID))
}

func (so *spanOut) memcpySpan(src uint32, m *record.Memcpy, app appSpan) {
	a, ok := so.hostSpan(SpanMemcpy, src, m.PID, m.StartNS, m.EndNS, &app)
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
// pid, made under application span app (a child of it; none: a trace of
// its own), and returns its attributes, or false when sampling or the
// span cap drops the call.
func (so *spanOut) hostSpan(name string, src, pid uint32, startNS, endNS uint64, app *appSpan) (pcommon.Map, bool) {
	why := keepHead
	if app.sampled() {
		why = keepParent
	}
	if !so.admitHost(pid, startNS, 1, why) {
		return pcommon.Map{}, false
	}
	sp := so.spansOf(pid).AppendEmpty()
	tr, parent := traceOf(app)
	sp.SetTraceID(tr)
	sp.SetSpanID(otelid.NewSpanID())
	sp.SetParentSpanID(parent)
	sp.SetName(name)
	sp.SetStartTimestamp(so.mono(src, startNS))
	sp.SetEndTimestamp(so.mono(src, endNS))
	so.nSpans++
	sp.Attributes().PutStr(AttrSamplingReason, keepReasons[why])
	if app.set() {
		sp.Attributes().PutStr(AttrParentSource, app.source.String())
	}
	return sp.Attributes(), true
}

// admitHost says whether a host-call trace of process pid, of n spans,
// kept for reason why (keepHead, or keepParent under a sampled
// application span, which skips one_in), is built: sampling::one_in (on
// key), the trace policy, then limits::spans_per_second; the trace's
// fate is counted.
func (so *spanOut) admitHost(pid uint32, key uint64, n int, why int) bool {
	tp := so.policy
	switch {
	case why != keepParent && !sampled(srcKey{pid, key}, so.o.Sampling.OneIn):
		tp.out[outOneIn]++
	case !tp.host(pid):
	case !so.limit.admit(pid, n):
		tp.out[outSpanRate]++
	default:
		tp.kept[why]++
		return true
	}
	return false
}

// Metric names of the host probes (documented in receiver/README.md and
// metadata.yaml).
const (
	MetricHostCallDuration = "gpu.cuda.host.call.duration"
	MetricApproxKernels    = "gpu.cuda.kernel.approximate.spans"
)

// hostAPISlots is one more than the largest HostAPI number.
const hostAPISlots = 128

// apiMeta is what spans and rules need of a HostAPI, precomputed.
type apiMeta struct {
	name      string
	category  string
	async     bool
	driver    bool
	perThread bool // a _ptsz/_ptds entry point: stream 0 is the per-thread default stream
}

var apiTable = func() (tab [hostAPISlots]apiMeta) {
	for i := range tab {
		a := record.HostAPI(i)
		tab[i] = apiMeta{name: a.String(), category: a.Category().String(), async: a.Async(), driver: a.Driver(),
			perThread: strings.HasSuffix(a.String(), "_ptsz") || strings.HasSuffix(a.String(), "_ptds")}
	}
	return tab
}()

// apiInfo returns the precomputed facts of a.
func apiInfo(a record.HostAPI) *apiMeta {
	if int(a) < len(apiTable) {
		return &apiTable[a]
	}
	return &apiTable[0]
}

// emitTree appends the span of c under parent (empty: a root) in trace tr,
// then its children under it, and returns its span id. kernel is the
// kernel name of a launch call ("" when unknown).
func (so *spanOut) emitTree(ss ptrace.SpanSlice, c *hostCall, tr pcommon.TraceID, parent pcommon.SpanID, kernel string) pcommon.SpanID {
	id := so.hostCallSpan(ss, &c.rec, tr, parent, kernel)
	for _, d := range c.children {
		k := ""
		if d.rec.API.Category() == record.HostCatLaunch {
			k = kernel
		}
		so.emitTree(ss, d, tr, id, k)
	}
	return id
}

// hostCallSpan appends the span of one host API call and returns its id.
func (so *spanOut) hostCallSpan(ss ptrace.SpanSlice, r *record.HostCall, tr pcommon.TraceID, parent pcommon.SpanID, kernel string) pcommon.SpanID {
	m := apiInfo(r.API)
	sp := ss.AppendEmpty()
	id := otelid.NewSpanID()
	sp.SetTraceID(tr)
	sp.SetSpanID(id)
	sp.SetParentSpanID(parent)
	sp.SetName(m.name)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetStartTimestamp(so.mono(HostProbeSource, r.EnterNS))
	sp.SetEndTimestamp(so.mono(HostProbeSource, r.ExitNS))
	so.nSpans++

	a := sp.Attributes()
	a.EnsureCapacity(16)
	a.PutStr("code.function.name", m.name)
	a.PutStr("cuda.api.category", m.category)
	a.PutInt("process.pid", int64(r.PID))
	a.PutInt("thread.id", int64(r.TID))
	a.PutBool("cuda.api.async", m.async)
	if r.Flags&record.HostCallReturned != 0 {
		a.PutInt("cuda.api.return_code", int64(r.Ret))
		if r.Ret != 0 {
			sp.Status().SetCode(ptrace.StatusCodeError)
			a.PutStr("error.type", errorType(int64(r.Ret), m.driver))
			if m.driver {
				sp.Status().SetMessage("CUresult " + strconv.Itoa(int(r.Ret)))
			} else {
				sp.Status().SetMessage("cudaError_t " + strconv.Itoa(int(r.Ret)))
			}
		}
	} else {
		a.PutBool("cuda.api.returned", false)
	}
	if r.Flags&record.HostCallArgsFaulted != 0 {
		a.PutBool("cuda.api.args_faulted", true)
	}
	switch r.API.Category() {
	case record.HostCatLaunch:
		putLaunchArgs(a, r)
		if kernel != "" {
			a.PutStr("cuda.kernel.name", kernel)
		}
	case record.HostCatMemcpy:
		a.PutInt("cuda.memcpy.size", int64(r.Args[2]))
		a.PutStr("cuda.memcpy.kind", memcpyKind(r).String())
		if m.async {
			a.PutInt("cuda.stream", int64(r.Args[4]))
		}
	case record.HostCatAlloc:
		a.PutInt("cuda.memory.size", int64(r.Args[0]))
		a.PutInt("cuda.memory.address", int64(r.Args[1]))
		if m.async {
			a.PutInt("cuda.stream", int64(r.Args[4]))
		}
	case record.HostCatFree:
		a.PutInt("cuda.memory.address", int64(r.Args[0]))
		if m.async {
			a.PutInt("cuda.stream", int64(r.Args[4]))
		}
	case record.HostCatSync:
		switch r.API {
		case record.HostCudaEventSynchronize, record.HostCuEventSynchronize:
			a.PutInt("cuda.event", int64(r.Args[0]))
		case record.HostCudaDeviceSynchronize, record.HostCuCtxSynchronize:
		default:
			a.PutInt("cuda.stream", int64(r.Args[0]))
		}
	case record.HostCatGraphLaunch:
		a.PutInt("cuda.graph.exec", int64(r.Args[0]))
		a.PutInt("cuda.stream", int64(r.Args[5]))
	case record.HostCatCapture:
		a.PutInt("cuda.stream", int64(r.Args[0]))
		switch r.API {
		case record.HostCudaStreamBeginCapture, record.HostCudaStreamBeginCapturePtsz,
			record.HostCuStreamBeginCaptureV2, record.HostCuStreamBeginCaptureV2Ptsz:
			if r.Args[1] < uint64(len(captureModes)) {
				a.PutStr("cuda.graph.capture_mode", captureModes[r.Args[1]])
			}
		case record.HostCudaStreamBeginCaptureToGraph, record.HostCudaStreamBeginCaptureToGraphPtsz,
			record.HostCuStreamBeginCaptureToGraph, record.HostCuStreamBeginCaptureToGraphPtsz:
			a.PutInt("cuda.graph", int64(r.Args[1]))
		}
	case record.HostCatStream:
		a.PutInt("cuda.stream", int64(r.Args[0]))
		if r.API.CreatesStream() {
			a.PutInt("cuda.stream_flags", int64(uint32(r.Args[1])))
		}
	case record.HostCatEvent:
		if r.API.WaitsEvent() {
			a.PutInt("cuda.stream", int64(r.Args[0]))
			a.PutInt("cuda.event", int64(r.Args[1]))
		} else {
			a.PutInt("cuda.event", int64(r.Args[0]))
			a.PutInt("cuda.stream", int64(r.Args[1]))
		}
	}
	return id
}

// emitStandalone emits host call c of process pid and its children as a
// trace of their own and returns c's span (false when sampling or the span
// cap left the trace out). kernel names a launch call's kernel ("":
// unknown).
func (so *spanOut) emitStandalone(pid uint32, c *hostCall, kernel string) (ptrace.Span, bool) {
	if !so.admitHost(pid, c.rec.EnterNS, treeSize(c), keepHead) {
		return ptrace.Span{}, false
	}
	ss := so.spansOf(pid)
	i := ss.Len()
	so.emitTree(ss, c, otelid.NewTraceID(), pcommon.SpanID{}, kernel)
	root := ss.At(i)
	root.Attributes().PutStr(AttrSamplingReason, keepReasons[keepHead])
	return root, true
}

// emitApprox emits launch ol of process pid, closed by sync, with its
// approximate kernel span (graph span for a graph launch).
func (so *spanOut) emitApprox(pid uint32, ol *openLaunch, sync *record.HostCall) {
	r := &ol.call.rec
	graph := r.API.Category() == record.HostCatGraphLaunch
	if graph {
		so.counters.ApproxGraphs++
	} else {
		so.counters.ApproxSpans++
	}
	if !so.admitHost(pid, r.EnterNS, treeSize(ol.call)+1, keepHead) {
		return
	}
	ss := so.spansOf(pid)
	tr := otelid.NewTraceID()
	name := ol.kernel.name
	if graph {
		name = "cuda.graph"
	}
	parent := so.emitTree(ss, ol.call, tr, pcommon.SpanID{}, ol.kernel.name)
	sp := ss.AppendEmpty()
	sp.SetTraceID(tr)
	sp.SetSpanID(otelid.NewSpanID())
	sp.SetParentSpanID(parent)
	sp.SetName(name)
	sp.SetKind(ptrace.SpanKindInternal)
	start := so.mono(HostProbeSource, r.EnterNS)
	sp.SetStartTimestamp(start)
	sp.SetEndTimestamp(max(start, so.mono(HostProbeSource, sync.ExitNS)))
	so.nSpans++
	a := sp.Attributes()
	a.EnsureCapacity(14)
	if graph {
		a.PutInt("cuda.graph.exec", int64(r.Args[0]))
		a.PutInt("cuda.stream", int64(r.Args[5]))
		a.PutBool("cuda.graph.approximate", true)
		a.PutStr("cuda.graph.approximate.closed_by", sync.API.String())
	} else {
		a.PutStr("cuda.kernel.name", ol.kernel.name)
		if ol.kernel.mangled != "" {
			a.PutStr("cuda.kernel.mangled_name", ol.kernel.mangled)
		}
		a.PutBool("cuda.kernel.approximate", true)
		a.PutStr("cuda.kernel.approximate.closed_by", sync.API.String())
		putLaunchArgs(a, r)
	}
	a.PutInt("process.pid", int64(r.PID))
	a.PutInt("thread.id", int64(r.TID))
	a.PutStr(AttrSamplingReason, keepReasons[keepHead])
}

// captureModes names cudaStreamCaptureMode / CUstreamCaptureMode values.
var captureModes = [...]string{"global", "thread_local", "relaxed"}

// memcpyKind is the direction of a copy call: the probe's argument, else
// what the driver entry point implies.
func memcpyKind(r *record.HostCall) record.MemcpyKind {
	if k := record.MemcpyKind(r.Args[3]); k != record.MemcpyUnknown && k <= record.MemcpyPeer {
		return k
	}
	switch r.API {
	case record.HostCuMemcpyHtoD, record.HostCuMemcpyHtoDAsync:
		return record.MemcpyHostToDevice
	case record.HostCuMemcpyDtoH, record.HostCuMemcpyDtoHAsync:
		return record.MemcpyDeviceToHost
	case record.HostCuMemcpyDtoD, record.HostCuMemcpyDtoDAsync:
		return record.MemcpyDeviceToDevice
	}
	return record.MemcpyUnknown
}

// putLaunchArgs puts the grid, block, shared memory and stream of a launch
// call, named as on the shim's launch spans.
func putLaunchArgs(a pcommon.Map, r *record.HostCall) {
	g, b := r.Grid(), r.Block()
	a.PutInt("cuda.grid.x", int64(g[0]))
	a.PutInt("cuda.grid.y", int64(g[1]))
	a.PutInt("cuda.grid.z", int64(g[2]))
	a.PutInt("cuda.block.x", int64(b[0]))
	a.PutInt("cuda.block.y", int64(b[1]))
	a.PutInt("cuda.block.z", int64(b[2]))
	a.PutInt("cuda.shared_memory.size", int64(uint32(r.Args[4])))
	a.PutInt("cuda.stream", int64(r.Args[5]))
}

// hostParents emits the runtime launch calls nested with shim launch l
// (outermost first, each inside the previous, the outermost a child of
// span top) in trace tr and returns the innermost one's span id, the
// launch span's parent (top when none).
func (so *spanOut) hostParents(ss ptrace.SpanSlice, l *launch, tr pcommon.TraceID, top pcommon.SpanID) pcommon.SpanID {
	parent := top
	if len(l.host.calls) == 0 {
		return parent
	}
	var runtime []*hostCall
	for _, c := range l.host.calls {
		if !apiInfo(c.rec.API).driver {
			runtime = append(runtime, c)
		}
	}
	slices.SortStableFunc(runtime, func(a, b *hostCall) int {
		if a.rec.EnterNS != b.rec.EnterNS {
			return cmpU64(a.rec.EnterNS, b.rec.EnterNS)
		}
		return cmpU64(b.rec.ExitNS, a.rec.ExitNS)
	})
	for _, c := range runtime {
		parent = so.hostCallSpan(ss, &c.rec, tr, parent, l.k.name)
	}
	return parent
}

// hostChildren emits the driver launch calls nested with shim launch l
// under its span.
func (so *spanOut) hostChildren(ss ptrace.SpanSlice, l *launch, tr pcommon.TraceID, launchSpan pcommon.SpanID) {
	for _, c := range l.host.calls {
		if apiInfo(c.rec.API).driver {
			so.hostCallSpan(ss, &c.rec, tr, launchSpan, l.k.name)
		}
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// error.type of a failed CUDA call (semantic conventions: a low-
// cardinality name of the error class): the enumerator's name of the
// codes below, else the code in decimal. Codes from cuda.h (CUresult) and
// driver_types.h (cudaError_t); the common ones only, as the rest stay
// readable by number.
var (
	cuResultNames = map[int64]string{
		1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
		4: "CUDA_ERROR_DEINITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
		200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
		218: "CUDA_ERROR_INVALID_PTX", 400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND",
		600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
		702: "CUDA_ERROR_LAUNCH_TIMEOUT", 719: "CUDA_ERROR_LAUNCH_FAILED", 720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
		800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 999: "CUDA_ERROR_UNKNOWN",
	}
	cudaErrorNames = map[int64]string{
		1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 3: "cudaErrorInitializationError",
		4: "cudaErrorCudartUnloading", 9: "cudaErrorInvalidConfiguration", 98: "cudaErrorInvalidDeviceFunction",
		100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 209: "cudaErrorNoKernelImageForDevice",
		400: "cudaErrorInvalidResourceHandle", 600: "cudaErrorNotReady", 700: "cudaErrorIllegalAddress",
		701: "cudaErrorLaunchOutOfResources", 719: "cudaErrorLaunchFailure", 801: "cudaErrorNotSupported",
		999: "cudaErrorUnknown",
	}
)

// errorType names a nonzero return code of a driver (CUresult) or runtime
// (cudaError_t) call.
func errorType(code int64, driver bool) string {
	names := cudaErrorNames
	if driver {
		names = cuResultNames
	}
	if n, ok := names[code]; ok {
		return n
	}
	return strconv.FormatInt(code, 10)
}
