package translate

// GPU shares: every driver window also goes to the per-GPU attribution
// (receiver/internal/gputime), keyed by the device's UUID (a MIG
// instance's own), so that the windows of all processes on one GPU are
// split into GPU time that sums to the GPU's busy time. Its results are
// gpu.cuda.process.time and .utilization on each process's resource
// (with exemplars to the kernels that took the most) and
// gpu.cuda.device.time and .utilization on the collector's.

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Names of the GPU-time metrics.
const (
	MetricProcessGPUTime = "gpu.cuda.process.time"
	MetricProcessGPUUtil = "gpu.cuda.process.utilization"
	MetricDeviceGPUTime  = "gpu.cuda.device.time"
	MetricDeviceGPUUtil  = "gpu.cuda.device.utilization"
)

// shareKernel is a kernel of a process as the attribution names it
// (record.NameHash of its mangled name).
type shareKernel struct {
	name   string
	series *series
}

// gpuShares feeds the attribution and keeps what its metrics need.
type gpuShares struct {
	mu      sync.Mutex // the Node's Translators share it: every method locks
	a       *gputime.Attributor
	start   pcommon.Timestamp
	kernels map[uint32]map[uint32]shareKernel // pid → name hash → kernel (≤ gputime.DefaultMaxKernels each)
	ordinal map[string]map[uint32]uint32      // GPU id → pid → its device ordinal there
	snap    map[uint32][]procShare            // pid → its shares at the last emission
	unowned uint64                            // windows of clients without a pid, not attributed
}

// procShare is one process's share of one GPU at an emission.
type procShare struct {
	gpu   string
	index uint32
	t     gputime.ProcTime
}

func newGPUShares(o gputime.Options, start pcommon.Timestamp) *gpuShares {
	return &gpuShares{a: gputime.New(o), start: start,
		kernels: map[uint32]map[uint32]shareKernel{}, ordinal: map[string]map[uint32]uint32{}}
}

// gpuID is the attribution's key of device d of source src: its UUID, or
// where src did not report one, a key of src's own (its windows share
// with no other client's).
func gpuID(devs map[uint32]string, src, d uint32) string {
	if u, ok := devs[d]; ok {
		return u
	}
	return "src-" + strconv.FormatUint(uint64(src), 10) + "-" + strconv.FormatUint(uint64(d), 10)
}

// add gives window w of source src, whose process is pid and devices
// devs, to the attribution; k is the kernel of the launch it joined (nil:
// none).
func (gs *gpuShares) add(src, pid uint32, devs map[uint32]string, w *record.Window, k *kernel, mono func(uint32, uint64) (uint64, bool), now time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if pid == 0 {
		gs.unowned++
		return
	}
	s, ok1 := mono(src, w.StartNS)
	e, ok2 := mono(src, w.EndNS)
	if !ok1 || !ok2 {
		gs.unowned++
		return
	}
	id := gpuID(devs, src, w.Device)
	if k != nil && k.series != nil {
		ks := gs.kernels[pid]
		if ks == nil {
			ks = map[uint32]shareKernel{}
			gs.kernels[pid] = ks
		}
		if _, ok := ks[w.NameHash]; ok || len(ks) < gputime.DefaultMaxKernels {
			ks[w.NameHash] = shareKernel{name: k.series.name, series: k.series}
		}
	}
	ords := gs.ordinal[id]
	if ords == nil && len(gs.ordinal) < gputime.DefaultMaxGPUs {
		ords = map[uint32]uint32{}
		gs.ordinal[id] = ords
	}
	if ords != nil && len(ords) < gputime.DefaultMaxProcs {
		ords[pid] = w.Device
	}
	gs.a.Add(id, gputime.Window{Proc: pid, Kernel: w.NameHash, Start: int64(s), End: int64(e)}, now.UnixNano())
}

// GPUTimeCounters are what the attribution of shared GPUs did not take
// as it came, and the windows it never got (of clients without a pid or
// a clock mapping).
type GPUTimeCounters struct {
	gputime.Counters
	Unowned uint64
}

// GPUTimeCounters returns the attribution's counters so far.
func (t *Translator) GPUTimeCounters() GPUTimeCounters { return t.shares.counters() }

// counters returns the attribution's counters so far.
func (gs *gpuShares) counters() GPUTimeCounters {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return GPUTimeCounters{Counters: gs.a.Counters(), Unowned: gs.unowned}
}

// forget marks process pid gone.
func (gs *gpuShares) forget(pid uint32) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.a.Forget(pid)
	delete(gs.kernels, pid)
}

