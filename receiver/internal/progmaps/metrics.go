package progmaps

import (
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/btfdecode"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"
)

// MetricKeysOverLimit is the self-metric (gauge) of array keys left out of
// the last emission because of limits::max_map_keys.
const MetricKeysOverLimit = "gpuprobe.receiver.map.keys.over_limit"

// CollectorOptions configure a Collector.
type CollectorOptions struct {
	MaxMapKeys       int  // keys with their own series per map and process (limits::max_map_keys)
	PerThreadSeries  bool // per-lane series for per-thread/per-warp arrays (limits::per_thread_series)
	MaxThreadSeries  int  // ... only when at most this many lanes are active (limits::max_thread_series)
	MaxEventsPerSpan int  // span events per batch span of a ring without start/end fields (default 128)
	ServiceName      string
	Clock            *clock.Mapper
	// Device returns the CUDA device of the application's latest launch
	// (for ring records without a device field); nil: device 0.
	Device func(src uint32) uint32
	// Logger gets the debug notes on ring records (nil: none).
	Logger *zap.Logger
	// AdmitSpan, if set, says whether the next span of process pid (of n
	// spans) is kept: the receiver's per-process span cap
	// (limits::spans_per_second), shared with its other spans.
	AdmitSpan func(pid uint32, n int) bool
}

// Counters are the collector's own counts.
type Counters struct {
	Records     uint64 // ring records read
	Invalid     uint64 // ring records of zero bytes
	Short       uint64 // ring records shorter than their type, decoded by the bytes written
	Cut         uint64 // ... of which the record ends inside a field (the field is omitted)
	Dropped     uint64 // ring records dropped (full ring, oversize, stalled, left unread by a gone application)
	Corrupt     uint64 // ring records whose length exceeded their slot
	Unmapped    uint64 // records whose GPU time could not be mapped (no calibration)
	KeysOver    uint64 // keys beyond MaxMapKeys at the last emission
	SpansBuilt  uint64 // spans made from ring records
	EventsBuilt uint64 // span events made from ring records
	ReadErrors  uint64 // kernel maps that could not be read (host programs' arrays and rings)
}

// Collector converts the contents of Instances into pdata. It is not safe
// for concurrent use.
type Collector struct {
	o        CollectorOptions
	fields   []btfdecode.Field
	buf      []byte
	counters Counters
	tr       traceBuf
	// cutLogged names the maps whose cut records were logged.
	cutLogged map[string]bool
}

