package receiver

// Self-telemetry: the receiver's own metrics (gpuprobe.receiver.*) go to
// the collector's internal telemetry (TelemetrySettings.MeterProvider),
// as contrib receivers' do, and into the metrics pipeline only with
// telemetry::in_pipeline. The counters metadata.yaml's telemetry section
// lists are recorded by the generated TelemetryBuilder as they change;
// every other self-metric is an observable instrument that reads the
// values of the latest emission (every metrics_interval), but the probe
// offsets, a histogram recorded as they come.

import (
	"context"
	"strings"
	"sync"

	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// SelfMetricPrefix starts the name of every self-metric.
const SelfMetricPrefix = "gpuprobe.receiver."

// internalPrefix starts the names in the internal telemetry (mdatagen's).
const internalPrefix = "otelcol_"

// builderMetrics are the self-metrics the generated TelemetryBuilder
// records (metadata.yaml, telemetry::metrics; checked by a test): the
// observable instruments leave them to it.
var builderMetrics = map[string]bool{
	"gpuprobe.receiver.clients.disconnected":   true,
	"gpuprobe.receiver.launches.evicted":       true,
	"gpuprobe.receiver.modules.patched":        true,
	"gpuprobe.receiver.patch.failures":         true,
	"gpuprobe.receiver.patch.programs_skipped": true,
	"gpuprobe.receiver.records.corrupt":        true,
	"gpuprobe.receiver.records.dropped":        true,
	"gpuprobe.receiver.records.read":           true,
	"gpuprobe.receiver.shutdown.undelivered":   true,
	"gpuprobe.receiver.windows.dropped":        true,
	"gpuprobe.receiver.windows.missing":        true,
	"gpuprobe.receiver.windows.state_changes":  true,
}

// selfPoint is one data point of a self-metric.
type selfPoint struct {
	attrs attribute.Set
	i     int64
	f     float64
}

// selfInstrument is one observable instrument and how to observe it.
type selfInstrument struct {
	name  string // pipeline name
	inst  metric.Observable
	float bool
}

// selfTelemetry owns the observable instruments. observe runs on the poll
// goroutine; the callbacks on the reader's, under mu.
type selfTelemetry struct {
	meter   metric.Meter
	log     *zap.Logger
	offsets probeOffsets    // gpuprobe.receiver.windows.probe_offset
	insts   map[string]bool // names with an instrument (poll goroutine)
	regs    []metric.Registration
	mu      sync.Mutex
	last    map[string][]selfPoint // the latest emission's points, by name
}

func newSelfTelemetry(m metric.Meter, log *zap.Logger) *selfTelemetry {
	st := &selfTelemetry{meter: m, log: log, insts: map[string]bool{}, last: map[string][]selfPoint{}}
	st.offsets = newProbeOffsets(m, log)
	return st
}

// probeOffsetBounds are the buckets of the probe offsets in seconds:
// 10 ns to 10 ms (measured offsets are 0.3 to 5 µs, docs/performance.md).
var probeOffsetBounds = []float64{1e-8, 2.5e-8, 5e-8, 1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6,
	1e-5, 2.5e-5, 5e-5, 1e-4, 1e-3, 1e-2}

// probeOffsets is the histogram of the probe offsets, with the attribute
// sets of each edge and direction made once.
type probeOffsets struct {
	hist  metric.Float64Histogram // nil: not made
	attrs [2][2]metric.RecordOption
}

func newProbeOffsets(m metric.Meter, log *zap.Logger) probeOffsets {
	var po probeOffsets
	h, err := m.Float64Histogram(internalPrefix+translate.MetricProbeOffset,
		metric.WithDescription("How far a launch's probe window lies from the driver's window of it, per edge, inside or outside the driver's."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(probeOffsetBounds...))
	if err != nil {
		log.Debug("gpuprobe: no internal telemetry instrument", zap.String("metric", translate.MetricProbeOffset), zap.Error(err))
		return po
	}
	po.hist = h
	for e, edge := range translate.EdgeNames {
		for d, dir := range translate.DirectionNames {
			po.attrs[e][d] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("gpuprobe.windows.edge", edge), attribute.String("gpuprobe.windows.direction", dir)))
		}
	}
	return po
}

// record is translate's OnProbeOffset.
func (po *probeOffsets) record(edge, dir int, secs float64) {
	if po.hist != nil {
		po.hist.Record(context.Background(), secs, po.attrs[edge][dir])
	}
}

