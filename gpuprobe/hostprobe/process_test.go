package hostprobe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/hostprobetest"
	"github.com/gpuprobe/gpuprobe/record"
	"go.uber.org/goleak"
)

// TestShimCoveredMatchesShim checks the driver half of shimCovered
// against the entry points the shim wraps (shim/src/gp.h, GP_APIS): a
// driver API is covered if and only if the shim wraps it and records its
// calls (it wraps the captures only to track them).
func TestShimCoveredMatchesShim(t *testing.T) {
	src, err := os.ReadFile("../../shim/src/gp.h")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(src, []byte("#define GP_APIS(X)"))
	j := bytes.Index(src[max(i, 0):], []byte("\n\n"))
	if i < 0 || j < 0 {
		t.Fatal("no GP_APIS block in shim/src/gp.h")
	}
	wrapped := map[string]bool{}
	for _, m := range regexp.MustCompile(`"([A-Za-z0-9_]+)"`).FindAllSubmatch(src[i:i+j], -1) {
		wrapped[string(m[1])] = true
	}
	if !wrapped["cuLaunchKernel_ptsz"] || !wrapped["cuCtxSynchronize"] {
		t.Fatalf("GP_APIS parsed badly: %v", wrapped)
	}
	for _, a := range record.HostAPIs() {
		if !a.Driver() {
			continue
		}
		want := wrapped[a.String()] && a.Category() != record.HostCatCapture
		if got := ShimCovered(a.String()); got != want {
			t.Errorf("ShimCovered(%s) = %v; the shim wraps it: %v (category %s)", a, got, wrapped[a.String()], a.Category())
		}
	}
	// The runtime entry points covered are those whose driver call is.
	for _, a := range record.HostAPIs() {
		if !a.Driver() && ShimCovered(a.String()) && !slices.Contains([]record.HostCategory{record.HostCatLaunch, record.HostCatGraphLaunch, record.HostCatSync}, a.Category()) {
			t.Errorf("runtime %s (%s) is shim-covered: only launches, graph launches and syncs are", a, a.Category())
		}
	}
}

// trapped reports whether process pid runs sym of the file at path with
// a breakpoint (hostprobetest.Trapped).
func trapped(tb testing.TB, pid int, path, sym string) bool {
	tb.Helper()
	return hostprobetest.Trapped(tb, pid, path, sym)
}

// TestAttachProcess runs two stand-in apps while the shim-covered entry
// points are probed per process: one given to AttachProcess (a process
// without the shim) and one not (a process with the shim). The first
// gets every record, the second only those of the entry points the shim
// does not record, and its memory holds no breakpoint on the others.
func TestAttachProcess(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	var covered, others []wantCall
	for _, w := range wantCalls {
		if ShimCovered(w.api.String()) {
			covered = append(covered, w)
		} else {
			others = append(others, w)
		}
	}
	if len(covered) < 20 || len(others) < 40 {
		t.Fatalf("%d shim-covered and %d other calls in the stand-in's run: the split is not what this test expects", len(covered), len(others))
	}
	for _, opts := range []Options{{ShimCoveredPerProcess: true}, {ShimCoveredPerProcess: true, perfLinks: true}} {
		t.Run(fmt.Sprintf("perf_links=%v", opts.perfLinks), func(t *testing.T) {
			p, err := Load(opts)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer p.Close()
			files := []string{s.libcuda, s.libcudart}
			for _, f := range files {
				a, err := p.Attach(f)
				if err != nil {
					t.Fatalf("Attach(%s): %v", f, err)
				}
				if len(a.PerProcess) == 0 || slices.ContainsFunc(a.Attached, ShimCovered) || slices.ContainsFunc(a.PerProcess, func(s string) bool { return !ShimCovered(s) }) {
					t.Errorf("Attach(%s): Attached %v, PerProcess %v: want the shim-covered symbols, and only those, per process", f, a.Attached, a.PerProcess)
				}
			}
			withShim, runShim := startWaitingCmd(t, s.app)
			noShim, runNoShim := startWaitingCmd(t, s.app)
			for _, f := range files {
				st := statOf(t, f)
				n, err := p.AttachProcess(noShim.Process.Pid, f, st.Dev, st.Ino)
				if err != nil || n == 0 {
					t.Fatalf("AttachProcess(%s): %d, %v", f, n, err)
				}
				if again, err := p.AttachProcess(noShim.Process.Pid, f, st.Dev, st.Ino); err != nil || again != n {
					t.Errorf("AttachProcess(%s) again: %d, %v; want %d, nil", f, again, err, n)
				}
			}
			if got := p.Processes(); !slices.Equal(got, []int{noShim.Process.Pid}) {
				t.Errorf("Processes() = %v, want [%d]", got, noShim.Process.Pid)
			}
			for _, c := range []struct {
				file, sym    string
				shim, noShim bool
			}{
				{s.libcuda, "cuLaunchKernel", false, true},
				{s.libcudart, "cudaLaunchKernel", false, true},
				{s.libcuda, "cuCtxSynchronize", false, true},
				{s.libcudart, "cudaMalloc", true, true},
				{s.libcuda, "cuEventRecord", true, true},
			} {
				if got := trapped(t, withShim.Process.Pid, c.file, c.sym); got != c.shim {
					t.Errorf("process with the shim: breakpoint on %s: %v, want %v", c.sym, got, c.shim)
				}
				if got := trapped(t, noShim.Process.Pid, c.file, c.sym); got != c.noShim {
					t.Errorf("process without the shim: breakpoint on %s: %v, want %v", c.sym, got, c.noShim)
				}
			}
			rShim, rNoShim := runShim(), runNoShim()
			calls, names := drain(t, p)
			byPID := map[uint32][]record.HostCall{}
			for _, c := range calls {
				byPID[c.PID] = append(byPID[c.PID], c)
			}
			namesOf := func(pid uint32) (out []record.KernelName) {
				for _, n := range names {
					if n.PID == pid {
						out = append(out, n)
					}
				}
				return out
			}
			t.Run("with the shim", func(t *testing.T) { checkCalls(t, rShim, others, byPID[rShim.pid], namesOf(rShim.pid)) })
			t.Run("without the shim", func(t *testing.T) { checkCalls(t, rNoShim, wantCalls, byPID[rNoShim.pid], namesOf(rNoShim.pid)) })
			if len(calls) != len(byPID[rShim.pid])+len(byPID[rNoShim.pid]) {
				t.Errorf("%d calls of other processes", len(calls)-len(byPID[rShim.pid])-len(byPID[rNoShim.pid]))
			}
		})
	}
}

