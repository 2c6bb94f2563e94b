package translate

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/receiver/internal/procres"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// podPeer is the peer of a process in its own container, as the receiver
// makes it.
func podPeer(t *testing.T, pid uint32, pod string) Peer {
	t.Helper()
	cid := fmt.Sprintf("%064x", pid)
	res, errs := procres.Build(procres.Process{PID: pid, Start: 100 + uint64(pid), ExePath: "/usr/bin/python3",
		Cgroup: "0::/kubepods.slice/cri-containerd-" + cid + ".scope\n", HostName: "node-1",
		EnvServiceName: "trainer", EnvResAttrs: "app.replica=" + pod + ",k8s.pod.name=" + pod})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return Peer{PID: pid, Exe: "python3", Start: 100 + uint64(pid), Resource: res}
}

// gpuStream is one client's records: its device 0 is the GPU uuid, whose
// %globaltimer reads gpuOff ns more than gpuBase at the same instant.
func gpuStream(uuid byte, gpuOff uint64, launches int) *stream {
	var s stream
	s.add(&record.Calibration{MonoNS: 1000, RealtimeNS: realBase + 1000, GPUNS: gpuBase + gpuOff + 1000})
	s.add(&record.Device{Device: 0, UUID: [16]byte{uuid, 0xaa}})
	s.add(&record.KernelName{Function: 0xf, Name: "gemm"})
	for i := range launches {
		id, enq := uint64(i+1), uint64(10_000*(i+1))
		s.add(&record.Launch{LaunchID: id, EnqueueNS: enq, ReturnNS: enq + 100, Function: 0xf,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
		st := gpuBase + gpuOff + enq + 500
		s.add(&record.Warp{LaunchID: id, ActiveMask: 1, StartNS: st, MinExitNS: st + 900, EndNS: st + 1000})
		s.add(&record.Completion{LaunchID: id, CompleteNS: enq + 3000})
	}
	s.add(&record.Memcpy{Bytes: 64, StartNS: 1, EndNS: 2, Kind: record.MemcpyDeviceToHost})
	return &s
}

// TestTwoPodsDeviceZero: two processes on one node each see their own GPU
// as device 0. Each one's spans and metrics carry its own resource and
// its own GPU's UUID, and its GPU times are mapped by its own
// calibration; their series stay apart.
func TestTwoPodsDeviceZero(t *testing.T) {
	mapper := clock.New()
	mapper.SetMonoOffset(realBase)
	tr := newTr(Options{Clock: mapper, ExpectWarps: true, Process: ProcessOptions{HostName: "node-1"}})
	now := time.Now()
	tr.Connect(1, podPeer(t, 1000, "a"))
	tr.Connect(2, podPeer(t, 2000, "b"))
	// GPU 2's clock is 7 ms ahead of GPU 1's: mixed calibrations would
	// move one pod's device phases by 7 ms.
	feedSrc(t, tr, 1, gpuStream(1, 0, 2), now)
	feedSrc(t, tr, 2, gpuStream(2, 7_000_123, 3), now)

	uuid := func(b byte) string { return fmt.Sprintf("%02xaa0000-0000-0000-0000-000000000000", b) }
	want := map[int64]struct {
		pod, uuid string
		launches  int64
	}{1000: {"a", uuid(1), 2}, 2000: {"b", uuid(2), 3}}

	td := tr.TakeTraces()
	if td.ResourceSpans().Len() != 2 {
		t.Fatalf("%d span resources, want 2", td.ResourceSpans().Len())
	}
	for i := range td.ResourceSpans().Len() {
		rs := td.ResourceSpans().At(i)
		pid, w := checkPodResource(t, rs.Resource().Attributes(), want)
		spans := rs.ScopeSpans().At(0).Spans()
		for j := range spans.Len() {
			sp := spans.At(j)
			if sp.Name() == "gemm" {
				if u, _ := sp.Attributes().Get("cuda.device.uuid"); u.Str() != w.uuid {
					t.Errorf("pid %d: launch span on %q, want %q", pid, u.Str(), w.uuid)
				}
			}
			if sp.Name() == SpanExecuting {
				if off := uint64(sp.StartTimestamp()) - realBase; off%10_000 != 500 {
					t.Errorf("pid %d: cuda.executing starts at mono %d, want enqueue + 500 (its own GPU's calibration)", pid, off)
				}
			}
		}
	}

	md := tr.Metrics(now, nil)
	if md.ResourceMetrics().Len() != 3 {
		t.Fatalf("%d metric resources, want the collector's and 2", md.ResourceMetrics().Len())
	}
	for i := 1; i < 3; i++ {
		rm := md.ResourceMetrics().At(i)
		pid, w := checkPodResource(t, rm.Resource().Attributes(), want)
		ms := rm.ScopeMetrics().At(0).Metrics()
		var launches, copies int
		for j := range ms.Len() {
			m := ms.At(j)
			var attrs []pcommon.Map
			switch m.Name() {
			case MetricLaunches, MetricMemcpyBytes:
				for k := range m.Sum().DataPoints().Len() {
					dp := m.Sum().DataPoints().At(k)
					attrs = append(attrs, dp.Attributes())
					if m.Name() == MetricLaunches && dp.IntValue() != w.launches {
						t.Errorf("pid %d: %d launches, want %d", pid, dp.IntValue(), w.launches)
					}
				}
				if m.Name() == MetricLaunches {
					launches += len(attrs)
				} else {
					copies += len(attrs)
				}
			}
			for _, a := range attrs {
				d, _ := a.Get("cuda.device.index")
				u, _ := a.Get("cuda.device.uuid")
				if d.Int() != 0 || u.Str() != w.uuid {
					t.Errorf("pid %d: %s on device %d %q, want 0 %q", pid, m.Name(), d.Int(), u.Str(), w.uuid)
				}
			}
		}
		if launches != 1 || copies != 1 {
			t.Errorf("pid %d: %d launch and %d copy series, want 1 and 1", pid, launches, copies)
		}
	}
}

// checkPodResource checks a resource of TestTwoPodsDeviceZero.
func checkPodResource(t *testing.T, a pcommon.Map, want map[int64]struct {
	pod, uuid string
	launches  int64
}) (int64, struct {
	pod, uuid string
	launches  int64
}) {
	t.Helper()
	pv, _ := a.Get("process.pid")
	pid := pv.Int()
	w, ok := want[pid]
	if !ok {
		t.Fatalf("resource of pid %d: %v", pid, a.AsRaw())
	}
	// The pods tell apart by their container ids, which the collector
	// reads from the cgroup, and by the attributes of their own; the
	// k8s.pod.name they claim is not theirs to set (the k8s processor
	// sets it from the container id).
	for k, v := range map[string]string{"service.name": "trainer", "app.replica": w.pod, "k8s.pod.name": "", "host.name": "node-1",
		"container.id": fmt.Sprintf("%064x", pid), "process.executable.path": "/usr/bin/python3"} {
		if got, _ := a.Get(k); got.Str() != v {
			t.Errorf("pid %d: resource %s = %q, want %q", pid, k, got.Str(), v)
		}
	}
	return pid, w
}

// procLaunches returns process pid → its gpu.cuda.kernel.launches total.
func procLaunches(md pmetric.Metrics) map[int64]int64 {
	out := map[int64]int64{}
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		pv, ok := rm.Resource().Attributes().Get("process.pid")
		pid := pv.Int()
		if !ok {
			pid = -1
		}
		eachMetric(pmetricOf(rm), func(m pmetric.Metric) {
			if m.Name() == MetricLaunches {
				for k := range m.Sum().DataPoints().Len() {
					out[pid] += m.Sum().DataPoints().At(k).IntValue()
				}
			}
		})
	}
	return out
}

// pmetricOf wraps one resource's metrics.
func pmetricOf(rm pmetric.ResourceMetrics) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm.CopyTo(md.ResourceMetrics().AppendEmpty())
	return md
}

