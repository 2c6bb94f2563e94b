package translate

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

var hwUUID = [16]byte{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}

const hwMS = uint64(time.Millisecond)

func testHWSet(dev uint32, names ...string) *record.CounterSet {
	return &record.CounterSet{IntervalNS: 10 * hwMS, UUID: hwUUID, Device: dev, Names: names}
}

func hwSample(start, end uint64, names []string, v ...float64) *record.CounterSample {
	return &record.CounterSample{StartNS: start, EndNS: end, SetHash: record.CounterSetHash(names), Values: v}
}

func hwHandle(t *testing.T, tr *Translator, src uint32, now time.Time, rs ...interface{ Append([]byte) []byte }) {
	t.Helper()
	for _, r := range rs {
		if err := tr.Handle(src, r.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
}

// hwPoints collects process pid's counter points of md: name → kernel
// → counter name ("" for the per-kernel ones) → value.
func hwPoints(md pmetric.Metrics, pid int64) map[string]map[string]map[string]float64 {
	out := map[string]map[string]map[string]float64{}
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		if p, _ := rm.Resource().Attributes().Get("process.pid"); p.Int() != pid {
			continue
		}
		eachResMetric(rm, func(m pmetric.Metric) {
			var dps pmetric.NumberDataPointSlice
			if !strings.HasPrefix(m.Name(), "gpu.cuda.kernel.counter.") {
				return
			}
			switch m.Type() {
			case pmetric.MetricTypeSum:
				dps = m.Sum().DataPoints()
			case pmetric.MetricTypeGauge:
				dps = m.Gauge().DataPoints()
			default:
				return
			}
			for j := range dps.Len() {
				a := dps.At(j).Attributes()
				if u, ok := a.Get("cuda.device.uuid"); !ok || u.Str() != "10111213-1415-1617-1819-1a1b1c1d1e1f" {
					continue
				}
				k, _ := a.Get("cuda.kernel.name")
				c, _ := a.Get(AttrCounterName)
				if out[m.Name()] == nil {
					out[m.Name()] = map[string]map[string]float64{}
				}
				if out[m.Name()][k.Str()] == nil {
					out[m.Name()][k.Str()] = map[string]float64{}
				}
				out[m.Name()][k.Str()][c.Str()] = dps.At(j).DoubleValue()
			}
		})
	}
	return out
}

// TestCountersJoin: a trusted sampler's samples are joined to the
// windows of a process on the same GPU (by UUID, its ordinal there is
// 3) once the lag passed; an untrusted client's counter records are
// refused and counted, never applied.
func TestCountersJoin(t *testing.T) {
	names := []string{"sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum.per_second"}
	tr := newTr(Options{Windows: WindowOptions{GPUTime: gputimeLag(time.Second),
		Counters: CounterOptions{Enabled: true, Trusted: func(uid uint32) bool { return uid == 0 }}}})
	now := time.Unix(0, realBase+int64(9030*hwMS))
	tr.Connect(1, Peer{PID: 100, UID: 1000})
	tr.Connect(2, Peer{PID: 200, UID: 0})
	tr.Connect(3, Peer{PID: 300, UID: 1000})
	base := 9000 * hwMS
	hwHandle(t, tr, 2, now, testHWSet(0, names...), hwSample(base, base+10*hwMS, names, 10, 100), hwSample(base+10*hwMS, base+20*hwMS, names, 30, 300))
	// The untrusted one claims the same GPU with other values.
	hwHandle(t, tr, 3, now, testHWSet(0, names...), hwSample(base+20*hwMS, base+30*hwMS, names, 1e9, 1e9))
	hwHandle(t, tr, 1, now,
		&record.Device{Device: 3, PID: 100, UUID: hwUUID, SMCount: 132, Name: "mock"},
		&record.KernelName{Function: 1, PID: 100, Name: "sgemm"},
		&record.Launch{LaunchID: 1, PID: 100, EnqueueNS: base, ReturnNS: base + 1, Function: 1, Device: 3,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}},
		&record.Window{LaunchID: 1, StartNS: base + 5*hwMS, EndNS: base + 15*hwMS, Device: 3, NameHash: record.NameHash("sgemm")},
		&record.Window{StartNS: base + 12*hwMS, EndNS: base + 18*hwMS, Device: 3, Flags: record.WindowNoLaunch})
	if got := hwPoints(tr.Metrics(now, nil), 100); len(got) != 0 {
		t.Fatalf("points before the lag passed: %v", got)
	}
	got := hwPoints(tr.Metrics(now.Add(2*time.Second), nil), 100)
	// sgemm: 5 ms alone at (10, 100), 2 ms alone at (30, 300), 3 ms
	// shared with the other window at (30, 300): 1.5 ms attributed.
	// other: 1.5 ms shared + 3 ms alone, all at (30, 300).
	want := map[string]map[string]map[string]float64{
		MetricCounterTime:       {"sgemm": {names[0]: 8.5e-3, names[1]: 8.5e-3}, "other": {names[0]: 4.5e-3, names[1]: 4.5e-3}},
		MetricCounterOverlapped: {"sgemm": {"": 3e-3}, "other": {"": 3e-3}},
		MetricCounterWeighted: {"sgemm": {names[0]: (5*10 + 3.5*30) * 1e-3, names[1]: (5*100 + 3.5*300) * 1e-3},
			"other": {names[0]: 4.5 * 30 * 1e-3, names[1]: 4.5 * 300 * 1e-3}},
		MetricCounterMean: {"sgemm": {names[0]: 155.0 / 8.5, names[1]: 1550.0 / 8.5}, "other": {names[0]: 30, names[1]: 300}},
	}
	for m, ks := range want {
		for k, cs := range ks {
			for c, w := range cs {
				if g, ok := got[m][k][c]; !ok || math.Abs(g-w) > 1e-9*math.Max(1, w) {
					t.Errorf("%s{kernel %s, counter %q} = %v (present %v), want %v", m, k, c, g, ok, w)
				}
			}
		}
	}
	if c := tr.CounterCounters(); c.Refused != 2 || c.Joined != 2 || c.Dropped != 0 {
		t.Errorf("counters %+v: want 2 refused (the untrusted set and sample), 2 joined", c)
	}
	// The next emission: no new settled time, so no mean; the sums stay.
	got = hwPoints(tr.Metrics(now.Add(3*time.Second), nil), 100)
	if _, ok := got[MetricCounterMean]; ok || got[MetricCounterTime]["sgemm"][names[0]] != 8.5e-3 {
		t.Errorf("second emission %v: want the sums again and no mean", got)
	}
}

