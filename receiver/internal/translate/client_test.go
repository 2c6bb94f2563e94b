package translate

import (
	"runtime"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// feedSrc hands the records of s to tr as source src.
func feedSrc(t testing.TB, tr *Translator, src uint32, s *stream, now time.Time) {
	t.Helper()
	for i, r := range s.b {
		if err := tr.Handle(src, r, now); err != nil {
			t.Fatalf("source %d record %d: %v", src, i, err)
		}
	}
}

// eachMetric calls f with every metric of md, of every resource.
func eachMetric(md pmetric.Metrics, f func(pmetric.Metric)) {
	for i := range md.ResourceMetrics().Len() {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				f(ms.At(k))
			}
		}
	}
}

// dataPoints counts the data points of metric name.
func dataPoints(md pmetric.Metrics, name string) int {
	n := 0
	eachMetric(md, func(m pmetric.Metric) {
		if m.Name() != name {
			return
		}
		switch m.Type() {
		case pmetric.MetricTypeSum:
			n += m.Sum().DataPoints().Len()
		case pmetric.MetricTypeExponentialHistogram:
			n += m.ExponentialHistogram().DataPoints().Len()
		}
	})
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestDeviceNumbersBounded: 200,000 memcpy records and 20,000 launches with
// distinct device numbers make a bounded number of series and memory
// (unbounded, they made 800,000 series and 3.5 GB).
func TestDeviceNumbersBounded(t *testing.T) {
	const copies, launches = 200_000, 20_000
	kinds := int(record.MemcpyPeer) + 1
	tests := []struct {
		name     string
		reported []uint32 // Device records the client wrote
		series   int      // memcpy series per kind at most
	}{
		{"no device reported", nil, MaxDevices + 1},
		{"two devices reported", []uint32{0, 1}, 2 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{})
			now := time.Now()
			for _, d := range tc.reported {
				if err := tr.Handle(1, (&record.Device{Device: d}).Append(nil), now); err != nil {
					t.Fatal(err)
				}
			}
			before := heapInUse()
			for i := range copies {
				m := &record.Memcpy{Bytes: 8, StartNS: uint64(i), EndNS: uint64(i) + 10, PID: 42,
					Device: uint32(i) * 7919, Kind: record.MemcpyKind(i % kinds)}
				if err := tr.Handle(1, m.Append(nil), now); err != nil {
					t.Fatal(err)
				}
				if i%1000 == 0 {
					tr.TakeTraces() // one poll
				}
			}
			for i := range launches {
				l := &record.Launch{LaunchID: uint64(i), PID: 42, Function: 1, Device: uint32(i) * 104729,
					Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
				c := &record.Completion{LaunchID: uint64(i), CompleteNS: 100}
				for _, b := range [][]byte{l.Append(nil), c.Append(nil)} {
					if err := tr.Handle(1, b, now); err != nil {
						t.Fatal(err)
					}
				}
				if i%1000 == 0 {
					tr.Expire(now.Add(time.Second))
					tr.TakeTraces()
				}
			}
			tr.Expire(now.Add(time.Hour))
			tr.TakeTraces()
			md := tr.Metrics(now, nil)
			if n := dataPoints(md, MetricMemcpyBytes); n > tc.series*kinds {
				t.Errorf("%d memcpy series, want ≤ %d", n, tc.series*kinds)
			}
			if n := dataPoints(md, MetricLaunches); n > tc.series {
				t.Errorf("%d launch series, want ≤ %d", n, tc.series)
			}
			got := heapInUse()
			t.Logf("heap %+d KiB, %d memcpy and %d launch series", (int64(got)-int64(before))>>10,
				dataPoints(md, MetricMemcpyBytes), dataPoints(md, MetricLaunches))
			if got > before+32<<20 {
				t.Errorf("heap grew by %d MiB", (got-before)>>20)
			}
			if c := tr.Counters(); c.DevicesFolded < copies/2 {
				t.Errorf("%d device numbers folded, want most of %d", c.DevicesFolded, copies+launches)
			}
		})
	}
}

