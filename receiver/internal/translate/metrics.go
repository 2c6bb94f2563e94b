package translate

import (
	"slices"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Metric names (documented in receiver/README.md and metadata.yaml).
const (
	MetricLaunches       = "gpu.cuda.kernel.launches"
	MetricExecDuration   = "gpu.cuda.kernel.execution.duration"
	MetricQueueDuration  = "gpu.cuda.kernel.queue.duration"
	MetricHostWait       = "gpu.cuda.kernel.host_wait.duration"
	MetricWarpDuration   = "gpu.cuda.warp.execution.duration"
	MetricWarpExitSkew   = "gpu.cuda.warp.exit_skew"
	MetricThreadExecs    = "gpu.cuda.thread.executions"
	MetricThreadSeries   = "gpu.cuda.thread.executions.by_thread"
	MetricMemcpyBytes    = "gpu.cuda.memcpy.bytes"
	MetricMemcpyDuration = "gpu.cuda.memcpy.duration"
)

type memcpyKey struct {
	device uint32
	kind   record.MemcpyKind
}

type memcpySeries struct {
	bytes    uint64
	duration exphist.Hist
}

func (t *Translator) onMemcpy(src uint32, m *record.Memcpy) {
	t.clients.procOf(src).addMemcpy(m)
	t.spans.memcpySpan(src, m, t.clients.spanOf(src, m.TID))
}

// addMemcpy folds one memory copy into its (device, kind) series; past
// MaxSeries, into the kind's series on OtherDevice.
func (p *procSeries) addMemcpy(m *record.Memcpy) {
	k := memcpyKey{m.Device, m.Kind}
	s := p.memcpy[k]
	if s == nil && !p.take() {
		k.device = OtherDevice
		s = p.memcpy[k]
	}
	if s == nil {
		s = &memcpySeries{}
		s.duration.SetBounds(p.store.o.Metrics.DurationBounds)
		p.memcpy[k] = s
		p.mcOrder = append(p.mcOrder, k)
	}
	s.bytes += m.Bytes
	s.duration.Record(float64(m.EndNS-m.StartNS) / 1e9)
}

// SelfMetric is one self-telemetry counter added to the metrics output.
type SelfMetric struct {
	Name  string
	Unit  string
	Desc  string
	Value uint64
}

// AppendMetrics writes the cumulative metrics of no process into sm (one
// scope's slice): the host calls' and the self-metrics.
func (t *Translator) AppendMetrics(sm pmetric.MetricSlice, now time.Time, self []SelfMetric) {
	ts := pcommon.NewTimestampFromTime(now)
	t.launches.hosts.appendMetrics(sm, ts, t.ownsNode)
	t.launches.windows.appendMetrics(sm, ts)
	if t.ownsNode {
		t.shares.appendMetrics(sm, now)
		if mono, ok := t.monoNow(now); ok {
			t.hw.settle(mono)
		}
	}
	t.spans.limit.appendMetrics(sm, ts)
	t.spans.policy.appendMetrics(sm, ts)
	for _, c := range self {
		dp := newSum(sm, c.Name, c.Unit, c.Desc).AppendEmpty()
		dp.SetStartTimestamp(t.start)
		dp.SetTimestamp(ts)
		dp.SetIntValue(int64(c.Value))
	}
	dropEmpty(sm)
}

// dropEmpty drops metrics that got no data point (e.g. no warps observed
// yet).
func dropEmpty(sm pmetric.MetricSlice) {
	sm.RemoveIf(func(m pmetric.Metric) bool {
		switch m.Type() {
		case pmetric.MetricTypeSum:
			return m.Sum().DataPoints().Len() == 0
		case pmetric.MetricTypeExponentialHistogram:
			return m.ExponentialHistogram().DataPoints().Len() == 0
		case pmetric.MetricTypeHistogram:
			return m.Histogram().DataPoints().Len() == 0
		}
		return false
	})
}

// appendProcs appends one resource per process that has series, with the
// exemplars of ex, and marks the gone ones emitted.
func (st *seriesStore) appendProcs(rms pmetric.ResourceMetricsSlice, ts pcommon.Timestamp, ex *exemplarBook) {
	procs := st.order
	if st.overflow != nil {
		procs = append(procs[:len(procs):len(procs)], st.overflow)
	}
	for _, p := range procs {
		if p.refs == 0 && !p.flushed && p != st.overflow {
			p.flushed = true
			st.countEvictable(p, 1)
		}
		if len(p.order) == 0 && len(p.other.devs) == 0 && len(p.mcOrder) == 0 && (st.shares == nil || !st.shares.has(p.pid())) && (st.hw == nil || !st.hw.has(p.pid())) {
			continue
		}
		rm := rms.AppendEmpty()
		p.res.CopyTo(rm.Resource().Attributes())
		sc := rm.ScopeMetrics().AppendEmpty()
		sc.Scope().SetName(ScopeName)
		p.appendMetrics(sc.Metrics(), p.start, ts, ex)
		if st.shares != nil {
			st.shares.appendProc(sc.Metrics(), p.pid(), p.start, ts, ex)
		}
		if st.hw != nil {
			st.hw.appendProc(sc.Metrics(), p.pid(), p.start, ts)
		}
		dropEmpty(sc.Metrics())
	}
}

// appendMetrics writes p's kernel, thread and memcpy series, the kernel
// series with their exemplars in ex.
func (p *procSeries) appendMetrics(sm pmetric.MetricSlice, start, ts pcommon.Timestamp, ex *exemplarBook) {
	launches := newSum(sm, MetricLaunches, "{launch}", "Kernel launches, per kernel name (bounded; the rest under \"other\") and device.")
	type hmetric struct {
		name, unit, desc string
		pick             func(*devSeries) *exphist.Hist
		count            bool // a count distribution, always exponential
		m                histOut
	}
	hs := []*hmetric{
		{name: MetricExecDuration, unit: "s", desc: "Kernel execution time on the device: first warp start to last warp end, or the driver's window of the kernel.",
			pick: func(d *devSeries) *exphist.Hist { return &d.exec }},
		{name: MetricQueueDuration, unit: "s", desc: "Host enqueue of a launch to its first warp (or, by the driver's window, the kernel) starting on the device.",
			pick: func(d *devSeries) *exphist.Hist { return &d.queue }},
		{name: MetricHostWait, unit: "s", desc: "Time a launch's stream sat idle, after the previous kernel on it ended, before the launch call returned (0 when the launch was queued in time).",
			pick: func(d *devSeries) *exphist.Hist { return &d.hostWait }},
		{name: MetricWarpDuration, unit: "s", desc: "Execution time of one warp: earliest lane entry to latest lane exit.",
			pick: func(d *devSeries) *exphist.Hist { return &d.warpExec }},
		{name: MetricWarpExitSkew, unit: "s", desc: "Latest minus earliest lane exit of one warp (divergence).",
			pick: func(d *devSeries) *exphist.Hist { return &d.warpSkew }},
		{name: MetricThreadExecs, unit: "{execution}", desc: "Distribution over threads of how many times each thread ran the probed code.",
			pick: func(d *devSeries) *exphist.Hist { return &d.threadExec }, count: true},
	}
	explicit := p.store.o.Metrics.DurationBounds != nil
	for _, h := range hs {
		h.m = newHistOut(sm, h.name, h.unit, h.desc, explicit && !h.count)
	}
	all := append(p.order[:len(p.order):len(p.order)], p.other)
	for _, s := range all {
		for _, d := range s.devs {
			if d.launches > 0 {
				dp := launches.AppendEmpty()
				dp.SetStartTimestamp(start)
				dp.SetTimestamp(ts)
				dp.SetIntValue(int64(d.launches))
				p.kernelAttrs(dp.Attributes(), s.name, d.device)
				ex.putLaunches(d, dp.Exemplars())
			}
			for _, h := range hs {
				hist := h.pick(d)
				if hist.Count() == 0 {
					continue
				}
				p.kernelAttrs(h.m.add(hist, start, ts), s.name, d.device)
				if h.name == MetricExecDuration {
					ex.putExec(d, h.m.lastExemplars())
				}
			}
		}
	}
	appendFrames(sm, all, start, ts)
	if p.store.o.Metrics.PerThreadSeries {
		p.appendThreadSeries(sm, all, start, ts)
	}
	if len(p.mcOrder) > 0 {
		bytes := newSum(sm, MetricMemcpyBytes, "By", "Bytes copied by memory copy calls.")
		dur := newHistOut(sm, MetricMemcpyDuration, "s", "Duration of memory copy calls.", explicit)
		for _, k := range p.mcOrder {
			s := p.memcpy[k]
			dp := bytes.AppendEmpty()
			dp.SetStartTimestamp(start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(s.bytes))
			p.deviceAttrs(dp.Attributes(), k.device)
			dp.Attributes().PutStr("cuda.memcpy.kind", k.kind.String())
			ha := dur.add(&s.duration, start, ts)
			p.deviceAttrs(ha, k.device)
			ha.PutStr("cuda.memcpy.kind", k.kind.String())
		}
	}
}

// appendThreadSeries writes one cumulative sum per thread index of small
// grids (Options.PerThreadSeries).
func (p *procSeries) appendThreadSeries(sm pmetric.MetricSlice, all []*series, start, ts pcommon.Timestamp) {
	dps := newSum(sm, MetricThreadSeries, "{execution}",
		"Executions of the probed code per thread, for launches of at most limits::max_thread_series threads.")
	var idx []uint32
	for _, s := range all {
		for _, d := range s.devs {
			if len(d.perThread) == 0 {
				continue
			}
			idx = idx[:0]
			for i := range d.perThread {
				idx = append(idx, i)
			}
			slices.Sort(idx)
			for _, i := range idx {
				dp := dps.AppendEmpty()
				dp.SetStartTimestamp(start)
				dp.SetTimestamp(ts)
				dp.SetIntValue(int64(d.perThread[i]))
				p.kernelAttrs(dp.Attributes(), s.name, d.device)
				dp.Attributes().PutInt("cuda.thread.index", int64(i))
			}
		}
	}
}

func (p *procSeries) kernelAttrs(a pcommon.Map, name string, dev uint32) {
	a.PutStr("cuda.kernel.name", name)
	p.deviceAttrs(a, dev)
}

// deviceAttrs puts the device index and, when the process reported it,
// the device's UUID.
func (p *procSeries) deviceAttrs(a pcommon.Map, dev uint32) {
	a.PutInt("cuda.device.index", deviceIndex(dev))
	if u, ok := p.devices[dev]; ok {
		a.PutStr("cuda.device.uuid", u)
	}
}

// newMetric appends a metric with its name, unit and description.
func newMetric(sm pmetric.MetricSlice, name, unit, desc string) pmetric.Metric {
	m := sm.AppendEmpty()
	m.SetName(name)
	m.SetUnit(unit)
	m.SetDescription(desc)
	return m
}

func newSum(sm pmetric.MetricSlice, name, unit, desc string) pmetric.NumberDataPointSlice {
	s := newMetric(sm, name, unit, desc).SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return s.DataPoints()
}

func newExpHist(sm pmetric.MetricSlice, name, unit, desc string) pmetric.ExponentialHistogramDataPointSlice {
	h := newMetric(sm, name, unit, desc).SetEmptyExponentialHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return h.DataPoints()
}

// histOut is one histogram metric being written: exponential, or
// explicit-bucket (Options.Metrics.DurationBounds).
type histOut struct {
	exp      pmetric.ExponentialHistogramDataPointSlice
	bucketed pmetric.HistogramDataPointSlice
	explicit bool
}

func newHistOut(sm pmetric.MetricSlice, name, unit, desc string, explicit bool) histOut {
	if !explicit {
		return histOut{exp: newExpHist(sm, name, unit, desc)}
	}
	h := newMetric(sm, name, unit, desc).SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return histOut{bucketed: h.DataPoints(), explicit: true}
}

// add writes h as one cumulative point and returns its attributes.
func (o histOut) add(h *exphist.Hist, start, ts pcommon.Timestamp) pcommon.Map {
	if o.explicit {
		dp := o.bucketed.AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		h.CopyToExplicit(dp)
		return dp.Attributes()
	}
	dp := o.exp.AppendEmpty()
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(ts)
	h.CopyTo(dp)
	return dp.Attributes()
}

// Metrics returns all cumulative metrics: first the collector's own
// resource (service.name from the options, else "gpuprobe"; host calls
// and self-metrics), then one resource per process with its kernel and
// copy series.
func (t *Translator) Metrics(now time.Time, self []SelfMetric) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	svc := t.o.Process.ServiceName
	if svc == "" {
		svc = "gpuprobe"
	}
	rm.Resource().Attributes().PutStr("service.name", svc)
	if t.o.Process.HostName != "" {
		rm.Resource().Attributes().PutStr("host.name", t.o.Process.HostName)
	}
	sc := rm.ScopeMetrics().AppendEmpty()
	sc.Scope().SetName(ScopeName)
	t.AppendMetrics(sc.Metrics(), now, self)
	t.series.appendProcs(md.ResourceMetrics(), pcommon.NewTimestampFromTime(now), t.spans.examples)
	t.spans.examples.reset()
	return md
}
