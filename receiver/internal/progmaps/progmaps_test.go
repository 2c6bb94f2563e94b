package progmaps

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// repoRoot finds the directory holding go.mod.
func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = up
	}
}

// buildObject compiles testdata/userprog/<name>.c with clang into a temp
// dir. A missing clang fails the test: the objects are part of the suite.
func buildObject(t testing.TB, name string) string {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/userprog/%s.c: %v", name, err)
	}
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), name+".o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
		"-I", filepath.Join(root, "jit", "include"), "-c", filepath.Join(root, "testdata", "userprog", name+".c"), "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s.c: %v\n%s", name, err, b)
	}
	return out
}

func TestLoad(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 4096})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		kind         shm.Kind
		keys, lanes  uint32
		slot         uint32
		span, hasTS  bool
		fieldMetrics []string
	}{
		"stats": {kind: shm.KindArray, keys: 64, lanes: 1, fieldMetrics: []string{
			"gpuprobe.map.stats.calls", "gpuprobe.map.stats.bytes", "gpuprobe.map.stats.last_delta",
			"gpuprobe.map.stats.occupancy", "gpuprobe.map.stats.hist", "gpuprobe.map.stats.hist",
			"gpuprobe.map.stats.hist", "gpuprobe.map.stats.hist", "gpuprobe.map.stats.ratio"}},
		"runs":      {kind: shm.KindPerThreadArray, keys: 1, lanes: 4096, fieldMetrics: []string{"gpuprobe.map.runs.value"}},
		"warp_work": {kind: shm.KindPerWarpArray, keys: 1, lanes: 128, fieldMetrics: []string{"gpuprobe.map.warp_work.value"}},
		// 16384 bytes / 32-byte records → 512 slots of 32+16 bytes
		"phases": {kind: shm.KindRing, keys: 512, lanes: 1, slot: 48, span: true},
		// 4096 / 16 = 256 slots of 32 bytes
		"exits": {kind: shm.KindRing, keys: 256, lanes: 1, slot: 32, hasTS: true},
	}
	if len(defs) != len(want) {
		t.Fatalf("%d maps, want %d", len(defs), len(want))
	}
	for i, d := range defs {
		w, ok := want[d.Name]
		if !ok {
			t.Fatalf("unexpected map %q", d.Name)
		}
		if d.ID != uint32(i) || d.Kind != w.kind || d.Keys != w.keys || d.Lanes != w.lanes || d.SlotSize != w.slot {
			t.Errorf("%s: id %d kind %v keys %d lanes %d slot %d, want kind %v keys %d lanes %d slot %d",
				d.Name, d.ID, d.Kind, d.Keys, d.Lanes, d.SlotSize, w.kind, w.keys, w.lanes, w.slot)
		}
		if d.rec.ringSpan != w.span || (d.rec.tsField >= 0) != w.hasTS {
			t.Errorf("%s: span %v ts %d, want span %v ts %v", d.Name, d.rec.ringSpan, d.rec.tsField, w.span, w.hasTS)
		}
		if w.fieldMetrics != nil {
			var got []string
			for _, f := range d.fields {
				got = append(got, f.metric)
			}
			if strings.Join(got, ",") != strings.Join(w.fieldMetrics, ",") {
				t.Errorf("%s: metrics %v, want %v", d.Name, got, w.fieldMetrics)
			}
		}
	}
	// Kinds from the type and the decl tag.
	stats := defs[0]
	kinds := map[string]bool{}
	for _, f := range stats.fields {
		kinds[f.metric] = f.sum
	}
	for name, sum := range map[string]bool{"calls": true, "last_delta": false, "occupancy": false, "hist": true, "ratio": false} {
		if kinds["gpuprobe.map.stats."+name] != sum {
			t.Errorf("field %s: sum=%v, want %v", name, !sum, sum)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	obj := buildObject(t, "usermaps")
	tests := []struct {
		name string
		cfg  []config.ProgramConfig
		o    Options
		want string
	}{
		{"missing file", []config.ProgramConfig{{Path: filepath.Join(t.TempDir(), "none.o")}}, Options{},
			"programs[0]::path"},
		{"unknown program", []config.ProgramConfig{{Path: obj, Attach: []string{"enter", "nope"}}}, Options{},
			`programs[0]::attach[1]: no program "nope"`},
		{"same object twice", []config.ProgramConfig{{Path: obj}, {Path: obj}}, Options{},
			`programs[1]::path ` + obj + `: map "stats" is also defined by programs[0]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadFiles(tc.cfg, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	defErrs := []struct {
		m    jit.Map
		want string
	}{
		{jit.Map{Name: "big", Type: jit.MapTypePerThreadArray, KeySize: 4, ValueSize: 8, MaxEntries: 1000},
			"1000 keys × 1048576 lanes × 8 bytes = 8388608000 bytes exceed"},
		{jit.Map{Name: strings.Repeat("n", 41), Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			"name is 41 bytes; at most 40"},
		{jit.Map{Name: "wide", Type: jit.MapTypeGPURingbuf, ValueSize: 1 << 16, MaxEntries: 1 << 20},
			"record of 65536 bytes does not fit a ring slot"},
		{jit.Map{Name: "zero", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 0, MaxEntries: 1}, "value size 0"},
	}
	for _, tc := range defErrs {
		_, err := newDef("x.o", &tc.m, nil, Options{MaxThreads: 1 << 20})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("map %s: err = %v, want %q", tc.m.Name, err, tc.want)
		}
	}
	// attach selects programs: only "enter" uses no ring buffer.
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj, Attach: []string{"enter", "host_launch"}}}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "stats,runs,warp_work" {
		t.Fatalf("maps of enter: %v", names)
	}
}

func TestRawTypeWithoutBTF(t *testing.T) {
	tests := []struct {
		size   uint32
		fields int
		metric string
	}{
		{8, 1, "gpuprobe.map.m.value"},
		{24, 3, "gpuprobe.map.m.value"},
		{4, 1, "gpuprobe.map.m.value"},
		{6, 1, "gpuprobe.map.m.value"},
	}
	for _, tc := range tests {
		d, err := newDef("x.o", &jit.Map{Name: "m", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: tc.size, MaxEntries: 2}, nil, Options{MaxThreads: 32, MapEntries: 4})
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		if len(d.fields) != tc.fields || d.fields[0].metric != tc.metric {
			t.Errorf("size %d: %d fields, first %q", tc.size, len(d.fields), d.fields[0].metric)
		}
	}
}

func TestStripIndices(t *testing.T) {
	tests := []struct {
		in, name string
		idx      []int64
	}{
		{"a", "a", nil},
		{"hist[3]", "hist", []int64{3}},
		{"grid[1].z", "grid.z", []int64{1}},
		{"m[2][5].x", "m.x", []int64{2, 5}},
	}
	for _, tc := range tests {
		name, idx := stripIndices(tc.in)
		if name != tc.name || len(idx) != len(tc.idx) {
			t.Errorf("%q: %q %v", tc.in, name, idx)
			continue
		}
		for i := range idx {
			if idx[i] != tc.idx[i] {
				t.Errorf("%q: index %v, want %v", tc.in, idx, tc.idx)
			}
		}
	}
}

// points returns "metric{attrs}" → value for sums and gauges.
func points(md pmetric.MetricSlice) map[string]float64 {
	out := map[string]float64{}
	for i := 0; i < md.Len(); i++ {
		m := md.At(i)
		var dps pmetric.NumberDataPointSlice
		switch m.Type() {
		case pmetric.MetricTypeSum:
			dps = m.Sum().DataPoints()
		case pmetric.MetricTypeGauge:
			dps = m.Gauge().DataPoints()
		case pmetric.MetricTypeExponentialHistogram:
			h := m.ExponentialHistogram().DataPoints()
			for j := 0; j < h.Len(); j++ {
				out[m.Name()+"{"+attrs(h.At(j).Attributes())+"}.count"] = float64(h.At(j).Count())
				out[m.Name()+"{"+attrs(h.At(j).Attributes())+"}.sum"] = h.At(j).Sum()
			}
			continue
		default:
			continue
		}
		for j := 0; j < dps.Len(); j++ {
			dp := dps.At(j)
			v := float64(dp.IntValue())
			if dp.ValueType() == pmetric.NumberDataPointValueTypeDouble {
				v = dp.DoubleValue()
			}
			out[m.Name()+"{"+attrs(dp.Attributes())+"}"] = v
		}
	}
	return out
}

func attrs(a pcommon.Map) string {
	var s []string
	a.Range(func(k string, v pcommon.Value) bool {
		if k != "process.pid" {
			s = append(s, k+"="+v.AsString())
		}
		return true
	})
	return strings.Join(s, ",")
}

func put64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

// TestArraysToMetrics writes values into the regions (as GPU code would)
// and checks the metrics.
func TestArraysToMetrics(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 256})
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance(defs, 42, 1, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	stats := in.Array("stats")
	for _, key := range []uint64{3, 5, 7} {
		v, err := stats.Value(key, 0)
		if err != nil {
			t.Fatal(err)
		}
		put64(v, 0, 10*key)                          // calls
		put64(v, 8, 100*key)                         // bytes
		put64(v, 16, uint64(int64(-int(key))))       // last_delta
		put64(v, 24, 32)                             // occupancy
		binary.LittleEndian.PutUint32(v[32+4*2:], 9) // hist[2]
		put64(v, 48, math.Float64bits(0.5))          // ratio
	}
	runs := in.Array("runs")
	for lane := range uint64(10) {
		if _, err := runs.AddUint64(0, lane*3, lane+1); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name            string
		maxKeys         int
		perThread       bool
		maxThreadSeries int
		want            map[string]float64
		absent          []string
		over            uint64
	}{
		{name: "all keys", maxKeys: 10, want: map[string]float64{
			"gpuprobe.map.stats.calls{gpuprobe.map.key=3}":                     30,
			"gpuprobe.map.stats.bytes{gpuprobe.map.key=7}":                     700,
			"gpuprobe.map.stats.last_delta{gpuprobe.map.key=5}":                -5,
			"gpuprobe.map.stats.occupancy{gpuprobe.map.key=5}":                 32,
			"gpuprobe.map.stats.hist{gpuprobe.map.key=3,gpuprobe.map.index=2}": 9,
			"gpuprobe.map.stats.hist{gpuprobe.map.key=3,gpuprobe.map.index=0}": 0,
			"gpuprobe.map.stats.ratio{gpuprobe.map.key=7}":                     0.5,
			"gpuprobe.map.runs.value{gpuprobe.map.key=0}.count":                10,
			"gpuprobe.map.runs.value{gpuprobe.map.key=0}.sum":                  55,
			MetricKeysOverLimit + "{}":                                         0,
		}, absent: []string{"gpuprobe.map.stats.calls{gpuprobe.map.key=0}", "gpuprobe.map.warp_work.value{gpuprobe.map.key=0}.count",
			"gpuprobe.map.runs.value.by_lane{gpuprobe.map.key=0,cuda.thread.index=0}"}},
		{name: "keys bounded", maxKeys: 2, want: map[string]float64{
			"gpuprobe.map.stats.calls{gpuprobe.map.key=3}": 30,
			"gpuprobe.map.stats.calls{gpuprobe.map.key=5}": 50,
			MetricKeysOverLimit + "{}":                     1,
		}, absent: []string{"gpuprobe.map.stats.calls{gpuprobe.map.key=7}"}, over: 1},
		{name: "per-lane series", maxKeys: 10, perThread: true, maxThreadSeries: 10, want: map[string]float64{
			"gpuprobe.map.runs.value.by_lane{gpuprobe.map.key=0,cuda.thread.index=0}":  1,
			"gpuprobe.map.runs.value.by_lane{gpuprobe.map.key=0,cuda.thread.index=27}": 10,
		}},
		{name: "per-lane series over the bound", maxKeys: 10, perThread: true, maxThreadSeries: 9,
			want:   map[string]float64{"gpuprobe.map.runs.value{gpuprobe.map.key=0}.count": 10},
			absent: []string{"gpuprobe.map.runs.value.by_lane{gpuprobe.map.key=0,cuda.thread.index=0}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCollector(CollectorOptions{MaxMapKeys: tc.maxKeys, PerThreadSeries: tc.perThread, MaxThreadSeries: tc.maxThreadSeries})
			sm := pmetric.NewMetricSlice()
			c.AppendMetrics(sm, []*Instance{in}, time.Now())
			got := points(sm)
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s present", k)
				}
			}
			if c.Counters().KeysOver != tc.over {
				t.Errorf("keys over limit %d, want %d", c.Counters().KeysOver, tc.over)
			}
			if t.Failed() {
				t.Logf("got %v", got)
			}
		})
	}
}

// spanList flattens the spans of td.
func spanList(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		ss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < ss.Len(); j++ {
			for k := 0; k < ss.At(j).Spans().Len(); k++ {
				out = append(out, ss.At(j).Spans().At(k))
			}
		}
	}
	return out
}

// TestRingsToSpans produces records into the ring regions in the shm
// layout (as the GPU's perf_event_output does) and checks spans and events.
func TestRingsToSpans(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance(defs, 42, 7, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	const gpuBase, realBase = uint64(1_000_000_000), uint64(1_700_000_000_000_000_000)
	mapper := clock.New()
	if err := mapper.AddCalibration(in.Src, 2, gpuBase, 0, realBase); err != nil {
		t.Fatal(err)
	}

	phases := in.Ring("phases")
	rec := make([]byte, 32)
	put64(rec, 0, gpuBase+100)
	put64(rec, 8, gpuBase+350)
	binary.LittleEndian.PutUint32(rec[16:], 11)
	binary.LittleEndian.PutUint32(rec[20:], 2)
	copy(rec[24:], "gemm")
	if r := phases.Produce(0, rec); r != shm.Published {
		t.Fatal(r)
	}
	if r := phases.Produce(0, rec[:20]); r != shm.Published { // short: phase and tag left out
		t.Fatal(r)
	}
	if r := phases.Produce(0, nil); r != shm.Published { // empty: invalid
		t.Fatal(r)
	}
	exits := in.Ring("exits")
	for i := range 300 { // 256 slots: 44 dropped
		ev := make([]byte, 16)
		put64(ev, 0, gpuBase+uint64(1000+i))
		binary.LittleEndian.PutUint32(ev[8:], uint32(i%32))
		exits.Produce(0, ev)
	}
	c := NewCollector(CollectorOptions{Clock: mapper, Device: func(src uint32) uint32 {
		if src != 7 {
			t.Errorf("device asked for source %d", src)
		}
		return 2
	}, MaxEventsPerSpan: 100})
	n := c.ReadRings(in, time.Now(), 0)
	if n != 259 {
		t.Fatalf("read %d records, want 259", n)
	}
	cs := c.Counters()
	if cs.Records != 259 || cs.Invalid != 1 || cs.Short != 1 || cs.Cut != 0 || cs.Dropped != 44 || cs.Unmapped != 0 || cs.EventsBuilt != 256 {
		t.Fatalf("counters %+v", cs)
	}
	spans := spanList(c.TakeTraces())
	if len(spans) != 2+3 { // two phase spans, 256 events in spans of ≤ 100
		t.Fatalf("%d spans", len(spans))
	}
	if short := spans[1].Attributes(); short.Len() != 2 || short.AsRaw()["sm_id"] != int64(11) {
		t.Errorf("short phase span attributes %v, want sm_id and the map name", short.AsRaw())
	}
	spans = append(spans[:1], spans[2:]...)
	p := spans[0]
	if p.Name() != "phases" || uint64(p.StartTimestamp()) != realBase+100 || uint64(p.EndTimestamp()) != realBase+350 {
		t.Fatalf("phase span %s %d..%d", p.Name(), p.StartTimestamp(), p.EndTimestamp())
	}
	wantAttrs := map[string]string{"sm_id": "11", "phase": "PHASE_COMPUTE", "tag": "gemm", AttrMapName: "phases"}
	for k, v := range wantAttrs {
		if got, ok := p.Attributes().Get(k); !ok || got.AsString() != v {
			t.Errorf("attribute %s = %v, want %s", k, got.AsString(), v)
		}
	}
	if _, ok := p.Attributes().Get("start_ns"); ok {
		t.Error("start_ns is the span start, not an attribute")
	}
	events := 0
	for _, s := range spans[1:] {
		if s.Name() != "exits" {
			t.Fatalf("span %q", s.Name())
		}
		ev := s.Events()
		events += ev.Len()
		first := ev.At(0)
		if s.StartTimestamp() != first.Timestamp() || s.EndTimestamp() != ev.At(ev.Len()-1).Timestamp() {
			t.Errorf("batch span %d..%d, events %d..%d", s.StartTimestamp(), s.EndTimestamp(), first.Timestamp(), ev.At(ev.Len()-1).Timestamp())
		}
		if _, ok := first.Attributes().Get("lane"); !ok {
			t.Error("event without lane")
		}
	}
	if events != 256 || uint64(spans[1].Events().At(0).Timestamp()) != realBase+1000 {
		t.Fatalf("%d events, first at %d", events, spans[1].Events().At(0).Timestamp())
	}

	// No calibration for the device: placed at read time, marked.
	c2 := NewCollector(CollectorOptions{Clock: clock.New()})
	phases.Produce(0, rec)
	now := time.Now()
	c2.ReadRings(in, now, 0)
	s := spanList(c2.TakeTraces())
	if len(s) != 1 || s[0].EndTimestamp() != pcommon.NewTimestampFromTime(now) || s[0].EndTimestamp()-s[0].StartTimestamp() != 250 {
		t.Fatalf("unmapped span: %d spans", len(s))
	}
	if v, ok := s[0].Attributes().Get(AttrClockMapped); !ok || v.Bool() {
		t.Fatal("unmapped span not marked")
	}
	if c2.Counters().Unmapped != 1 {
		t.Fatalf("unmapped %d", c2.Counters().Unmapped)
	}
}

// TestOffers checks the descriptors handed to the application.
func TestOffers(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance(defs, 1, 1, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	offers := in.Offers()
	if len(offers) != len(defs) {
		t.Fatalf("%d offers", len(offers))
	}
	for _, o := range offers {
		h := o.Region.Header()
		d := defs[h.ID]
		if o.Name != d.Name || h.Kind != d.Kind || o.Role != 3 {
			t.Errorf("offer %q: kind %v id %d role %d", o.Name, h.Kind, h.ID, o.Role)
		}
	}
}
