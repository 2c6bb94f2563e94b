package receiver

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// counterRig is the real sampler, its stand-in CUPTI and driver
// (counters/testdata) and the gpuprobe command, built into a directory
// any uid can read (the untrusted run is uid 65534's).
type counterRig struct{ dir, gpuprobe, sampler string }

func buildCounterRig(t *testing.T) counterRig {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the sampler is C")
	}
	dir, err := os.MkdirTemp("", "gpuprobe-counters-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rig := counterRig{dir: dir, gpuprobe: filepath.Join(dir, "gpuprobe"), sampler: filepath.Join(dir, "gpuprobe-counters")}
	srcs, _ := filepath.Glob("../counters/src/*.c")
	mock := "../counters/testdata/mock_cupti.c"
	lib := []string{"-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"}
	for _, c := range [][]string{
		append(append([]string{"gcc", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", rig.sampler}, srcs...), "-ldl"),
		append(append([]string{"gcc"}, lib...), "-o", filepath.Join(dir, "libcupti.so"), mock),
		append(append([]string{"gcc"}, lib...), "-DMOCK_CUDA", "-o", filepath.Join(dir, "libcuda.so.1"), mock),
		{"go", "build", "-o", rig.gpuprobe, "../cmd/gpuprobe"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	return rig
}

// run runs `gpuprobe counters` against socket with the sampler's args,
// its output also written to tee; uid ≥ 0 runs it as that user.
func (rig counterRig) run(t *testing.T, socket, tee string, uid int, args ...string) string {
	t.Helper()
	wrap := filepath.Join(rig.dir, "tee-sampler.sh")
	script := "#!/bin/sh\n\"" + rig.sampler + "\" \"$@\" | tee \"$GPUPROBE_TEST_TEE\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rig.gpuprobe, append([]string{"counters", "--socket", socket, "--sampler", wrap, "--"}, args...)...)
	cmd.Env = append(os.Environ(), "GPUPROBE_CUPTI="+filepath.Join(rig.dir, "libcupti.so"),
		"GPUPROBE_LIBCUDA="+filepath.Join(rig.dir, "libcuda.so.1"), "GPUPROBE_TEST_TEE="+tee)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpuprobe counters: %v\n%s", err, out)
	}
	return string(out)
}

// teeSample is a sample line of the sampler, on CLOCK_MONOTONIC.
type teeSample struct {
	start, end uint64
	v          []float64
}

// readTee maps the sampler's own output onto CLOCK_MONOTONIC with its
// header's clock reading, as the test's own reading of the format.
func readTee(t *testing.T, path string) (metrics []string, samples []teeSample) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Type       string
			Metrics    []string
			Clock      struct{ Monotonic_ns, Cupti_ns int64 }
			Start, End int64
			V          []float64
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		switch l.Type {
		case "meta":
			metrics, off = l.Metrics, l.Clock.Monotonic_ns-l.Clock.Cupti_ns
		case "sample":
			samples = append(samples, teeSample{uint64(l.Start + off), uint64(l.End + off), l.V})
		}
	}
	return metrics, samples
}

// kernelCounter returns the last point of metric name for kernel and
// counter on process pid's resource, and whether there was one.
func kernelCounter(sink *consumertest.MetricsSink, pid int64, name, kernel, counter string) (float64, bool) {
	all := sink.AllMetrics()
	for i := len(all) - 1; i >= 0; i-- {
		rms := all[i].ResourceMetrics()
		for a := range rms.Len() {
			if p, _ := rms.At(a).Resource().Attributes().Get("process.pid"); p.Int() != pid {
				continue
			}
			sms := rms.At(a).ScopeMetrics()
			for b := range sms.Len() {
				ms := sms.At(b).Metrics()
				for c := range ms.Len() {
					if m := ms.At(c); m.Name() == name && m.Type() == pmetric.MetricTypeSum {
						dps := m.Sum().DataPoints()
						for d := range dps.Len() {
							at := dps.At(d).Attributes()
							k, _ := at.Get("cuda.kernel.name")
							n, _ := at.Get("cuda.counter.name")
							if k.Str() == kernel && n.Str() == counter {
								return dps.At(d).DoubleValue(), true
							}
						}
					}
				}
			}
		}
	}
	return 0, false
}

// TestCountersEndToEnd: the real sampler (against the stand-in CUPTI)
// through `gpuprobe counters` into the receiver. Run as uid 65534, not
// trusted, its records are refused and counted; run as root, its samples
// are joined to a process's window on the same GPU (by UUID, ordinal 2
// there), and the kernel's mean of a counter is the one the test
// computes from the sampler's own lines.
func TestCountersEndToEnd(t *testing.T) {
	rig := buildCounterRig(t)
	cfg := testConfig(t)
	cfg.Agent.Socket = filepath.Join(rig.dir, "agent.sock")
	cfg.Agent.AllowedUIDs = []uint32{0, 65534}
	if euid := uint32(os.Geteuid()); euid != 0 {
		// Not root: the test's own uid runs the trusted sampler.
		cfg.Agent.AllowedUIDs = append(cfg.Agent.AllowedUIDs, euid)
		cfg.Counters.TrustedUIDs = []uint32{euid}
	}
	cfg.Probes.KernelPhases = false
	cfg.Counters.Enabled = true
	cfg.GPUTime.Lag = 2 * time.Second
	tr, mr, _, sink := startBoth(t, cfg)
	defer tr.Shutdown(context.Background())
	defer mr.Shutdown(context.Background())

	if os.Geteuid() == 0 {
		// The socket is 0660: its group lets the untrusted uid connect.
		if err := os.Chown(cfg.Agent.Socket, 0, 65534); err != nil {
			t.Fatal(err)
		}
		rig.run(t, cfg.Agent.Socket, os.DevNull, 65534, "-t", "0.1", "-i", "1000000")
		waitFor(t, "the untrusted sampler's records refused", func() bool {
			return selfValue(sink, "gpuprobe.receiver.counters.refused") >= 2
		})
	} else {
		t.Log("not root: the untrusted run (uid 65534) is left out; TestCountersJoin covers the refusal")
	}

	pid := uint32(os.Getpid())
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: pid, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ring, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	tee := filepath.Join(rig.dir, "trusted.jsonl")
	out := rig.run(t, cfg.Agent.Socket, tee, -1, "-t", "0.4", "-i", "1000000", "--decode-ms", "5")
	metrics, samples := readTee(t, tee)
	if len(samples) < 300 || !strings.Contains(out, "0 dropped (ring full), 0 bad lines") {
		t.Fatalf("%d samples; gpuprobe counters said %s", len(samples), out)
	}
	// A window from a third into sample 100 to two thirds into sample 250.
	a := samples[100].start + (samples[100].end-samples[100].start)/3
	b := samples[250].start + 2*(samples[250].end-samples[250].start)/3
	var uuid [16]byte
	for i := range uuid {
		uuid[i] = byte(0x10 + i)
	}
	for _, r := range []interface{ Append([]byte) []byte }{
		&record.Device{Device: 2, PID: pid, UUID: uuid, SMCount: 132, Name: "mock"},
		&record.KernelName{Function: 1, PID: pid, Name: "sgemm_kernel"},
		&record.Launch{LaunchID: 1, PID: pid, EnqueueNS: a - 1000, ReturnNS: a - 500, Function: 1, Device: 2,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed},
		&record.Window{LaunchID: 1, StartNS: a, EndNS: b, Device: 2, NameHash: record.NameHash("sgemm_kernel")},
	} {
		buf := r.Append(nil)
		p, _ := record.ParsePrefix(buf)
		if res := ring.Produce(uint32(p.Type), buf); res != shm.Published {
			t.Fatal(res)
		}
	}
	var sum, weight float64
	for _, s := range samples {
		if d := float64(min(s.end, b)) - float64(max(s.start, a)); d > 0 {
			sum, weight = sum+s.v[3]*d, weight+d
		}
	}
	want := sum / weight
	var got, secs float64
	// Each emission settles a little more of the window: wait for all of it.
	waitFor(t, "the kernel's counters over its whole window", func() bool {
		w, ok1 := kernelCounter(sink, int64(pid), "gpu.cuda.kernel.counter.weighted", "sgemm_kernel", metrics[3])
		s, ok2 := kernelCounter(sink, int64(pid), "gpu.cuda.kernel.counter.time", "sgemm_kernel", metrics[3])
		got, secs = w/s, s
		return ok1 && ok2 && math.Abs(s-float64(b-a)/1e9) < 1e-9
	})
	if math.Abs(got-want) > 1e-9*want || math.Abs(secs-float64(b-a)/1e9) > 1e-9 {
		t.Errorf("%s over the window: mean %v over %v s, want %v over %v s", metrics[3], got, secs, want, float64(b-a)/1e9)
	}
	if n := selfValue(sink, "gpuprobe.receiver.counters.dropped"); n != 0 {
		t.Errorf("%d samples dropped, want 0", n)
	}
}