func gputimeLag(d time.Duration) gputime.Options { return gputime.Options{Lag: d} }

// TestCountersBounds: samples of no set, of a second sampler of the GPU,
// out of order, late or over the bound are dropped and counted; windows
// over the bound too; a disabled receiver applies nothing.
func TestCountersBounds(t *testing.T) {
	names := []string{"a", "b"}
	h := newHWCounters(CounterOptions{Enabled: true, MaxSamples: 2, MaxWindows: 1, Trusted: func(uint32) bool { return true }}, time.Second)
	h.connect(1, 0)
	h.connect(2, 0)
	put := func(src uint32, r interface{ Append([]byte) []byte }) {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if err := h.onRecord(src, p.Type, b); err != nil {
			t.Fatal(err)
		}
	}
	put(1, hwSample(0, 10, names, 1, 2)) // no set yet
	put(1, testHWSet(0, names...))
	put(2, testHWSet(0, names...)) // a second sampler of the GPU
	put(2, hwSample(0, 10, names, 1, 2))
	put(1, hwSample(10, 20, names, 1, 2))
	put(1, hwSample(5, 15, names, 1, 2)) // overlaps
	put(1, hwSample(20, 30, names, 1, 2))
	put(1, hwSample(30, 40, names, 1, 2)) // over MaxSamples: the oldest goes
	put(1, hwSample(40, 50, []string{"c"}, 1, 2))
	if c := h.counters(); c.Dropped != 5 {
		t.Errorf("dropped %d samples, want 5", c.Dropped)
	}
	if g := h.gpus["10111213-1415-1617-1819-1a1b1c1d1e1f"]; g == nil || len(g.samples) != 2 || g.samples[0].Start != 20 {
		t.Fatalf("GPU holds %+v, want the samples from 20 on", g)
	}
	w := &record.Window{StartNS: 20, EndNS: 30}
	h.addWindow("10111213-1415-1617-1819-1a1b1c1d1e1f", 7, 0, "k", w)
	h.addWindow("10111213-1415-1617-1819-1a1b1c1d1e1f", 7, 0, "k", w)
	h.addWindow("no-sampler-gpu", 7, 0, "k", w)
	if c := h.counters(); c.WindowsDropped != 1 {
		t.Errorf("%d windows dropped, want 1 (over the bound; none of a GPU without a sampler)", c.WindowsDropped)
	}
	h.flush(100)
	put(1, hwSample(60, 70, names, 1, 2)) // before the settled time
	if c := h.counters(); c.Dropped != 6 || c.Joined != 2 || !h.has(7) {
		t.Errorf("counters %+v, series of pid 7 %v: want the late sample dropped, 2 joined", c, h.has(7))
	}
	off := newHWCounters(CounterOptions{Trusted: func(uint32) bool { return true }}, time.Second)
	off.connect(1, 0)
	b := testHWSet(0, names...).Append(nil)
	if err := off.onRecord(1, record.TypeCounterSet, b); err != nil || off.counters().Dropped != 1 {
		t.Errorf("counters off: %v, %+v: want the record dropped and counted", err, off.counters())
	}
}

// TestCountersSpan: a span gets the device's time-weighted values over
// its window from the samples held, and the share they covered.
func TestCountersSpan(t *testing.T) {
	names := []string{"a"}
	h := newHWCounters(CounterOptions{Enabled: true, Trusted: func(uint32) bool { return true }}, time.Second)
	h.connect(1, 0)
	for _, r := range []interface{ Append([]byte) []byte }{testHWSet(0, names...), hwSample(100, 200, names, 10), hwSample(200, 300, names, 40)} {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if err := h.onRecord(1, p.Type, b); err != nil {
			t.Fatal(err)
		}
	}
	a := pcommon.NewMap()
	h.putSpan(a, "10111213-1415-1617-1819-1a1b1c1d1e1f", 150, 350) // 50 at 10, 100 at 40, 50 unsampled
	v, _ := a.Get(AttrCountersPrefix + "a")
	s, _ := a.Get(AttrCountersSampled)
	if math.Abs(v.Double()-30) > 1e-9 || math.Abs(s.Double()-0.75) > 1e-9 {
		t.Errorf("span attributes %v: want a = 30 over the sampled 75%%", a.AsRaw())
	}
	b := pcommon.NewMap()
	h.putSpan(b, "10111213-1415-1617-1819-1a1b1c1d1e1f", 400, 500)
	if b.Len() != 0 {
		t.Errorf("a window no sample covers got %v", b.AsRaw())
	}
}
