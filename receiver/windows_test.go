package receiver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadatatest"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestDriverWindowsEndToEnd: window records written into a client's
// launch ring give an unpatched kernel its executing phase; each change of
// the client's windows state is logged once at info and counted in the
// collector's telemetry, as are the windows the shim lost.
func TestDriverWindowsEndToEnd(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	set := metadatatest.NewSettings(tt)
	core, logs := observer.New(zap.InfoLevel)
	set.Logger = zap.New(core)
	traces := new(consumertest.TracesSink)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	pid := uint32(os.Getpid())
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: pid, Name: "windows"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ring, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	now := monoNow(t)
	for _, r := range []interface {
		Append([]byte) []byte
	}{
		&record.WindowState{TimeNS: now, State: record.WindowsOn},
		&record.KernelName{Function: 1, PID: pid, Name: "_Z4sgemv"},
		&record.Launch{LaunchID: 1, PID: pid, EnqueueNS: now, ReturnNS: now + 100, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed},
		&record.Window{LaunchID: 1, StartNS: now + 500, EndNS: now + 1500, NameHash: record.NameHash("_Z4sgemv")},
		&record.Window{LaunchID: 999, StartNS: now + 500, EndNS: now + 1500},
		&record.WindowState{TimeNS: now + 2000, State: record.WindowsOn, Dropped: 2},
		&record.WindowState{TimeNS: now + 3000, State: record.WindowsSteppedAside, Reason: record.WindowsReasonProfiler},
	} {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatal(res)
		}
	}
	var exec []int64
	waitFor(t, "a cuda.executing span", func() bool {
		exec = exec[:0]
		for _, td := range traces.AllTraces() {
			ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
			for i := range ss.Len() {
				if s := ss.At(i); s.Name() == "cuda.executing" {
					exec = append(exec, int64(s.EndTimestamp()-s.StartTimestamp()))
				}
			}
		}
		return len(exec) > 0
	})
	if len(exec) != 1 || exec[0] != 1000 {
		t.Fatalf("cuda.executing durations %v, want [1000]", exec)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for msg, n := range map[string]int{"device windows on": 1, "device windows stepped aside": 1} {
		entries := logs.FilterMessageSnippet(msg).All()
		if len(entries) != n {
			t.Errorf("%q logged %d times, want %d", msg, len(entries), n)
			continue
		}
		if got := entries[0].ContextMap()["pid"]; got != pid {
			t.Errorf("%q: pid %v, want %d", msg, got, pid)
		}
	}
	metadatatest.AssertEqualGpuprobeReceiverWindowsStateChanges(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("gpuprobe.windows.state", "on"), attribute.String("gpuprobe.windows.reason", "none"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("gpuprobe.windows.state", "stepped_aside"), attribute.String("gpuprobe.windows.reason", "profiler"))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualGpuprobeReceiverWindowsDropped(t, tt, []metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
}

// TestStateLogBound: info-level state reports come in a burst, then one
// a second.
func TestStateLogBound(t *testing.T) {
	var s stateLog
	t0 := time.Unix(1000, 0)
	for i := range stateLogBurst {
		if !s.allow(t0) {
			t.Fatalf("report %d refused within the burst", i)
		}
	}
	for _, step := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {500 * time.Millisecond, false}, {time.Second, true}, {time.Second, false}, {3 * time.Second, true}, {3 * time.Second, true}, {3 * time.Second, false}} {
		if got := s.allow(t0.Add(step.at)); got != step.want {
			t.Fatalf("at %v: allowed %v, want %v", step.at, got, step.want)
		}
	}
}

func TestWindowWait(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{{0, -1}, {time.Second, time.Second}} {
		if got := windowWait(tc.in); got != tc.want {
			t.Errorf("windowWait(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestGPUTimeOptions: gpu_time's keys reach the attribution.
func TestGPUTimeOptions(t *testing.T) {
	for _, tc := range []struct {
		c    config.GPUTimeConfig
		want gputime.Options
	}{
		{config.GPUTimeConfig{Lag: 3 * time.Second, Mode: config.GPUTimeTimeSlicing}, gputime.Options{Lag: 3 * time.Second, Mode: gputime.TimeSlicing}},
		{config.GPUTimeConfig{Lag: time.Second, Mode: config.GPUTimeConcurrent}, gputime.Options{Lag: time.Second, Mode: gputime.Concurrent}},
	} {
		if got := gpuTimeOptions(tc.c); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.c, got, tc.want)
		}
	}
	if m := config.Default().GPUTime.Mode; m != gputime.TimeSlicing.String() {
		t.Errorf("default mode %q, want %q", m, gputime.TimeSlicing)
	}
}

// TestWindowsStampedAtRead: a window that ended while the pass was busy
// (here: a read hook that takes 200 ms before the client's read) has not
// ended in the future; none of its time is cut from gpu.cuda.process.time.
func TestWindowsStampedAtRead(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	var (
		ring  *shm.Ring
		armed = make(chan struct{})
		done  = make(chan error, 1)
	)
	var once sync.Once
	testHookShardRead = func(*source) {
		select {
		case <-armed:
		default:
			return
		}
		once.Do(func() { produceLate(t, ring, done) })
	}
	defer func() { testHookShardRead = func(*source) {} }()
	tr, mr, _, metrics := startBoth(t, cfg)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()); _ = mr.Shutdown(context.Background()) })
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "stamped"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if ring, err = shm.NewRing(sess.Region(agentwire.RoleLaunchRing, "")); err != nil {
		t.Fatal(err)
	}
	b := (&record.WindowState{TimeNS: monoNow(t), State: record.WindowsOn}).Append(nil)
	if res := ring.Produce(uint32(record.TypeWindowState), b); res != shm.Published {
		t.Fatal(res)
	}
	waitFor(t, "the client's first read", func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= 1 })
	close(armed)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pass read the client")
	}
	waitFor(t, "the window read", func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= 2 })
	shutdownWithin(t, shutdownBound+time.Second, tr, mr)
	if cut := selfValue(metrics, "gpuprobe.receiver.gpu_time.cut"); cut != 0 {
		t.Errorf("gpu_time.cut %d ns, want 0: the window was stamped when its pass began", cut)
	}
}

// produceLate waits 200 ms, then publishes a window into ring that ended
// at once, and says on done whether it was published.
func produceLate(t *testing.T, ring *shm.Ring, done chan<- error) {
	time.Sleep(200 * time.Millisecond)
	end := monoNow(t)
	b := (&record.Window{LaunchID: 7, StartNS: end - 1_000_000, EndNS: end}).Append(nil)
	if res := ring.Produce(uint32(record.TypeWindow), b); res != shm.Published {
		done <- fmt.Errorf("produce: %v", res)
		return
	}
	done <- nil
}