// TestDetachProcess checks that DetachProcess takes a process's
// breakpoints out of its memory, that Detach of a file takes its
// per-process links along, and the bound on processes.
func TestDetachProcess(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	p, err := Load(Options{ShimCoveredPerProcess: true, MaxProcesses: 1})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	if _, err := p.Attach(s.libcuda); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, s.libcuda)
	if _, err := p.AttachProcess(os.Getpid(), s.libcudart, st.Dev, st.Ino+1); err == nil || !strings.Contains(err.Error(), "not attached") {
		t.Errorf("AttachProcess of a file not attached: %v, want a \"not attached\" error", err)
	}
	if _, err := p.AttachProcess(os.Getpid(), s.libcudart, st.Dev, st.Ino); err == nil || !strings.Contains(err.Error(), "not the attached") {
		t.Errorf("AttachProcess by a path to another file: %v, want an identity error", err)
	}
	a, _ := startWaitingCmd(t, s.app)
	b, _ := startWaitingCmd(t, s.app)
	pa, pb := a.Process.Pid, b.Process.Pid
	if _, err := p.AttachProcess(pa, s.libcuda, st.Dev, st.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AttachProcess(pb, s.libcuda, st.Dev, st.Ino); !errors.Is(err, ErrTooManyProcesses) {
		t.Errorf("AttachProcess of a second process with MaxProcesses 1: %v, want ErrTooManyProcesses", err)
	}
	if !trapped(t, pa, s.libcuda, "cuLaunchKernel") || trapped(t, pb, s.libcuda, "cuLaunchKernel") {
		t.Fatal("want a breakpoint in the attached process only")
	}
	if err := p.DetachProcess(pa); err != nil {
		t.Fatal(err)
	}
	if trapped(t, pa, s.libcuda, "cuLaunchKernel") {
		t.Error("DetachProcess left the breakpoint in the process")
	}
	if err := p.DetachProcess(pa); err != nil {
		t.Errorf("DetachProcess again: %v", err)
	}
	if _, err := p.AttachProcess(pb, s.libcuda, st.Dev, st.Ino); err != nil {
		t.Fatalf("AttachProcess after a DetachProcess made room: %v", err)
	}
	if err := p.Detach(s.libcuda); err != nil {
		t.Fatal(err)
	}
	if trapped(t, pb, s.libcuda, "cuLaunchKernel") || len(p.Processes()) != 0 {
		t.Errorf("Detach of the file left per-process probes: breakpoint %v, processes %v", trapped(t, pb, s.libcuda, "cuLaunchKernel"), p.Processes())
	}
}

func statOf(tb testing.TB, path string) syscall.Stat_t {
	tb.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	return st
}