// TestDisconnectFreesClient: a client's state goes with it.
func TestDisconnectFreesClient(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.Device{Device: 0, UUID: [16]byte{9}})
	s.add(&record.KernelName{Function: 0xf, Name: "k"})
	s.launch(1, 0xf, 10_000, 1, 32, 1, false) // never completes
	mapper := clock.New()
	mapper.SetMonoOffset(realBase)
	tr := newTr(Options{Clock: mapper, ExpectWarps: true})
	now := time.Now()
	tr.Connect(1, Peer{PID: 1000, Exe: "app"})
	feedSrc(t, tr, 1, &s, now)
	if tr.Pending() != 1 || tr.Clients() != 1 {
		t.Fatalf("pending %d, clients %d", tr.Pending(), tr.Clients())
	}
	tr.Disconnect(1, now)
	if tr.Pending() != 0 || tr.Clients() != 0 || len(tr.spans.res.peers) != 0 {
		t.Fatalf("after disconnect: pending %d, clients %d, peers %d", tr.Pending(), tr.Clients(), len(tr.spans.res.peers))
	}
	if _, ok := mapper.GPUToReal(1, 0, gpuBase); ok {
		t.Fatal("the client's clock fit outlived it")
	}
	if td := tr.TakeTraces(); td.SpanCount() == 0 {
		t.Fatal("the pending launch was not emitted")
	}
}

// spanTimes maps span names to their [start, end].
func spanTimes(td ptrace.Traces) map[string][2]pcommon.Timestamp {
	out := map[string][2]pcommon.Timestamp{}
	for name, ss := range spanByName(td) {
		out[name] = [2]pcommon.Timestamp{ss[0].StartTimestamp(), ss[0].EndTimestamp()}
	}
	return out
}

// TestCalibrationIsolated: a client's calibration records never move
// another client's spans (a hostile one moved them by 43 years).
func TestCalibrationIsolated(t *testing.T) {
	const years43 = 43 * 365 * 86400 * 1_000_000_000
	tests := []struct {
		name    string
		hostOff bool // the collector has read its own clocks
		cal     record.Calibration
	}{
		{"realtime 43 years on", true, record.Calibration{MonoNS: 2000, RealtimeNS: realBase + 2000 + years43, GPUNS: gpuBase + 2000}},
		{"realtime 43 years on, no host offset", false, record.Calibration{MonoNS: 2000, RealtimeNS: realBase + 2000 + years43, GPUNS: gpuBase + 2000}},
		{"GPU clock 43 years on", true, record.Calibration{MonoNS: 2000, RealtimeNS: realBase + 2000, GPUNS: gpuBase + 2000 + years43}},
		{"GPU clock 1000x slow", true, record.Calibration{MonoNS: 1_000_000, RealtimeNS: realBase + 1_000_000, GPUNS: gpuBase + 2000}},
		{"other device", true, record.Calibration{MonoNS: 2000, RealtimeNS: realBase + 2000, GPUNS: 7, Device: 1}},
	}
	run := func(t *testing.T, hostOff bool, hostile *record.Calibration) map[string][2]pcommon.Timestamp {
		mapper := clock.New()
		if hostOff {
			mapper.SetMonoOffset(realBase)
		}
		tr := newTr(Options{Clock: mapper, ExpectWarps: true})
		now := time.Now()
		var a stream
		a.calibrate(0)
		a.add(&record.KernelName{Function: 0xf, Name: "victim"})
		feedSrc(t, tr, 1, &a, now)
		if hostile != nil {
			_ = tr.Handle(2, hostile.Append(nil), now) // rejected or not: client 2's own
		}
		var b stream
		b.launch(1, 0xf, 10_000, 2, 64, 4, true)
		feedSrc(t, tr, 1, &b, now)
		return spanTimes(tr.TakeTraces())
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := run(t, tc.hostOff, nil)
			if len(want) != 5 {
				t.Fatalf("baseline spans %v", want)
			}
			got := run(t, tc.hostOff, &tc.cal)
			for name, w := range want {
				if g := got[name]; g != w {
					t.Errorf("%s: [%d, %d], want [%d, %d]", name, g[0]-realBase, g[1]-realBase, w[0]-realBase, w[1]-realBase)
				}
			}
		})
	}
}

