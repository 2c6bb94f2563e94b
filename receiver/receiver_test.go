package receiver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

func testConfig(t *testing.T) *Config {
	c := createDefaultConfig().(*Config)
	c.Agent.Socket = filepath.Join(t.TempDir(), "agent.sock")
	c.PollInterval = time.Millisecond
	c.MetricsInterval = 20 * time.Millisecond
	c.ShutdownTimeout = shutdownBound
	// The tests read the self-metrics from the pipeline (selftel_test.go
	// checks the default, internal telemetry only).
	c.Telemetry.InPipeline = true
	// The tests count a trace per launch, copy and sync: no head bound
	// (tracepolicy_test.go tests the default policy).
	noTraceLimit(&c.Sampling)
	return c
}

// noTraceLimit lifts the trace policy's head bounds.
func noTraceLimit(s *config.SamplingConfig) {
	s.TracesPerSecondPerKernel, s.TracesPerSecondPerProcess, s.TracesPerSecondPerNode = 0, 0, 0
}

func TestSharedInstanceLifecycle(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	set := receivertest.NewNopSettings(f.Type())
	tr, err := f.CreateTraces(context.Background(), set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if tr.(*handle).r != mr.(*handle).r {
		t.Fatal("traces and metrics got different receivers")
	}
	host := componenttest.NewNopHost()
	steps := []struct {
		name string
		do   func() error
		run  bool // receiver running after the step
	}{
		{"start traces", func() error { return tr.Start(context.Background(), host) }, true},
		{"start traces again", func() error { return tr.Start(context.Background(), host) }, true},
		{"start metrics", func() error { return mr.Start(context.Background(), host) }, true},
		{"shutdown traces", func() error { return tr.Shutdown(context.Background()) }, true},
		{"shutdown traces again", func() error { return tr.Shutdown(context.Background()) }, true},
		{"shutdown metrics", func() error { return mr.Shutdown(context.Background()) }, false},
		{"shutdown metrics again", func() error { return mr.Shutdown(context.Background()) }, false},
	}
	r := tr.(*handle).r
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if running := r.run.cancel != nil; running != s.run {
			t.Fatalf("after %s: running=%v, want %v", s.name, running, s.run)
		}
	}
	if n := instances.Len(); n != 0 {
		t.Fatalf("%d instances left in the shared map", n)
	}
}

func TestShutdownWithoutStart(t *testing.T) {
	f := NewFactory()
	r, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), testConfig(t), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if instances.Len() != 0 {
		t.Fatal("instance left behind")
	}
}

func TestInvalidConfigRejected(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Sampling.OneIn = 0
	_, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, consumertest.NewNop())
	if err == nil || !strings.Contains(err.Error(), "sampling::one_in") {
		t.Fatalf("err = %v", err)
	}
}

// startBoth creates the traces and the metrics receiver of cfg (one shared
// instance), with sinks, and starts both; the caller shuts them down.
func startBoth(t testing.TB, cfg *Config) (tr, mr component.Component, traces *consumertest.TracesSink, metrics *consumertest.MetricsSink) {
	t.Helper()
	return startBothWith(t, receivertest.NewNopSettings(NewFactory().Type()), cfg)
}

// startBothWith is startBoth with the receivers' settings (a logger or
// telemetry of the test's own).
func startBothWith(t testing.TB, set receiver.Settings, cfg *Config) (tr, mr component.Component, traces *consumertest.TracesSink, metrics *consumertest.MetricsSink) {
	t.Helper()
	f := NewFactory()
	traces, metrics = new(consumertest.TracesSink), new(consumertest.MetricsSink)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	if err != nil {
		t.Fatal(err)
	}
	mr, err = f.CreateMetrics(context.Background(), set, cfg, metrics)
	if err != nil {
		t.Fatal(err)
	}
	host := componenttest.NewNopHost()
	if err := tr.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	if err := mr.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	return tr, mr, traces, metrics
}