// TestProcessRetention: a process's series outlive its connection by
// ProcessRetention, a reconnect of the same process continues them, and
// then they go.
func TestProcessRetention(t *testing.T) {
	tr := newTr(Options{Process: ProcessOptions{Retention: time.Minute}})
	t0 := time.Now()
	peer := Peer{PID: 7, Exe: "app", Start: 55}
	tr.Connect(1, peer)
	feedSrc(t, tr, 1, gpuStream(1, 0, 2), t0)
	tr.Disconnect(1, t0)
	tr.Expire(t0.Add(30 * time.Second))
	if got := procLaunches(tr.Metrics(t0, nil))[7]; got != 2 || tr.Processes() != 1 {
		t.Fatalf("after disconnect: %d launches of %d processes, want 2 of 1", got, tr.Processes())
	}
	// The same process (pid and start time) comes back: one series.
	tr.Connect(2, peer)
	feedSrc(t, tr, 2, gpuStream(1, 0, 1), t0)
	tr.Disconnect(2, t0.Add(40*time.Second))
	tr.Expire(t0.Add(90 * time.Second))
	if got := procLaunches(tr.Metrics(t0, nil))[7]; got != 3 {
		t.Fatalf("after a reconnect: %d launches, want 3", got)
	}
	// Another process of the same pid (a later start) is another series.
	tr.Connect(3, Peer{PID: 7, Exe: "app", Start: 99})
	if tr.Processes() != 2 {
		t.Fatalf("%d processes, want 2", tr.Processes())
	}
	tr.Disconnect(3, t0.Add(40*time.Second))
	tr.Expire(t0.Add(100 * time.Second))
	if n := tr.Processes(); n != 0 {
		t.Fatalf("%d processes a minute after they left, want 0", n)
	}
	if md := tr.Metrics(t0, nil); md.ResourceMetrics().Len() != 1 {
		t.Fatalf("%d metric resources, want the collector's alone", md.ResourceMetrics().Len())
	}
}