// observe keeps the points of the self-metrics in sm as the values the
// instruments report, and makes instruments for names seen first.
func (st *selfTelemetry) observe(sm pmetric.MetricSlice) {
	last := map[string][]selfPoint{}
	var added []selfInstrument
	for i := range sm.Len() {
		m := sm.At(i)
		if !strings.HasPrefix(m.Name(), SelfMetricPrefix) || builderMetrics[m.Name()] {
			continue
		}
		dps, ok := numberPoints(m)
		if !ok {
			continue // histograms: the pipeline copy only (no observable histogram)
		}
		float := dps.Len() > 0 && dps.At(0).ValueType() == pmetric.NumberDataPointValueTypeDouble
		pts := make([]selfPoint, 0, dps.Len())
		for j := range dps.Len() {
			dp := dps.At(j)
			pts = append(pts, selfPoint{attrs: attrSet(dp.Attributes()), i: dp.IntValue(), f: dp.DoubleValue()})
		}
		last[m.Name()] = pts
		if st.insts[m.Name()] || dps.Len() == 0 {
			continue
		}
		inst, err := st.instrument(m, float)
		if err != nil {
			st.log.Debug("gpuprobe: no internal telemetry instrument", zap.String("metric", m.Name()), zap.Error(err))
			continue
		}
		st.insts[m.Name()] = true
		added = append(added, selfInstrument{name: m.Name(), inst: inst, float: float})
	}
	st.mu.Lock()
	st.last = last
	st.mu.Unlock()
	if len(added) > 0 {
		st.register(added)
	}
}

// numberPoints returns the points of a sum or gauge.
func numberPoints(m pmetric.Metric) (pmetric.NumberDataPointSlice, bool) {
	switch m.Type() {
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints(), true
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints(), true
	}
	return pmetric.NumberDataPointSlice{}, false
}

// instrument makes the observable instrument of self-metric m: a counter
// for a monotonic sum, an up-down counter for another sum, else a gauge.
func (st *selfTelemetry) instrument(m pmetric.Metric, float bool) (metric.Observable, error) {
	name := internalPrefix + m.Name()
	desc, unit := metric.WithDescription(m.Description()), metric.WithUnit(m.Unit())
	switch {
	case m.Type() == pmetric.MetricTypeSum && m.Sum().IsMonotonic() && float:
		return st.meter.Float64ObservableCounter(name, desc, unit)
	case m.Type() == pmetric.MetricTypeSum && m.Sum().IsMonotonic():
		return st.meter.Int64ObservableCounter(name, desc, unit)
	case m.Type() == pmetric.MetricTypeSum && float:
		return st.meter.Float64ObservableUpDownCounter(name, desc, unit)
	case m.Type() == pmetric.MetricTypeSum:
		return st.meter.Int64ObservableUpDownCounter(name, desc, unit)
	case float:
		return st.meter.Float64ObservableGauge(name, desc, unit)
	}
	return st.meter.Int64ObservableGauge(name, desc, unit)
}

// register has the instruments of ins report the latest points.
func (st *selfTelemetry) register(ins []selfInstrument) {
	obs := make([]metric.Observable, len(ins))
	for i, in := range ins {
		obs[i] = in.inst
	}
	reg, err := st.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, in := range ins {
			for _, p := range st.last[in.name] {
				if in.float {
					o.ObserveFloat64(in.inst.(metric.Float64Observable), p.f, metric.WithAttributeSet(p.attrs))
				} else {
					o.ObserveInt64(in.inst.(metric.Int64Observable), p.i, metric.WithAttributeSet(p.attrs))
				}
			}
		}
		return nil
	}, obs...)
	if err != nil {
		st.log.Debug("gpuprobe: internal telemetry callback", zap.Error(err))
		return
	}
	st.regs = append(st.regs, reg)
}

// shutdown unregisters the callbacks (after the poll loop ended).
func (st *selfTelemetry) shutdown() {
	for _, r := range st.regs {
		_ = r.Unregister()
	}
	st.regs = nil
}

// attrSet converts data point attributes (strings, integers, doubles and
// booleans; self-metrics carry no others).
func attrSet(m pcommon.Map) attribute.Set {
	kvs := make([]attribute.KeyValue, 0, m.Len())
	m.Range(func(k string, v pcommon.Value) bool {
		switch v.Type() {
		case pcommon.ValueTypeInt:
			kvs = append(kvs, attribute.Int64(k, v.Int()))
		case pcommon.ValueTypeDouble:
			kvs = append(kvs, attribute.Float64(k, v.Double()))
		case pcommon.ValueTypeBool:
			kvs = append(kvs, attribute.Bool(k, v.Bool()))
		default:
			kvs = append(kvs, attribute.String(k, v.AsString()))
		}
		return true
	})
	return attribute.NewSet(kvs...)
}

// dropSelf removes the self-metrics from md, and the scopes and resources
// left with no metric.
func dropSelf(md pmetric.Metrics) {
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool { return strings.HasPrefix(m.Name(), SelfMetricPrefix) })
			return sm.Metrics().Len() == 0
		})
		return rm.ScopeMetrics().Len() == 0
	})
}

// spansCapped says, once per client, that its spans went over the cap.
func (r *gpuReceiver) spansCapped(pid uint32) {
	r.log.Warn("gpuprobe: a process is over limits::spans_per_second; its traces beyond it are dropped and counted in "+
		translate.MetricSpansRateLimited+" (its metrics still count every launch)",
		zap.Uint32("pid", pid), zap.Int("limits::spans_per_second", r.cfg.Limits.SpansPerSecond))
}

