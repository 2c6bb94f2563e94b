package receiver

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/hostprobetest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestHostProbesThroughReceiver runs the receiver with host_probes on and
// the stand-in libraries as its only library path, starts the stand-in
// application after the receiver (a process the watcher never saw), and
// checks the spans: one host call span per API the application called, in
// the application's process, and approximate kernel spans for its launches
// (it runs without the shim) under their launch calls.
func TestHostProbesThroughReceiver(t *testing.T) {
	hostprobetest.RequireRoot(t)
	dir := hostprobetest.Build(t).Dir
	cfg := testConfig(t)
	cfg.HostProbes.Enabled = true
	cfg.HostProbes.LibraryPaths = []string{dir}
	cfg.HostProbes.Ldconfig = false
	cfg.HostProbes.ScanInterval = 0
	cfg.HostProbes.HostCallGrace = 20 * time.Millisecond
	cfg.Limits.LaunchTimeout = 200 * time.Millisecond
	tr, mr, traces, metrics := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())

	r := tr.(*handle).r
	waitFor(t, "both stand-in libraries attached", func() bool { return r.host.stats().libraries == 2 })

	out, err := exec.Command(filepath.Join(dir, "standin_app"), "all").Output()
	if err != nil {
		t.Fatalf("standin_app all: %v", err)
	}
	pid := -1
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid <= 0 {
		t.Fatalf("standin_app printed no pid: %q", out)
	}

	// Every API the host probes know is called once by "all".
	want := map[string]bool{"cudaLaunchKernel": true, "cuLaunchKernel": true, "cudaMemcpy": true, "cuMemAlloc_v2": true,
		"cudaFree": true, "cuCtxSynchronize": true, "cudaStreamSynchronize": true, "cuGraphLaunch": true}
	var got map[string]int
	var approx, approxParented int
	waitFor(t, "host call spans of every category", func() bool {
		got, approx, approxParented = hostSpans(traces.AllTraces(), int64(pid))
		for n := range want {
			if got[n] == 0 {
				return false
			}
		}
		return approx > 0
	})
	// cuLaunchKernel is also called by the runtime stand-in's
	// cudaLaunchKernel, as the real runtime does.
	want["cuLaunchKernel"] = false
	for n, once := range want {
		if once && got[n] != 1 {
			t.Errorf("%s: %d spans, want 1 (all: %v)", n, got[n], got)
		}
	}
	if got["cuLaunchKernel"] < 2 {
		t.Errorf("cuLaunchKernel: %d spans, want the direct call and the runtime's", got["cuLaunchKernel"])
	}
	if approxParented != approx {
		t.Errorf("%d of %d approximate kernel spans have a host launch call as parent", approxParented, approx)
	}
	waitFor(t, "host self-metrics", func() bool {
		return selfValue(metrics, "gpuprobe.receiver.host_calls.read") > 0 &&
			selfValue(metrics, "gpuprobe.receiver.host_probes.libraries") == 2
	})
	if d := selfValue(metrics, "gpuprobe.receiver.host_calls.dropped"); d != 0 {
		t.Errorf("host_calls.dropped = %d", d)
	}
}

// hostSpans counts the host call spans of pid by name, its approximate
// kernel spans, and those whose parent is a host launch call.
func hostSpans(all []ptrace.Traces, pid int64) (names map[string]int, approx, parented int) {
	names = map[string]int{}
	launchCalls := map[[8]byte]bool{}
	var approxParents [][8]byte
	for _, td := range all {
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			if v, ok := rs.Resource().Attributes().Get("process.pid"); !ok || v.Int() != pid {
				continue
			}
			for j := range rs.ScopeSpans().Len() {
				ss := rs.ScopeSpans().At(j).Spans()
				for k := range ss.Len() {
					s := ss.At(k)
					if c, ok := s.Attributes().Get("cuda.api.category"); ok {
						names[s.Name()]++
						if c.Str() == "launch" {
							launchCalls[s.SpanID()] = true
						}
					}
					if v, ok := s.Attributes().Get("cuda.kernel.approximate"); ok && v.Bool() {
						approx++
						approxParents = append(approxParents, s.ParentSpanID())
					}
				}
			}
		}
	}
	for _, p := range approxParents {
		if launchCalls[p] {
			parented++
		}
	}
	return names, approx, parented
}

// selfValue is the latest value of a self-metric (a sum) in the sink.
func selfValue(sink *consumertest.MetricsSink, name string) int64 {
	all := sink.AllMetrics()
	for i := len(all) - 1; i >= 0; i-- {
		rms := all[i].ResourceMetrics()
		for a := range rms.Len() {
			sms := rms.At(a).ScopeMetrics()
			for b := range sms.Len() {
				ms := sms.At(b).Metrics()
				for c := range ms.Len() {
					m := ms.At(c)
					if m.Name() == name && m.Type() == pmetric.MetricTypeSum && m.Sum().DataPoints().Len() > 0 {
						return m.Sum().DataPoints().At(0).IntValue()
					}
				}
			}
		}
	}
	return -1
}

// waitProgress polls cond until it holds, failing only when the progress
// value it reports has not changed for 10 s (work that scales with the
// machine's load gets the time it needs; a stall still fails).
func waitProgress(t *testing.T, what string, cond func() (progress int64, done bool)) {
	t.Helper()
	last, _ := cond()
	deadline := time.Now().Add(10 * time.Second)
	stalled := false
	pollUntil(24*time.Hour, func() bool {
		p, done := cond()
		if done {
			return true
		}
		if p != last {
			last, deadline = p, time.Now().Add(10*time.Second)
		}
		stalled = time.Now().After(deadline)
		return stalled
	})
	if stalled {
		t.Fatalf("timed out waiting for %s: no progress for 10 s (at %d)", what, last)
	}
}

// waitEmissions waits until sink has received n more metric batches.
func waitEmissions(t *testing.T, sink *consumertest.MetricsSink, n int) {
	t.Helper()
	from := len(sink.AllMetrics())
	waitFor(t, "further metric emissions", func() bool { return len(sink.AllMetrics()) >= from+n })
}

// waitFor polls cond for up to 30 s: attaching the host probes to the two
// stand-in libraries takes 3-4 s on an idle 2-core machine and passed 10 s
// there under load, and a bound only delays a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !pollUntil(30*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// pollUntil polls cond every 10 ms until it holds (true) or limit has
// passed (false): the one polling loop of the package's tests.
func pollUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
