package progmaps

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/userprog"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: creating kernel maps needs root (CI runs the tests as root)")
	}
}

// hasPID reports whether any data point of sm carries process.pid.
func hasPID(sm pmetric.MetricSlice) bool {
	for i := 0; i < sm.Len(); i++ {
		m := sm.At(i)
		if m.Type() != pmetric.MetricTypeSum {
			continue
		}
		dps := m.Sum().DataPoints()
		for j := 0; j < dps.Len(); j++ {
			if _, ok := dps.At(j).Attributes().Get("process.pid"); ok {
				return true
			}
		}
	}
	return false
}

// TestKernelArraysToMetrics writes kernel arrays (mmapable: read through
// the mapping; plain: copied at each emission) and checks the metrics.
func TestKernelArraysToMetrics(t *testing.T) {
	requireRoot(t)
	u64 := &btf.Int{Name: "u64", Size: 8}
	s64 := &btf.Int{Name: "s64", Size: 8, Encoding: btf.Signed}
	value := &btf.Struct{Name: "host_stats", Size: 16, Members: []btf.Member{
		{Name: "calls", Type: u64, Offset: 0}, {Name: "delta", Type: s64, Offset: 64}}}
	for _, tc := range []struct {
		name  string
		flags uint32
	}{{"mmapable", unix.BPF_F_MMAPABLE}, {"plain", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "hstats", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 8, Flags: tc.flags})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			spec := &ebpf.MapSpec{Name: "hstats", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 8, Flags: tc.flags, Value: value}
			in, err := NewHostInstance([]KernelMap{{Object: "x.o", Name: "hstats", Spec: spec, Map: m}}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			put := func(key uint32, calls uint64, delta int64) {
				v := make([]byte, 16)
				put64(v, 0, calls)
				put64(v, 8, uint64(delta))
				if err := m.Update(key, v, ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
			}
			c := NewCollector(CollectorOptions{})
			for round, want := range []map[string]float64{
				{"gpuprobe.map.hstats.calls{gpuprobe.map.key=2}": 7, "gpuprobe.map.hstats.delta{gpuprobe.map.key=5}": -3, "gpuprobe.map.hstats.calls{gpuprobe.map.key=5}": 1},
				{"gpuprobe.map.hstats.calls{gpuprobe.map.key=2}": 9, "gpuprobe.map.hstats.delta{gpuprobe.map.key=5}": 4},
			} {
				if round == 0 {
					put(2, 7, 0)
					put(5, 1, -3)
				} else {
					put(2, 9, 0)
					put(5, 1, 4)
				}
				sm := pmetric.NewMetricSlice()
				c.AppendMetrics(sm, []*Instance{in}, time.Now())
				got := points(sm)
				for k, v := range want {
					if g, ok := got[k]; !ok || g != v {
						t.Errorf("round %d: %s = %v (present %v), want %v", round, k, g, ok, v)
					}
				}
				if _, ok := got["gpuprobe.map.hstats.calls{gpuprobe.map.key=0}"]; ok {
					t.Errorf("round %d: untouched key 0 reported", round)
				}
				if hasPID(sm) {
					t.Errorf("round %d: host array points carry process.pid", round)
				}
			}
			if offers := in.Offers(); len(offers) != 0 {
				t.Errorf("host instance offers %d regions to applications", len(offers))
			}
		})
	}
}