// selfMetrics are the receiver's own counters (selftel.go says where they
// go).
func (r *gpuReceiver) selfMetrics() []translate.SelfMetric {
	c := r.sh.counters()
	gt := r.sh.first().GPUTimeCounters() // the shards' Node's
	return append([]translate.SelfMetric{
		{Name: "gpuprobe.receiver.records.read", Unit: "{record}", Desc: "Records read from the shared-memory rings.", Value: c.RecordsRead + r.maps.stats.Records},
		{Name: "gpuprobe.receiver.records.dropped", Unit: "{record}", Desc: "Records dropped (ring full, oversize, stalled, invalid, or left unread by a gone client).", Value: r.counts.dropped},
		{Name: "gpuprobe.receiver.records.corrupt", Unit: "{record}", Desc: "Records whose length field exceeded their ring slot.", Value: r.counts.corrupt},
		{Name: "gpuprobe.receiver.clients.disconnected", Unit: "{client}", Desc: "Clients let go for breaking a ring invariant (by reason in the collector's own telemetry).", Value: r.counts.disconnected},
		{Name: "gpuprobe.receiver.launches.evicted", Unit: "{launch}", Desc: "Launches emitted before all their records arrived.", Value: c.LaunchesEvicted + c.LaunchesExpired},
		{Name: "gpuprobe.receiver.spans.dropped", Unit: "{span}", Desc: "Spans dropped because the pipeline refused them.", Value: r.counts.spansErr},
		{Name: "gpuprobe.receiver.shutdown.undelivered", Unit: "{item}", Desc: "Records, launches and spans the shutdown did not deliver by its deadline (by kind in the collector's own telemetry).", Value: r.counts.undelivered},
		{Name: "gpuprobe.receiver.modules.patched", Unit: "{module}", Desc: "CUDA modules patched with probes.", Value: r.patch.patched.Load()},
		{Name: "gpuprobe.receiver.kernel_names.truncated", Unit: "{name}", Desc: "Kernel names their producer had to cut to fit a ring slot (shown with a trailing …).", Value: c.NamesTruncated},
		{Name: "gpuprobe.receiver.kernel_names.evicted", Unit: "{handle}", Desc: "Function handles forgotten to fit a name within their client's limits::max_kernel_name_bytes (launched again, one is named by its handle).", Value: c.NamesEvicted},
		{Name: "gpuprobe.receiver.kernel_names.refused", Unit: "{name}", Desc: "Kernel names counted under \"other\": their client's limits::max_kernel_name_bytes was held by pending launches, or their process's series names reached 128 KiB.", Value: c.NamesRefused},
		{Name: "gpuprobe.receiver.devices.folded", Unit: "{record}", Desc: "Records naming a device their client did not report, counted under device index -1.", Value: c.DevicesFolded},
		{Name: "gpuprobe.receiver.calibrations.rejected", Unit: "{record}", Desc: "Clock calibration records rejected as implausible.", Value: c.CalibrationsBad},
		{Name: "gpuprobe.receiver.resource.rejected", Unit: "{variable}", Desc: "OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES values of clients discarded as malformed or too long.", Value: r.srcs.res.rejected.Load()},
		{Name: "gpuprobe.receiver.resource.attributes_dropped", Unit: "{attribute}", Desc: "Attributes in clients' OTEL_RESOURCE_ATTRIBUTES that only the collector or its processors set (k8s.*, host.*, container.*, cloud.*, the process's ids, service.instance.id: docs/security.md), ignored.", Value: r.srcs.res.dropped.Load()},
		{Name: "gpuprobe.receiver.series.folded", Unit: "{record}", Desc: "Records counted in their process's overflow series (kernel other, device -1) because its process's, its uid's or the node's share of the series limit was reached.", Value: c.SeriesFolded},
		{Name: "gpuprobe.receiver.processes.folded", Unit: "{process}", Desc: "Processes whose metrics went into the shared overflow resource because the process limit was reached.", Value: c.ProcessesFolded},
		{Name: "gpuprobe.receiver.patch.failures", Unit: "{module}", Desc: "CUDA modules that could not be patched.", Value: r.patch.failed.Load()},
		{Name: "gpuprobe.receiver.gpu_time.cut", Unit: "ns", Desc: "Device window time left out of gpu.cuda.process.time: parts that came after their span was settled (gpu_time::lag), past their arrival or a minute long, or of GPUs or processes beyond the attribution's bounds.", Value: uint64(max(0, gt.CutNS()))},
		{Name: "gpuprobe.receiver.gpu_time.late", Unit: "ns", Desc: "The part of gpuprobe.receiver.gpu_time.cut that came after its span was settled (gpu_time::lag behind).", Value: uint64(max(0, gt.LateNS))},
		{Name: "gpuprobe.receiver.gpu_time.unowned", Unit: "{window}", Desc: "Device windows of clients without a process id or a clock mapping, not attributed.", Value: gt.Unowned},
		{Name: "gpuprobe.receiver.patch.programs_skipped", Unit: "{program}", Desc: "GPU programs left out of a module they could not be patched into (the module was patched with the others).", Value: r.patch.skips.Load()},
	}, append(append(append(r.hostSelfMetrics(), r.hc.metrics()...), ringSelfMetrics(r.run.agent)...), counterSelfMetrics(r.sh.first().CounterCounters())...)...)
}