// TestProcessesBounded: past MaxProcesses, a process gone and emitted
// makes room; with none, new processes count in one overflow resource.
func TestProcessesBounded(t *testing.T) {
	tr := newTr(Options{Process: ProcessOptions{MaxProcesses: 2}})
	now := time.Now()
	for src := uint32(1); src <= 3; src++ {
		tr.Connect(src, Peer{PID: 100 * src, Exe: "app", Start: 1})
		feedSrc(t, tr, src, gpuStream(1, 0, int(src)), now)
	}
	if c := tr.Counters(); c.ProcessesFolded != 1 || tr.Processes() != 2 {
		t.Fatalf("%d processes, %d folded, want 2 and 1", tr.Processes(), c.ProcessesFolded)
	}
	md := tr.Metrics(now, nil)
	if got := procLaunches(md); got[100] != 1 || got[200] != 2 || got[-1] != 3 {
		t.Fatalf("launches by process %v, want 100: 1, 200: 2, overflow: 3", got)
	}
	if svc, _ := md.ResourceMetrics().At(3).Resource().Attributes().Get("service.name"); svc.Str() != "unknown_service" {
		t.Errorf("overflow resource %v", md.ResourceMetrics().At(3).Resource().Attributes().AsRaw())
	}
	// Process 100 leaves; until its final values were emitted it keeps
	// its place.
	tr.Disconnect(1, now)
	tr.Connect(4, Peer{PID: 400, Exe: "app", Start: 1})
	if c := tr.Counters(); c.ProcessesFolded != 2 {
		t.Fatalf("%d folded, want 2: process 100's last values are not out yet", c.ProcessesFolded)
	}
	tr.Metrics(now, nil)
	tr.Connect(5, Peer{PID: 500, Exe: "app", Start: 1})
	feedSrc(t, tr, 5, gpuStream(1, 0, 5), now)
	got := procLaunches(tr.Metrics(now, nil))
	if _, ok := got[100]; ok || got[500] != 5 || tr.Counters().ProcessesFolded != 2 {
		t.Fatalf("launches by process %v, want 500 in 100's place", got)
	}
}

// TestDeviceUUID: cuda.device.uuid is the bare UUID (OBI's form, without
// nvidia-smi's "GPU-" or "MIG-"), a MIG instance's as a GPU's.
func TestDeviceUUID(t *testing.T) {
	u := [16]byte{0xc6, 0xd4, 0xf1, 0xef, 0x42, 0xe4, 0x5d, 0xe3, 0x91, 0xc7, 0x45, 0xd7, 0x1c, 0x87, 0xeb, 0x3f}
	tests := []struct{ name, want string }{
		{"NVIDIA H100 80GB HBM3", "c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"},
		{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"},
		{"", "c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"},
	}
	for _, tc := range tests {
		if got := deviceUUID(&record.Device{UUID: u, Name: tc.name}); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestKernelNamesPerProcess: limits::max_kernel_names bounds each
// process's names. A client that takes the bound's worth of names and
// goes leaves a later process's kernels their own names (a bound for the
// whole collector folded every later process's kernels into "other").
func TestKernelNamesPerProcess(t *testing.T) {
	tr := newTr(Options{MaxKernelNames: 3, ExpectWarps: true})
	now := time.Now()
	tr.Connect(1, podPeer(t, 1000, "a"))
	var greedy stream
	greedy.calibrate(0)
	for fn := range uint64(4) {
		greedy.add(&record.KernelName{Function: fn, Name: fmt.Sprintf("kernel%d", fn)})
		greedy.launch(fn+1, fn, 1000*(fn+1), 1, 32, 1, true)
	}
	feedSrc(t, tr, 1, &greedy, now)
	tr.Disconnect(1, now)

	tr.Connect(2, podPeer(t, 2000, "b"))
	var honest stream
	honest.calibrate(0)
	honest.add(&record.KernelName{Function: 9, Name: "gemm"})
	honest.launch(1, 9, 1000, 1, 32, 1, true)
	honest.launch(2, 9, 2000, 1, 32, 1, true)
	feedSrc(t, tr, 2, &honest, now)

	want := map[int64]map[string]int64{
		1000: {"kernel0": 1, "kernel1": 1, "kernel2": 1, OtherKernel: 1},
		2000: {"gemm": 2},
	}
	md := tr.Metrics(now, nil)
	got := map[int64]map[string]int64{}
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		pid, ok := rm.Resource().Attributes().Get("process.pid")
		if !ok {
			continue // the collector's own resource
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if m := ms.At(j); m.Name() == MetricLaunches {
				for k := range m.Sum().DataPoints().Len() {
					dp := m.Sum().DataPoints().At(k)
					name, _ := dp.Attributes().Get("cuda.kernel.name")
					if got[pid.Int()] == nil {
						got[pid.Int()] = map[string]int64{}
					}
					got[pid.Int()][name.Str()] += dp.IntValue()
				}
			}
		}
	}
	for pid, names := range want {
		if !maps.Equal(got[pid], names) {
			t.Errorf("pid %d: launches by kernel name %v, want %v", pid, got[pid], names)
		}
	}
}
