package translate

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"github.com/gpuprobe/gpuprobe/receiver/internal/otelid"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

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
	if !sampled(srcKey{pid, c.rec.EnterNS}, so.o.Sampling.OneIn) || !so.limit.admit(pid, treeSize(c)) {
		return ptrace.Span{}, false
	}
	ss := so.spansOf(pid)
	i := ss.Len()
	so.emitTree(ss, c, otelid.NewTraceID(), pcommon.SpanID{}, kernel)
	return ss.At(i), true
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
	if !sampled(srcKey{pid, r.EnterNS}, so.o.Sampling.OneIn) || !so.limit.admit(pid, treeSize(ol.call)+1) {
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
// (outermost first, each inside the previous) in trace tr and returns the
// innermost one's span id, the launch span's parent (empty when none).
func (so *spanOut) hostParents(ss ptrace.SpanSlice, l *launch, tr pcommon.TraceID) pcommon.SpanID {
	var parent pcommon.SpanID
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

// appendMetrics writes the host call duration histograms (per API) and
// the count of approximate kernel spans.
func (ht *hostTable) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	dur := newHistOut(sm, MetricHostCallDuration, "s", "Duration of CUDA runtime and driver API calls seen by the host probes, per API.",
		ht.o.Metrics.DurationBounds != nil)
	for _, a := range record.HostAPIs() {
		h := &ht.dur[a]
		if h.Count() == 0 {
			continue
		}
		attrs := dur.add(h, ht.start, ts)
		attrs.PutStr("cuda.api.name", apiInfo(a).name)
		attrs.PutStr("cuda.api.category", apiInfo(a).category)
	}
	if ht.counters.ApproxSpans > 0 {
		dp := newSum(sm, MetricApproxKernels, "{span}",
			"Approximate kernel spans (launch call to the sync that covered it) of processes without the shim.").AppendEmpty()
		dp.SetStartTimestamp(ht.start)
		dp.SetTimestamp(ts)
		dp.SetIntValue(int64(ht.counters.ApproxSpans))
	}
}

// hostDurations holds one histogram per HostAPI number.
type hostDurations [hostAPISlots]exphist.Hist
