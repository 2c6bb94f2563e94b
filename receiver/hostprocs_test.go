package receiver

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/hostprobetest"
)

// waitingApp is a stand-in app that mapped its libraries and waits on
// stdin before it calls every entry point once.
type waitingApp struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	pid int
}

func startApp(t *testing.T, app string, env ...string) *waitingApp {
	t.Helper()
	cmd := exec.Command(app, "wait")
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("%s wait: %q, %v", app, l, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &waitingApp{cmd: cmd, in: in, pid: cmd.Process.Pid}
}

// run lets the app make its calls and waits for its end.
func (a *waitingApp) run(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(a.in, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("pid %d: %v", a.pid, err)
	}
}

// skipConfig is the test configuration with host probes on the
// stand-in libraries, shim_processes skip and a 100 ms /proc scan.
func skipConfig(t *testing.T, s hostprobetest.Standins) *Config {
	cfg := testConfig(t)
	cfg.HostProbes.Enabled = true
	cfg.HostProbes.LibraryPaths = []string{s.Dir}
	cfg.HostProbes.Ldconfig = false
	cfg.HostProbes.ScanInterval = 100 * time.Millisecond
	cfg.HostProbes.ShimProcesses = config.ShimProcessesSkip
	return cfg
}

// TestShimProcessesSkip runs the receiver with host_probes::shim_processes
// skip and four stand-in apps: A has a shim session from the start, B and
// C none, C gets one once it was probed, and D is found while
// max_processes (2) are probed and gets its probes once C's went. The
// shim-covered entry points trap only where they should (read from the
// processes' memory), the spans say the same, and the per-process probes
// of exited processes are closed.
func TestShimProcessesSkip(t *testing.T) {
	hostprobetest.RequireRoot(t)
	s := hostprobetest.Build(t)
	cfg := skipConfig(t, s)
	cfg.HostProbes.MaxProcesses = 2
	cfg.HostProbes.HostCallGrace = 20 * time.Millisecond
	cfg.Limits.LaunchTimeout = 200 * time.Millisecond
	tr, mr, traces, metrics := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r
	if r.host.probes == nil || r.host.procs == nil {
		t.Fatalf("host probes %v, per-process probes %v: want both (run as root)", r.host.probes != nil, r.host.procs != nil)
	}
	waitFor(t, "both stand-in libraries attached", func() bool { return r.host.stats().libraries == 2 })

	a, b, c := startApp(t, s.App), startApp(t, s.App), startApp(t, s.App)
	r.host.shimConnected(int32(a.pid)) // as onConnect does for a shim's session
	probed := func(pids ...int) func() bool {
		return func() bool {
			got := r.host.probes.Processes()
			slices.Sort(got)
			slices.Sort(pids)
			return slices.Equal(got, pids)
		}
	}
	waitFor(t, "B and C probed, A not", probed(b.pid, c.pid))
	trapped := func(p *waitingApp, file, sym string) bool {
		return hostprobetest.Trapped(t, p.pid, file, sym)
	}
	// The probe set names B and C before their breakpoints are in, and a
	// scan that ran before A's session may have probed A, to be detached:
	// wait for the breakpoints to settle, then check them.
	onlyBC := func(sym string) bool {
		return !trapped(a, s.Libcudart, sym) && trapped(b, s.Libcudart, sym) && trapped(c, s.Libcudart, sym)
	}
	pollUntil(10*time.Second, func() bool { return onlyBC("cudaLaunchKernel") && onlyBC("cudaDeviceSynchronize") })
	for _, sym := range []string{"cudaLaunchKernel", "cudaDeviceSynchronize"} {
		if !onlyBC(sym) {
			t.Errorf("%s: breakpoint in A %v, B %v, C %v; want only in B and C", sym,
				trapped(a, s.Libcudart, sym), trapped(b, s.Libcudart, sym), trapped(c, s.Libcudart, sym))
		}
	}
	if !trapped(a, s.Libcudart, "cudaMalloc") {
		t.Error("cudaMalloc: no breakpoint in A: the entry points the shim does not record are probed everywhere")
	}

	d := startApp(t, s.App)
	waitFor(t, "D counted over max_processes", func() bool { return r.host.stats().procsCapped == 1 })
	if trapped(d, s.Libcuda, "cuLaunchKernel") {
		t.Error("D probed beyond max_processes")
	}
	r.host.shimConnected(int32(c.pid))
	waitFor(t, "C's probes removed, D's attached", probed(b.pid, d.pid))
	// The kernel takes a closed link's breakpoints out after the close
	// returns (its unregistration is deferred; slower under load): wait
	// for them to settle, then check.
	onlyD := func() bool {
		return !trapped(c, s.Libcuda, "cuLaunchKernel") && trapped(d, s.Libcuda, "cuLaunchKernel")
	}
	pollUntil(10*time.Second, onlyD)
	if !onlyD() {
		t.Errorf("cuLaunchKernel: breakpoint in C %v, D %v; want D only", trapped(c, s.Libcuda, "cuLaunchKernel"), trapped(d, s.Libcuda, "cuLaunchKernel"))
	}

	for _, p := range []*waitingApp{a, b, c, d} {
		p.run(t)
	}
	covered := []string{"cudaLaunchKernel", "cuLaunchKernel", "cudaDeviceSynchronize", "cuCtxSynchronize", "cuGraphLaunch", "cuMemcpyHtoD_v2"}
	others := []string{"cudaMalloc", "cuMemAlloc_v2", "cudaMemcpy", "cuEventRecord", "cuMemcpyDtoDAsync_v2", "cuStreamDestroy_v2"}
	waitFor(t, "every process's spans", func() bool {
		for _, p := range []*waitingApp{a, b, c, d} {
			names, _, _ := hostSpans(traces.AllTraces(), int64(p.pid))
			want := others
			if p == b || p == d {
				want = append(slices.Clone(covered), others...)
			}
			for _, n := range want {
				if names[n] == 0 {
					return false
				}
			}
		}
		return true
	})
	waitPolls(t, r, cfg.Limits.LaunchTimeout+5*cfg.HostProbes.HostCallGrace) // anything late
	for _, p := range []*waitingApp{a, c} {
		names, _, _ := hostSpans(traces.AllTraces(), int64(p.pid))
		for _, n := range covered {
			if names[n] != 0 {
				t.Errorf("pid %d (with the shim): %d %s spans, want none", p.pid, names[n], n)
			}
		}
	}
	for _, p := range []*waitingApp{b, d} {
		if _, approx, _ := hostSpans(traces.AllTraces(), int64(p.pid)); approx == 0 {
			t.Errorf("pid %d (without the shim): no approximate kernel span", p.pid)
		}
	}
	waitFor(t, "the exited processes' probes closed", probed())
	waitFor(t, "self-metrics", func() bool {
		// B, C and D (and A, if a scan found it before its session).
		return selfValue(metrics, "gpuprobe.receiver.host_probes.processes") >= 3 &&
			selfValue(metrics, "gpuprobe.receiver.host_probes.processes_unprobed") == 1
	})

	// The agent tells of sessions: the test process connects as a shim.
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "shim"})
	if err != nil {
		t.Fatal(err)
	}
	sessions := func() int {
		r.host.procs.mu.Lock()
		defer r.host.procs.mu.Unlock()
		return r.host.procs.sessions[os.Getpid()]
	}
	if n := sessions(); n != 1 {
		t.Errorf("%d sessions of the test process after its connect, want 1", n)
	}
	sess.Close()
	waitFor(t, "the session's end", func() bool { return sessions() == 0 })
}