// appendMetrics settles the windows before now − lag, writes each GPU's
// time and utilization into sm (the collector's scope) and keeps each
// process's for appendProc.
func (gs *gpuShares) appendMetrics(sm pmetric.MetricSlice, now time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.a.Settle(now.UnixNano())
	snap := gs.a.Snapshot()
	ts := pcommon.NewTimestampFromTime(now)
	gs.snap = map[uint32][]procShare{}
	if len(snap) == 0 {
		return
	}
	busy := newSum(sm, MetricDeviceGPUTime, "s", "Time some kernel of an instrumented process ran on the GPU (the union of their windows).")
	util := newGauge(sm, MetricDeviceGPUUtil, "1", "Share of the last settled interval that some kernel of an instrumented process ran on the GPU.")
	for _, g := range snap {
		dp := busy.AppendEmpty()
		dp.SetStartTimestamp(gs.start)
		dp.SetTimestamp(ts)
		dp.SetDoubleValue(g.BusySeconds)
		putUUID(dp.Attributes(), g.ID)
		if g.SpanSeconds > 0 {
			dp := util.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(g.Busy)
			putUUID(dp.Attributes(), g.ID)
		}
		for _, p := range g.Procs {
			gs.snap[p.Proc] = append(gs.snap[p.Proc], procShare{gpu: g.ID, index: gs.ordinal[g.ID][p.Proc], t: p})
		}
	}
	for id, ords := range gs.ordinal {
		for pid := range ords {
			if _, ok := gs.snap[pid]; !ok {
				delete(ords, pid)
			}
		}
		if len(ords) == 0 {
			delete(gs.ordinal, id)
		}
	}
}

// appendProc writes process pid's GPU time and utilization per GPU into
// sm (its resource's scope), the time with an exemplar per kernel that
// took the most (a kept trace of it when this emission has one).
func (gs *gpuShares) appendProc(sm pmetric.MetricSlice, pid uint32, start, ts pcommon.Timestamp, ex *exemplarBook) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	shares := gs.snap[pid]
	if len(shares) == 0 {
		return
	}
	tm := newSum(sm, MetricProcessGPUTime, "s", "GPU time attributed to the process: its kernels' windows with the time other processes' kernels ran in them taken out.")
	util := newGauge(sm, MetricProcessGPUUtil, "1", "The process's share of the GPU over the last settled interval.")
	for _, s := range shares {
		dp := tm.AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		dp.SetDoubleValue(s.t.Seconds)
		shareAttrs(dp.Attributes(), s)
		for _, k := range s.t.Top {
			x := dp.Exemplars().AppendEmpty()
			x.SetTimestamp(ts)
			x.SetDoubleValue(k.Seconds)
			name := "other"
			if sk, ok := gs.kernels[pid][k.Kernel]; ok && k.Kernel != 0 {
				name = sk.name
				for _, d := range sk.series.devs {
					if es := ex.bySeries[d]; d.device == s.index && len(es) > 0 {
						x.SetTraceID(es[0].trace)
						x.SetSpanID(es[0].span)
						break
					}
				}
			}
			x.FilteredAttributes().PutStr("cuda.kernel.name", name)
		}
		if s.t.Share > 0 || s.t.Seconds > 0 {
			dp := util.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(s.t.Share)
			shareAttrs(dp.Attributes(), s)
		}
	}
}

// has reports whether process pid had a share at the last emission.
func (gs *gpuShares) has(pid uint32) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return len(gs.snap[pid]) > 0
}

// flush settles every window so far.
func (gs *gpuShares) flush(now time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.a.Flush(now.UnixNano())
}

func shareAttrs(a pcommon.Map, s procShare) {
	a.PutInt("cuda.device.index", deviceIndex(s.index))
	putUUID(a, s.gpu)
}

// putUUID puts GPU id as cuda.device.uuid unless it is a client's own key.
func putUUID(a pcommon.Map, id string) {
	if !strings.HasPrefix(id, "src-") {
		a.PutStr("cuda.device.uuid", id)
	}
}

// newGauge appends a gauge with its name, unit and description.
func newGauge(sm pmetric.MetricSlice, name, unit, desc string) pmetric.NumberDataPointSlice {
	m := newMetric(sm, name, unit, desc)
	return m.SetEmptyGauge().DataPoints()
}

// pid is p's process id: its key's, else its resource's (0: none).
func (p *procSeries) pid() uint32 {
	if p.key.pid != 0 {
		return p.key.pid
	}
	if v, ok := p.res.Get("process.pid"); ok && v.Type() == pcommon.ValueTypeInt && v.Int() > 0 && v.Int() <= math.MaxUint32 {
		return uint32(v.Int())
	}
	return 0
}