func monoNow(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// TestRingToPdata drives the receiver through a real shm ring written by a
// Go producer in the documented layout and checks spans and metrics.
func TestRingToPdata(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.MaxKernelNames = 2
	tr, mr, traces, metrics := startBoth(t, cfg)
	ring, err := shm.CreateRing(cfg.Buffers.SlotSize, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	tr.(*handle).r.AddRing(ring)

	now := monoNow(t)
	produce := func(r interface{ Append([]byte) []byte }) {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
	names := []string{"_Z4gemmPfS_S_", "_Z6reducePfi", "_Z7softmaxPf"}
	for i, n := range names {
		produce(&record.KernelName{Function: uint64(i + 1), PID: uint32(os.Getpid()), Name: n})
	}
	for id := range uint64(6) {
		fn := id%3 + 1
		enq := now + id*10_000
		produce(&record.Launch{LaunchID: id + 1, PID: uint32(os.Getpid()), TID: 1, EnqueueNS: enq, ReturnNS: enq + 2000,
			Function: fn, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}})
		produce(&record.Completion{LaunchID: id + 1, CompleteNS: enq + 9000})
	}
	produce(&record.Memcpy{Bytes: 4096, StartNS: now, EndNS: now + 1000, Kind: record.MemcpyHostToDevice, PID: uint32(os.Getpid())})

	waitFor(t, "every span", func() bool { return traces.SpanCount() >= 6*3+1 })
	// Metrics are emitted every 20 ms; wait for one that has the launches.
	var launches map[string]int64
	waitFor(t, "an emission with gemm's launches", func() bool {
		launches = launchCounts(metrics.AllMetrics())
		return launches["gemm"] >= 2
	})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := mr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	if got := traces.SpanCount(); got != 6*3+1 {
		t.Fatalf("%d spans, want %d (6 launches × launch+call+completion, 1 memcpy)", got, 6*3+1)
	}
	counts := map[string]int{}
	for _, td := range traces.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			if v, _ := rs.Resource().Attributes().Get("process.pid"); v.Int() != int64(os.Getpid()) {
				t.Errorf("resource pid %d", v.Int())
			}
			ss := rs.ScopeSpans().At(0).Spans()
			for j := range ss.Len() {
				counts[ss.At(j).Name()]++
			}
		}
	}
	wantSpans := map[string]int{"gemm": 2, "reduce": 2, "softmax": 2,
		"cuda.launch_call": 6, "cuda.completion": 6, "cuda.memcpy": 1}
	for n, c := range wantSpans {
		if counts[n] != c {
			t.Errorf("%d %q spans, want %d (all: %v)", counts[n], n, c, counts)
		}
	}
	wantLaunches := map[string]int64{"gemm": 2, "reduce": 2, "other": 2}
	for k, v := range wantLaunches {
		if launches[k] != v {
			t.Errorf("launches{%s} = %d, want %d (all %v)", k, launches[k], v, launches)
		}
	}
}

// launchCounts returns the latest gpu.cuda.kernel.launches values by kernel.
func launchCounts(all []pmetric.Metrics) map[string]int64 {
	out := map[string]int64{}
	for _, md := range all {
		cur := map[string]int64{} // this emission's, of every process
		for r := range md.ResourceMetrics().Len() {
			sm := md.ResourceMetrics().At(r).ScopeMetrics().At(0).Metrics()
			for i := range sm.Len() {
				m := sm.At(i)
				if m.Name() != "gpu.cuda.kernel.launches" {
					continue
				}
				for j := range m.Sum().DataPoints().Len() {
					dp := m.Sum().DataPoints().At(j)
					v, _ := dp.Attributes().Get("cuda.kernel.name")
					cur[v.Str()] += dp.IntValue()
				}
			}
		}
		for k, v := range cur {
			out[k] = v
		}
	}
	return out
}

func TestSelfMetricsWithoutProducers(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	metrics := new(consumertest.MetricsSink)
	mr, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, metrics)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a first metrics emission", func() bool { return len(metrics.AllMetrics()) > 0 })
	if err := mr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(metrics.AllMetrics()) == 0 {
		t.Fatal("no metrics without producers")
	}
	names := map[string]bool{}
	sm := metrics.AllMetrics()[0].ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range sm.Len() {
		names[sm.At(i).Name()] = true
	}
	for _, n := range []string{"gpuprobe.receiver.records.read", "gpuprobe.receiver.records.dropped", "gpuprobe.receiver.patch.failures"} {
		if !names[n] {
			t.Errorf("self-metric %s missing (have %v)", n, names)
		}
	}
}

func TestDetectDriver(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	ver := filepath.Join(dir, "version")
	if err := os.WriteFile(lib, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ver, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05\nGCC version\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "version-huge") // read to maxDriverVersion only
	if err := os.WriteFile(huge, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05\n"+strings.Repeat("x", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	old := procDriverVersion
	defer func() { procDriverVersion = old }()
	tests := []struct {
		name    string
		proc    string
		paths   []string
		found   bool
		missing string
	}{
		{"driver and lib", ver, []string{dir}, true, ""},
		{"lib as file path", ver, []string{lib}, true, ""},
		{"proc file over its bound", huge, []string{dir}, true, ""},
		{"no proc file", filepath.Join(dir, "absent"), []string{dir}, false, "absent is absent"},
		{"no lib", ver, []string{t.TempDir()}, false, "libcuda.so.1 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procDriverVersion = tt.proc
			t.Setenv("LD_LIBRARY_PATH", "")
			defaultDirs := defaultLibDirs
			defaultLibDirs = nil
			defer func() { defaultLibDirs = defaultDirs }()
			st := detectDriver(tt.paths)
			if st.found != tt.found {
				t.Fatalf("found=%v, want %v (%+v)", st.found, tt.found, st)
			}
			if tt.found && !strings.Contains(st.version, "580.95.05") {
				t.Fatalf("version %q", st.version)
			}
			if !strings.Contains(strings.Join(st.missing, "; "), tt.missing) {
				t.Fatalf("missing %q, want %q", st.missing, tt.missing)
			}
		})
	}
}

func TestNoDriverLoggedOnce(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	driverLogOnce = sync.Once{}
	st := driverStatus{missing: []string{"/proc/driver/nvidia/version is absent"}}
	cfg := config.Default()
	for range 3 {
		logDriverOnce(zap.New(core), st, cfg)
	}
	entries := logs.FilterMessageSnippet("no NVIDIA driver found").All()
	if len(entries) != 1 {
		t.Fatalf("%d log entries, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	if idle, _ := fields["probes_idle"].([]any); len(idle) == 0 || !strings.Contains(idle[0].(string), "kernel_phases") {
		t.Fatalf("probes_idle = %v", fields["probes_idle"])
	}
}