// NewCollector returns a Collector.
func NewCollector(o CollectorOptions) *Collector {
	if o.MaxMapKeys < 1 {
		o.MaxMapKeys = 256
	}
	if o.MaxEventsPerSpan < 1 {
		o.MaxEventsPerSpan = 128
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	c := &Collector{o: o, cutLogged: map[string]bool{}}
	c.tr.reset()
	return c
}

// Counters returns the collector's counts.
func (c *Collector) Counters() Counters { return c.counters }

// metricSet creates metrics of one emission lazily, by name.
type metricSet struct {
	sm pmetric.MetricSlice
	m  map[string]pmetric.Metric
}

func (s *metricSet) get(name string, build func(pmetric.Metric)) pmetric.Metric {
	if m, ok := s.m[name]; ok {
		return m
	}
	m := s.sm.AppendEmpty()
	m.SetName(name)
	build(m)
	s.m[name] = m
	return m
}

func buildSum(m pmetric.Metric) {
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
}

func buildGauge(m pmetric.Metric) { m.SetEmptyGauge() }

func buildHist(m pmetric.Metric) {
	m.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
}

// AppendMetrics appends the current values of every array map of ins to
// sm: per key (attribute gpuprobe.map.key) and numeric field, a sum or gauge data point
// for plain arrays, an exponential histogram over the active lanes for
// per-thread and per-warp arrays.
func (c *Collector) AppendMetrics(sm pmetric.MetricSlice, ins []*Instance, now time.Time) {
	set := &metricSet{sm: sm, m: map[string]pmetric.Metric{}}
	ts := pcommon.NewTimestampFromTime(now)
	var over uint64
	for _, in := range ins {
		start := pcommon.NewTimestampFromTime(in.Created)
		for i := range in.arrays {
			a := &in.arrays[i]
			if r, ok := a.src.(refresher); ok {
				if err := r.refresh(); err != nil {
					c.counters.ReadErrors++
					continue
				}
			}
			switch {
			case a.def.hash != nil:
				over += c.hashTable(set, in, a, start, ts)
			case a.def.Kind == shm.KindArray:
				over += c.plainArray(set, in, a, start, ts)
			default:
				over += c.laneArray(set, in, a, start, ts)
			}
		}
	}
	c.counters.KeysOver = over
	dp := set.get(MetricKeysOverLimit, buildGauge)
	dp.SetUnit("{key}")
	dp.SetDescription("Keys of user array maps left out of the last emission because of limits::max_map_keys.")
	p := dp.Gauge().DataPoints().AppendEmpty()
	p.SetTimestamp(ts)
	p.SetIntValue(int64(over))
}

// value copies the value of key for lane out of shared memory and decodes
// it; ok is false for an all-zero (untouched) value.
func (c *Collector) value(a *arrayInst, key, lane uint64) ([]btfdecode.Field, bool) {
	v, err := a.src.Value(key, lane)
	if err != nil {
		return nil, false
	}
	c.buf = append(c.buf[:0], v...)
	if allZero(c.buf) {
		return nil, false
	}
	f, err := a.def.Dec.DecodeInto(c.fields, c.buf)
	c.fields = f
	return f, err == nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func numberOf(f *btfdecode.Field) (int64, float64, bool) {
	switch f.Kind {
	case btfdecode.KindFloat:
		return 0, f.Float, true
	case btfdecode.KindInt, btfdecode.KindEnum:
		return f.Int, 0, false
	}
	return int64(f.Uint), 0, false
}

func floatOf(f *btfdecode.Field) float64 {
	i, x, isFloat := numberOf(f)
	if isFloat {
		return x
	}
	if f.Kind == btfdecode.KindUint || f.Kind == btfdecode.KindBool {
		return float64(f.Uint)
	}
	return float64(i)
}

// pointAttrs sets the attributes of a map data point.
func pointAttrs(a pcommon.Map, in *Instance, key uint64, fd *field) {
	a.PutInt(AttrMapKey, int64(key))
	for n, ix := range fd.index {
		a.PutInt(indexAttr(n), ix)
	}
	if !in.Host {
		a.PutInt("process.pid", int64(in.PID))
	}
}

func (c *Collector) plainArray(set *metricSet, in *Instance, a *arrayInst, start, ts pcommon.Timestamp) uint64 {
	var emitted, over uint64
	for key := range uint64(a.src.Keys()) {
		fs, ok := c.value(a, key, 0)
		if !ok {
			continue
		}
		if emitted >= uint64(c.o.MaxMapKeys) {
			over++
			continue
		}
		emitted++
		numberPoints(set, in, a, fs, start, ts, func(m pcommon.Map, fd *field) { pointAttrs(m, in, key, fd) })
	}
	return over
}

// numberPoints appends one sum or gauge data point per numeric field of
// the decoded value fs of array a; attrs sets each point's attributes.
func numberPoints(set *metricSet, in *Instance, a *arrayInst, fs []btfdecode.Field, start, ts pcommon.Timestamp, attrs func(pcommon.Map, *field)) {
	for i := range fs {
		fd := &a.def.fields[i]
		if !fd.numeric {
			continue
		}
		var dp pmetric.NumberDataPoint
		if fd.sum {
			dp = set.get(fd.metric, buildSum).Sum().DataPoints().AppendEmpty()
			dp.SetStartTimestamp(start)
		} else {
			dp = set.get(fd.metric, buildGauge).Gauge().DataPoints().AppendEmpty()
		}
		dp.SetTimestamp(ts)
		iv, fv, isFloat := numberOf(&fs[i])
		if isFloat {
			dp.SetDoubleValue(fv)
		} else {
			dp.SetIntValue(iv)
		}
		attrs(dp.Attributes(), fd)
	}
}

// laneValue is one active lane's numeric fields, kept for per-lane series.
type laneValue struct {
	lane   uint64
	values []float64
}

func (c *Collector) laneArray(set *metricSet, in *Instance, a *arrayInst, start, ts pcommon.Timestamp) uint64 {
	var emitted, over uint64
	nf := len(a.def.fields)
	hists := make([]exphist.Hist, nf)
	laneAttr := "cuda.thread.index"
	if a.def.Kind == shm.KindPerWarpArray {
		laneAttr = "cuda.warp.index"
	}
	var lanes []laneValue
	for key := range uint64(a.src.Keys()) {
		clear(hists)
		lanes = lanes[:0]
		keepLanes := c.o.PerThreadSeries
		active := 0
		for lane := range uint64(a.src.Lanes()) {
			fs, ok := c.value(a, key, lane)
			if !ok {
				continue
			}
			active++
			var lv laneValue
			if keepLanes {
				if active > c.o.MaxThreadSeries {
					keepLanes, lanes = false, lanes[:0]
				} else {
					lv = laneValue{lane: lane, values: make([]float64, nf)}
				}
			}
			for i := range fs {
				if !a.def.fields[i].numeric {
					continue
				}
				v := floatOf(&fs[i])
				hists[i].Record(v)
				if keepLanes {
					lv.values[i] = v
				}
			}
			if keepLanes {
				lanes = append(lanes, lv)
			}
		}
		if active == 0 {
			continue
		}
		if emitted >= uint64(c.o.MaxMapKeys) {
			over++
			continue
		}
		emitted++
		for i := range a.def.fields {
			fd := &a.def.fields[i]
			if !fd.numeric || hists[i].Count() == 0 {
				continue
			}
			hp := set.get(fd.metric, buildHist).ExponentialHistogram().DataPoints().AppendEmpty()
			hp.SetStartTimestamp(start)
			hp.SetTimestamp(ts)
			hists[i].CopyTo(hp)
			pointAttrs(hp.Attributes(), in, key, fd)
			if !keepLanes {
				continue
			}
			for _, lv := range lanes {
				var dp pmetric.NumberDataPoint
				name := fd.metric + ".by_lane"
				if fd.sum {
					dp = set.get(name, buildSum).Sum().DataPoints().AppendEmpty()
					dp.SetStartTimestamp(start)
				} else {
					dp = set.get(name, buildGauge).Gauge().DataPoints().AppendEmpty()
				}
				dp.SetTimestamp(ts)
				if fd.float {
					dp.SetDoubleValue(lv.values[i])
				} else {
					dp.SetIntValue(int64(lv.values[i]))
				}
				pointAttrs(dp.Attributes(), in, key, fd)
				dp.Attributes().PutInt(laneAttr, int64(lv.lane))
			}
		}
	}
	return over
}