func TestNewHostInstanceErrors(t *testing.T) {
	requireRoot(t)
	h, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rb, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	tests := []struct {
		name string
		km   KernelMap
		want string
	}{
		{"hash", KernelMap{Object: "a.o", Name: "h", Spec: &ebpf.MapSpec{Type: ebpf.Hash}, Map: h},
			`host map "h" of a.o: type Hash is not exported`},
		{"untyped ring", KernelMap{Object: "a.o", Name: "r", Spec: &ebpf.MapSpec{Type: ebpf.RingBuf}, Map: rb},
			`host map "r" of a.o: ring buffer declares no record type`},
		{"no kernel map", KernelMap{Object: "a.o", Name: "n", Spec: &ebpf.MapSpec{Type: ebpf.Array}},
			`host map "n" of a.o: no map spec or no kernel map`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, err := NewHostInstance([]KernelMap{tc.km}, time.Now())
			if err == nil {
				in.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// buildHostObject compiles userprog's hostprog.c test object and its
// target program (see gpuprobe/hostprobe/userprog/testdata).
func buildHostObject(t *testing.T) (obj, targetDir, target string) {
	root := repoRoot(t)
	td := filepath.Join(root, "gpuprobe", "hostprobe", "userprog", "testdata")
	arch := map[string]string{"amd64": "-D__TARGET_ARCH_x86", "arm64": "-D__TARGET_ARCH_arm64"}[runtime.GOARCH]
	if arch == "" {
		t.Fatalf("no pt_regs layout for %s in userprog/testdata/host.h", runtime.GOARCH)
	}
	obj = filepath.Join(t.TempDir(), "hostprog.o")
	cmd := exec.Command("clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", arch,
		"-I", td, "-I", filepath.Join(root, "jit", "include"), "-c", filepath.Join(td, "hostprog.c"), "-o", obj)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang hostprog.c: %v\n%s", err, b)
	}
	targetDir = t.TempDir()
	target = filepath.Join(targetDir, "userprog_target")
	if b, err := exec.Command("gcc", "-O0", "-o", target, filepath.Join(td, "target.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc target.c: %v\n%s", err, b)
	}
	return obj, targetDir, target
}

func monotonic(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// resourcePIDs maps span names to the process.pid of their resource (-1:
// none).
func resourcePIDs(td ptrace.Traces) map[string]int64 {
	out := map[string]int64{}
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		pid := int64(-1)
		if v, ok := rs.Resource().Attributes().Get("process.pid"); ok {
			pid = v.Int()
		}
		ss := rs.ScopeSpans()
		for j := 0; j < ss.Len(); j++ {
			for k := 0; k < ss.At(j).Spans().Len(); k++ {
				out[ss.At(j).Spans().At(k).Name()] = pid
			}
		}
	}
	return out
}

// TestKernelRingsToSpans runs userprog's host programs on a real process
// and exports their kernel maps: ring records become spans and events at
// CLOCK_MONOTONIC + the monotonic offset, under the record's process;
// arrays (one of them mmapable, shared with a GPU program) become metrics.
func TestKernelRingsToSpans(t *testing.T) {
	requireRoot(t)
	obj, dir, target := buildHostObject(t)
	objs, err := ReadObjects([]config.ProgramConfig{{Path: obj}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := userprog.Load(obj, objs[0], userprog.Options{Resolve: userprog.SearchDirs(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var kms []KernelMap
	for _, m := range set.Maps() {
		kms = append(kms, KernelMap(m))
	}
	in, err := NewHostInstance(kms, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	t0 := monotonic(t)
	cmd := exec.Command(target, "5")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	t1 := monotonic(t)
	pid := int64(cmd.ProcessState.Pid())

	const off = uint64(1_700_000_000_000_000_000)
	mapper := clock.New()
	mapper.SetMonoOffset(int64(off))
	c := NewCollector(CollectorOptions{Clock: mapper})
	if n := c.ReadRings(in, time.Now(), 0); n != 10 {
		t.Fatalf("read %d records, want 5 events + 5 spans", n)
	}
	if n := c.ReadRings(in, time.Now(), 0); n != 0 {
		t.Fatalf("second read got %d records from drained rings", n)
	}
	cs := c.Counters()
	if cs.Records != 10 || cs.Invalid != 0 || cs.Unmapped != 0 || cs.SpansBuilt != 6 || cs.EventsBuilt != 5 || cs.ReadErrors != 0 {
		t.Fatalf("counters %+v", cs)
	}
	td := c.TakeTraces()
	if pids := resourcePIDs(td); pids["spans"] != pid || pids["events"] != pid {
		t.Errorf("resource pids %v, want %d from the records", pids, pid)
	}
	var calls int
	for _, s := range spanList(td) {
		switch s.Name() {
		case "spans":
			start, end := uint64(s.StartTimestamp())-off, uint64(s.EndTimestamp())-off
			ret, _ := s.Attributes().Get("ret")
			if start < t0 || end < start || end > t1 {
				t.Errorf("span %d..%d (monotonic) outside %d..%d", start, end, t0, t1)
			}
			if want := int64(calls + 1000 + 7*calls); ret.Int() != want {
				t.Errorf("span %d: ret %d, want %d", calls, ret.Int(), want)
			}
			if _, ok := s.Attributes().Get(AttrClockMapped); ok {
				t.Error("mapped span marked unmapped")
			}
			calls++
		case "events":
			ev := s.Events()
			if ev.Len() != 5 {
				t.Fatalf("%d events, want 5", ev.Len())
			}
			for i := 0; i < ev.Len(); i++ {
				e := ev.At(i)
				ts := uint64(e.Timestamp()) - off
				a, _ := e.Attributes().Get("a")
				b, _ := e.Attributes().Get("b")
				if ts < t0 || ts > t1 || a.Int() != int64(i) || b.Int() != int64(1000+7*i) {
					t.Errorf("event %d: ts %d (window %d..%d) a %d b %d", i, ts, t0, t1, a.Int(), b.Int())
				}
			}
		default:
			t.Errorf("unexpected span %q", s.Name())
		}
	}
	if calls != 5 {
		t.Fatalf("%d call spans, want 5", calls)
	}

	sm := pmetric.NewMetricSlice()
	c.AppendMetrics(sm, []*Instance{in}, time.Now())
	got := points(sm)
	for k, v := range map[string]float64{
		"gpuprobe.map.calls.value{gpuprobe.map.key=0}":    5,
		"gpuprobe.map.calls.value{gpuprobe.map.key=1}":    5,
		"gpuprobe.map.argstat.sum_a{gpuprobe.map.key=0}":  10,
		"gpuprobe.map.argstat.last_b{gpuprobe.map.key=0}": 1028,
		"gpuprobe.map.shared.value{gpuprobe.map.key=0}":   1004, // mmapable: read through the mapping
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if hasPID(sm) || t.Failed() {
		t.Errorf("process.pid on host points %v, or wrong values: %v", hasPID(sm), got)
	}

	// Without a monotonic offset: placed at read time and marked.
	cmd = exec.Command(target, "1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	c2 := NewCollector(CollectorOptions{Clock: clock.New()})
	now := time.Now()
	c2.ReadRings(in, now, 0)
	for _, s := range spanList(c2.TakeTraces()) {
		if s.Name() != "spans" {
			continue
		}
		if v, ok := s.Attributes().Get(AttrClockMapped); !ok || v.Bool() || !s.EndTimestamp().AsTime().Equal(now) {
			t.Errorf("unmapped span: mapped attr %v, end %v (read at %v)", v.AsString(), s.EndTimestamp().AsTime(), now)
		}
	}
	if c2.Counters().Unmapped != 2 {
		t.Errorf("unmapped %d, want 2 (one span, one event)", c2.Counters().Unmapped)
	}
}

// BenchmarkKernelArrayMetrics: one emission of a 1024-key u64 kernel array
// with every key set, read through the mapping (mmapable) or copied with
// one lookup per key (plain).
func BenchmarkKernelArrayMetrics(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipped: creating kernel maps needs root")
	}
	const keys = 1024
	for _, bc := range []struct {
		name  string
		flags uint32
	}{{"mmapable", unix.BPF_F_MMAPABLE}, {"plain", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			spec := &ebpf.MapSpec{Name: "bench", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: keys, Flags: bc.flags}
			m, err := ebpf.NewMap(spec)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			for k := uint32(0); k < keys; k++ {
				if err := m.Update(k, uint64(k+1), ebpf.UpdateAny); err != nil {
					b.Fatal(err)
				}
			}
			in, err := NewHostInstance([]KernelMap{{Object: "x.o", Name: "bench", Spec: spec, Map: m}}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close()
			c := NewCollector(CollectorOptions{MaxMapKeys: keys})
			b.ResetTimer()
			for range b.N {
				c.AppendMetrics(pmetric.NewMetricSlice(), []*Instance{in}, time.Now())
			}
		})
	}
}
