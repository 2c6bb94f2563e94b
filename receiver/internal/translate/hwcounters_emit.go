package translate

import (
	"math"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Names of the hardware-counter metrics, on each process's resource.
const (
	MetricCounterTime       = "gpu.cuda.kernel.counter.time"
	MetricCounterOverlapped = "gpu.cuda.kernel.counter.overlapped.time"
	MetricCounterWeighted   = "gpu.cuda.kernel.counter.weighted"
	MetricCounterMean       = "gpu.cuda.kernel.counter.mean"
	// AttrCounterName is the metric attribute naming the counter: CUPTI's
	// metric name, as the sampler sampled it.
	AttrCounterName = "cuda.counter.name"
	// AttrCountersPrefix starts the span attribute of each counter
	// (cuda.counters.<CUPTI name>), AttrCountersSampled the share of the
	// span's device window that samples covered when it was built.
	AttrCountersPrefix  = "cuda.counters."
	AttrCountersSampled = "cuda.counters.sampled"
)

// CounterCounters returns the hardware counters' counts so far (the
// Node's).
func (t *Translator) CounterCounters() CounterCounters { return t.hw.counters() }

// monoNow is now on CLOCK_MONOTONIC through the collector's clock offset.
func (t *Translator) monoNow(now time.Time) (uint64, bool) {
	off, ok := t.o.Clock.MonoToReal(0)
	if !ok || uint64(now.UnixNano()) <= off {
		return 0, false
	}
	return uint64(now.UnixNano()) - off, true
}

// appendProc writes process pid's counter series into sm (its resource's
// scope): per kernel and GPU the overlapped time, per counter its sampled
// time, its time-weighted sum (mean = Δweighted / Δtime over any range)
// and its mean over the time settled since the previous emission.
func (h *hwCounters) appendProc(sm pmetric.MetricSlice, pid uint32, start, ts pcommon.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ss := h.byPID[pid]
	if len(ss) == 0 {
		return
	}
	sort.Slice(ss, func(i, j int) bool {
		a, b := ss[i].key, ss[j].key
		return a.kernel < b.kernel || a.kernel == b.kernel && a.gpu < b.gpu
	})
	tm := newSum(sm, MetricCounterTime, "s", "Sample time of the kernel's launches on the GPU with a value of the counter, the time other kernels ran beside them shared out.")
	ov := newSum(sm, MetricCounterOverlapped, "s", "Sampled time of the kernel's launches during which another kernel also ran: the values then are the device's, shared.")
	wt := newSum(sm, MetricCounterWeighted, "{value}.s", "Each hardware counter integrated over the kernel's sample time: Δweighted / Δgpu.cuda.kernel.counter.time is its time-weighted mean.")
	mean := newGauge(sm, MetricCounterMean, "{value}", "Each hardware counter's time-weighted mean over the kernel's launches settled since the previous emission.")
	for _, s := range ss {
		put := func(dp pmetric.NumberDataPoint, v float64) pmetric.NumberDataPoint {
			dp.SetStartTimestamp(start)
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(v)
			a := dp.Attributes()
			a.PutStr("cuda.kernel.name", s.key.kernel)
			a.PutInt("cuda.device.index", deviceIndex(s.index))
			putUUID(a, s.key.gpu)
			return dp
		}
		put(ov.AppendEmpty(), s.overlapped)
		for i, name := range s.names {
			put(tm.AppendEmpty(), s.time[i]).Attributes().PutStr(AttrCounterName, name)
			put(wt.AppendEmpty(), s.weighted[i]).Attributes().PutStr(AttrCounterName, name)
			if dt := s.time[i] - s.lastTime[i]; dt > 0 {
				dp := put(mean.AppendEmpty(), (s.weighted[i]-s.lastWeighted[i])/dt)
				dp.SetStartTimestamp(0)
				dp.Attributes().PutStr(AttrCounterName, name)
			}
		}
		copy(s.lastWeighted, s.weighted)
		copy(s.lastTime, s.time)
	}
	if mean.Len() == 0 {
		sm.RemoveIf(func(m pmetric.Metric) bool { return m.Name() == MetricCounterMean })
	}
}

// putSpan puts on a launch span the device's counters over its window
// [start, end) (CLOCK_MONOTONIC) on GPU gpu, from the samples held when
// the span is built, and the share of the window they covered.
func (h *hwCounters) putSpan(a pcommon.Map, gpu string, start, end uint64) {
	if end <= start {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gpus[gpu]
	if g == nil || len(g.samples) == 0 {
		return
	}
	i := sort.Search(len(g.samples), func(i int) bool { return g.samples[i].End > start })
	sums, weights := make([]float64, len(g.names)), make([]float64, len(g.names))
	var covered uint64
	for ; i < len(g.samples) && g.samples[i].Start < end; i++ {
		s := g.samples[i]
		d := min(s.End, end) - max(s.Start, start)
		covered += d
		for k, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				sums[k] += v * float64(d)
				weights[k] += float64(d)
			}
		}
	}
	if covered == 0 {
		return
	}
	for k, name := range g.names {
		if weights[k] > 0 {
			a.PutDouble(AttrCountersPrefix+name, sums[k]/weights[k])
		}
	}
	a.PutDouble(AttrCountersSampled, float64(covered)/float64(end-start))
}