// TestPeerIdentity: spans carry the pid and executable of the connection,
// not what records claim.
func TestPeerIdentity(t *testing.T) {
	var read []uint32
	tr := New(Options{ProcessName: func(pid uint32) string { read = append(read, pid); return "victim" }})
	tr.o.Clock.SetMonoOffset(realBase)
	tr.Connect(1, Peer{PID: 1000, Exe: "attacker\xff"})
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 0xf, Name: "k"})
	s.launch(1, 0xf, 10_000, 1, 32, 0, true) // record pid 42
	s.add(&record.Memcpy{Bytes: 8, StartNS: 20_000, EndNS: 20_100, PID: 42})
	s.add(&record.Sync{StartNS: 30_000, EndNS: 30_100, PID: 42, Kind: record.SyncStream})
	feedSrc(t, tr, 1, &s, time.Now())
	tr.Expire(time.Now().Add(time.Hour))
	td := tr.TakeTraces()
	if td.SpanCount() < 3 {
		t.Fatalf("%d spans", td.SpanCount())
	}
	rs := td.ResourceSpans()
	for i := range rs.Len() {
		res := rs.At(i).Resource().Attributes()
		for k, want := range map[string]any{"process.pid": int64(1000), "process.executable.name": "attacker\uFFFD"} {
			if v, ok := res.Get(k); !ok || v.AsRaw() != want {
				t.Errorf("resource %s = %v, want %v", k, v.AsRaw(), want)
			}
		}
		ss := rs.At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			if v, ok := ss.At(j).Attributes().Get("process.pid"); ok && v.Int() != 1000 {
				t.Errorf("%s: process.pid %d", ss.At(j).Name(), v.Int())
			}
		}
	}
	if len(read) != 0 {
		t.Errorf("read /proc of pids %v, want none (the executable comes from the connection)", read)
	}
}

// TestKernelNameUTF8: a kernel name of invalid UTF-8 reaches pdata as
// valid UTF-8 (as OTLP strings must be).
func TestKernelNameUTF8(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 0xf, Name: "_Z3k\xff\xfe\xc0"})
	s.launch(1, 0xf, 10_000, 1, 32, 0, true)
	tr := newTr(Options{})
	feed(t, tr, &s, time.Now())
	tr.Expire(time.Now().Add(time.Hour))
	var names []string
	td := tr.TakeTraces()
	for i := range td.ResourceSpans().Len() {
		ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := range ss.Len() {
			names = append(names, ss.At(j).Name())
			ss.At(j).Attributes().Range(func(k string, v pcommon.Value) bool {
				names = append(names, v.AsString())
				return true
			})
		}
	}
	eachMetric(tr.Metrics(time.Now(), nil), func(m pmetric.Metric) {
		if m.Name() == MetricLaunches {
			v, _ := m.Sum().DataPoints().At(0).Attributes().Get("cuda.kernel.name")
			names = append(names, v.Str())
		}
	})
	if len(names) < 3 {
		t.Fatalf("strings %q", names)
	}
	for _, n := range names {
		if !utf8.ValidString(n) {
			t.Errorf("invalid UTF-8 in pdata: %q", n)
		}
	}
}

// TestKernelHandlesPerClient: a client naming more function handles than
// its bound forgets its own bindings, never another client's.
func TestKernelHandlesPerClient(t *testing.T) {
	tr := newTr(Options{})
	now := time.Now()
	if err := tr.Handle(1, (&record.KernelName{Function: 0xf, Name: "victim"}).Append(nil), now); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxKernelHandles {
		k := &record.KernelName{Function: uint64(i), Name: "flood"}
		if err := tr.Handle(2, k.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.clients.clientOf(2).kernels.byFn); n > maxKernelHandles {
		t.Errorf("client 2 holds %d handles, want ≤ %d", n, maxKernelHandles)
	}
	if k := tr.clients.clientOf(1).kernels.byFn[0xf]; k == nil || k.name != "victim" {
		t.Errorf("client 1's kernel name lost: %+v", k)
	}
}

// TestPendingPerClient: a client flooding pending launches evicts its own,
// not another client's.
func TestPendingPerClient(t *testing.T) {
	tr := newTr(Options{MaxPendingLaunches: 100})
	now := time.Now()
	var victim stream
	victim.calibrate(0)
	victim.add(&record.KernelName{Function: 0xf, Name: "victim"})
	victim.launch(1, 0xf, 10_000, 1, 32, 0, false)
	feedSrc(t, tr, 1, &victim, now)
	for i := range 10_000 {
		l := &record.Launch{LaunchID: uint64(i), PID: 7, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
		if err := tr.Handle(2, l.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Pending() > 100 || len(tr.launches.pending.bySrc[2].queue)-tr.launches.pending.bySrc[2].qhead > 2*100+1024 {
		t.Fatalf("pending %d, client 2 queue %d", tr.Pending(), len(tr.launches.pending.bySrc[2].queue)-tr.launches.pending.bySrc[2].qhead)
	}
	var done stream
	done.add(&record.Completion{LaunchID: 1, CompleteNS: 13_000})
	feedSrc(t, tr, 1, &done, now)
	if got := spanByName(tr.TakeTraces())[SpanCompletion]; len(got) != 1 {
		t.Fatalf("%d completion spans of the victim's launch, want 1 (evicted by another client)", len(got))
	}
}