// fakeShim is a copy of the C math library named libgpuprobe.so, for a
// stand-in app to preload: a process that maps the shim's file name.
func fakeShim(t *testing.T) string {
	t.Helper()
	for _, m := range []string{"/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6", "/lib64/libm.so.6", "/usr/lib64/libm.so.6"} {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		p := filepath.Join(t.TempDir(), "libgpuprobe.so")
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Fatal("no libm.so.6 to stand in for the shim")
	return ""
}

// TestShimMappedWaits: a process that maps the shim but has no session
// yet is not probed while it may still connect (its first CUDA call);
// one that connects in time never is, one that does not is probed once
// the wait is over.
func TestShimMappedWaits(t *testing.T) {
	hostprobetest.RequireRoot(t)
	s := hostprobetest.Build(t)
	defer func(w time.Duration) { shimSessionWait = w }(shimSessionWait)
	shimSessionWait = 2 * time.Second
	cfg := skipConfig(t, s)
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r
	waitFor(t, "both stand-in libraries attached", func() bool { return r.host.stats().libraries == 2 })
	shimLib := fakeShim(t)
	start := time.Now()
	late, inTime, plain := startApp(t, s.App, "LD_PRELOAD="+shimLib), startApp(t, s.App, "LD_PRELOAD="+shimLib), startApp(t, s.App)
	probed := func() []int {
		got := r.host.probes.Processes()
		slices.Sort(got)
		return got
	}
	waitFor(t, "the app without the shim probed", func() bool { return slices.Contains(probed(), plain.pid) })
	if got := probed(); slices.Contains(got, late.pid) || slices.Contains(got, inTime.pid) {
		t.Fatalf("probed %v before the wait was over: the apps mapping the shim (%d, %d) are in", got, late.pid, inTime.pid)
	}
	r.host.shimConnected(int32(inTime.pid)) // its first CUDA call
	waitFor(t, "the app that never connected probed", func() bool { return slices.Contains(probed(), late.pid) })
	if d := time.Since(start); d < shimSessionWait {
		t.Errorf("probed after %v, before the %v wait", d, shimSessionWait)
	}
	if slices.Contains(probed(), inTime.pid) || hostprobetest.Trapped(t, inTime.pid, s.Libcuda, "cuLaunchKernel") {
		t.Error("the app that connected in time was probed")
	}
	if !pollUntil(10*time.Second, func() bool { return hostprobetest.Trapped(t, late.pid, s.Libcuda, "cuLaunchKernel") }) {
		t.Error("the app that never connected has no breakpoint on cuLaunchKernel")
	}
}

// TestShimProcessesAll: with shim_processes all (or the /proc scan off),
// every entry point is probed in every process, as before.
func TestShimProcessesAll(t *testing.T) {
	hostprobetest.RequireRoot(t)
	s := hostprobetest.Build(t)
	for _, tc := range []struct {
		name string
		mode string
		scan time.Duration
	}{{"all", config.ShimProcessesAll, 100 * time.Millisecond}, {"skip without scan", config.ShimProcessesSkip, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.HostProbes.Enabled = true
			cfg.HostProbes.LibraryPaths = []string{s.Dir}
			cfg.HostProbes.Ldconfig = false
			cfg.HostProbes.ScanInterval = tc.scan
			cfg.HostProbes.ShimProcesses = tc.mode
			tr, mr, _, _ := startBoth(t, cfg)
			defer mr.Shutdown(context.Background())
			defer tr.Shutdown(context.Background())
			r := tr.(*handle).r
			if r.host.probes == nil || r.host.procs != nil {
				t.Fatalf("host probes %v, per-process probes %v: want probes for all processes", r.host.probes != nil, r.host.procs != nil)
			}
			waitFor(t, "both stand-in libraries attached", func() bool { return r.host.stats().libraries == 2 })
			for _, a := range r.host.probes.Attachments() {
				if len(a.PerProcess) != 0 || !slices.ContainsFunc(a.Attached, hostprobe.ShimCovered) {
					t.Errorf("%s: per process %v; want every symbol attached for all", filepath.Base(a.Path), a.PerProcess)
				}
			}
			a := startApp(t, s.App)
			if !hostprobetest.Trapped(t, a.pid, s.Libcuda, "cuLaunchKernel") {
				t.Error("cuLaunchKernel not probed in a new process")
			}
		})
	}
}
