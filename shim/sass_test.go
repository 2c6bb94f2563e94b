package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
)

// sassOn is a collector that asks for the SASS route at rate sampled
// launches a second (0: every launch).
func sassOn(rate uint32) agent.Options {
	return agent.Options{Settings: agentwire.Settings{Flags: agentwire.SettingSASS, DeviceMaxPerSecond: rate, FlushPeriod: 10 * time.Millisecond}}
}

// runSASS runs the direct app's basic scenario with n vecAdd launches under
// the shim, opted in to the SASS route against the MOCK Sanitizer API, and
// returns its records and the mock's counts.
func runSASS(t *testing.T, opts agent.Options, n string, env ...string) (*stream, string) {
	t.Helper()
	return runSASSApp(t, opts, b0(t).appDirect, "direct", "basic", n, env...)
}

// b0 returns the built binaries.
func b0(t *testing.T) *built { t.Helper(); return binaries(t) }

// runSASSApp is runSASS with the program, mode, scenario and count given.
func runSASSApp(t *testing.T, opts agent.Options, prog, mode, scenario, n string, env ...string) (*stream, string) {
	t.Helper()
	return runSASSWith(t, startAgent(t, 256, 1024, opts), prog, mode, scenario, n, env...)
}

// runSASSWith is runSASSApp against agent a: the output must be plain's.
func runSASSWith(t *testing.T, a *testAgent, prog, mode, scenario, n string, env ...string) (*stream, string) {
	t.Helper()
	b := binaries(t)
	plain, _, err := run(t, b, nil, prog, mode, scenario, n)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "sanitizer.txt")
	env = append(append(preload(b, a.path), "GPUPROBE_SASS=1", "GPUPROBE_SANITIZER="+b.sanitizer, "MOCK_SANITIZER_LOG="+log), env...)
	out, errOut, err := run(t, b, env, prog, mode, scenario, n)
	if err != nil || out != plain {
		t.Fatalf("run under the shim: %v, output %q, want %q\n%s", err, out, plain, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	counts, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the MOCK Sanitizer API wrote no counts: %v", err)
	}
	return st, strings.TrimSpace(string(counts))
}

// TestSASSRoute: with every launch sampled, each launch is flagged SASS
// (not UNPROBED) and gets one Exec record, copied from the host-pinned ring,
// with its grid's blocks and threads; the image reached the Sanitizer API
// with its three globals bound.
func TestSASSRoute(t *testing.T) {
	st, counts := runSASS(t, sassOn(0), "5")
	checkLaunches(t, st, int32(st.launches[0].PID), basicLaunches())
	if !strings.Contains(counts, "subscribed=1 ") || !strings.Contains(counts, "added=1 ") || !strings.Contains(counts, "bad_image=0") {
		t.Errorf("MOCK Sanitizer counts %q: want one subscription and one bound image", counts)
	}
	execs := map[uint64]record.Exec{}
	for _, e := range st.execs {
		if _, dup := execs[e.LaunchID]; dup {
			t.Errorf("two Exec records of launch %d", e.LaunchID)
		}
		execs[e.LaunchID] = e
	}
	for i, l := range st.launches {
		if l.Flags&record.LaunchSASS == 0 || l.Flags&record.LaunchUnprobed != 0 {
			t.Errorf("launch %d (id %d): flags %v, want SASS and not UNPROBED", i, l.LaunchID, l.Flags)
		}
		e, ok := execs[l.LaunchID]
		if !ok {
			t.Errorf("launch %d (id %d): no Exec record", i, l.LaunchID)
			continue
		}
		blocks := uint64(l.Grid[0]) * uint64(l.Grid[1]) * uint64(l.Grid[2])
		threads := blocks * uint64(l.Block[0]) * uint64(l.Block[1]) * uint64(l.Block[2])
		if e.Blocks != blocks || e.Threads != threads {
			t.Errorf("launch %d: Exec blocks %d threads %d, want %d %d", i, e.Blocks, e.Threads, blocks, threads)
		}
	}
	if len(st.execs) != len(st.launches) {
		t.Errorf("%d Exec records for %d launches", len(st.execs), len(st.launches))
	}
}

// TestSASSBursts: at 10 sampled launches a second, the first launch starts
// a burst of 10 launches of its module, the module is patched once for it,
// and unpatched at its first launch after the burst; no launch outside the
// burst is flagged or timed.
func TestSASSBursts(t *testing.T) {
	st, counts := runSASS(t, sassOn(10), "30")
	sampled := 0
	for _, l := range st.launches {
		if l.Flags&record.LaunchSASS != 0 {
			sampled++
		}
	}
	if sampled != 10 || len(st.execs) != 10 {
		t.Errorf("%d launches flagged SASS and %d Exec records of %d launches, want 10 (one burst)", sampled, len(st.execs), len(st.launches))
	}
	if !strings.Contains(counts, "patches=1 ") || !strings.Contains(counts, "unpatches=1 ") {
		t.Errorf("MOCK Sanitizer counts %q: want one patch and one unpatch", counts)
	}
}

// TestSASSOff: a collector that does not ask releases the subscription; a
// refused patch or no library leaves every launch unflagged and untimed,
// the application unchanged.
func TestSASSOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   agent.Options
		env    []string
		counts string
	}{
		{"not asked", agent.Options{}, nil, "unsubscribed=1 "},
		{"patch refused", sassOn(0), []string{"MOCK_SANITIZER_FAIL=patch"}, "patches=0 "},
		{"subscribe refused", sassOn(0), []string{"MOCK_SANITIZER_FAIL=subscribe"}, "subscribed=0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, counts := runSASS(t, tc.opts, "3", tc.env...)
			if !strings.Contains(counts, tc.counts) {
				t.Errorf("MOCK Sanitizer counts %q: want %q", counts, tc.counts)
			}
			for i, l := range st.launches {
				if l.Flags&record.LaunchSASS != 0 {
					t.Errorf("launch %d flagged SASS", i)
				}
			}
			if len(st.execs) != 0 || len(st.launches) == 0 {
				t.Errorf("%d Exec records, %d launches: want none and some", len(st.execs), len(st.launches))
			}
		})
	}
	// No library at all: the shim runs on.
	b := binaries(t)
	a := startAgent(t, 256, 1024, sassOn(0))
	if _, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_SASS=1", "GPUPROBE_SANITIZER=/nonexistent.so"), b.appDirect, "direct", "basic", "2"); err != nil {
		t.Fatalf("no library: %v\n%s", err, errOut)
	}
	if st := a.waitGone(t, 1)[0].read(t); len(st.execs) != 0 || len(st.launches) == 0 {
		t.Errorf("no library: %d Exec records, %d launches", len(st.execs), len(st.launches))
	}
}

// TestSASSImageCurrent rebuilds the SASS route's patch image from
// shim/patch/sass_phases.cu with CI's nvcc and checks that the committed
// shim/src/sass_image.h and gpuprobe/sanpatch/phases.ptx are that build:
// run `make shim-patch` when it fails.
func TestSASSImageCurrent(t *testing.T) {
	if _, err := exec.LookPath("nvcc"); err != nil {
		t.Fatalf("nvcc is needed to rebuild the patch image (Debian's nvidia-cuda-toolkit): %v", err)
	}
	cmd := exec.Command("go", "run", "shim/patch/gen.go", "-check")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestSASSReconnect: the collector restarts while the application
// launches; the route pauses with the old session and resumes with the
// new one, whose launches are flagged SASS and timed.
func TestSASSReconnect(t *testing.T) {
	b := binaries(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	a1 := startAgentAt(t, path, 256, 1024, sassOn(0))
	app := exec.Command(b.app, "cudart", "slow", "100")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_SASS=1", "GPUPROBE_SANITIZER="+b.sanitizer)
	app.Env = append(app.Env, preload(b, path)...)
	a2, _ := restartAfterFirstLine(t, app, a1, path, 256, sassOn(0))
	st := a2.waitGone(t, 1)[0].read(t)
	sampled, timed := 0, map[uint64]bool{}
	for _, e := range st.execs {
		timed[e.LaunchID] = true
	}
	for _, l := range st.launches {
		if l.Flags&record.LaunchSASS != 0 {
			sampled++
			if !timed[l.LaunchID] {
				t.Errorf("launch %d of the new session: flagged SASS, no Exec record", l.LaunchID)
			}
		}
	}
	if len(st.launches) < 25 || sampled != len(st.launches) {
		t.Errorf("the new session: %d of %d launches flagged SASS, want all of at least 25", sampled, len(st.launches))
	}
}

// TestSASSContextDestroy: the primary context is reset mid-run, and the
// MOCK Sanitizer API unmaps its pinned ring after telling the shim. The
// shim drains the ring one last time and never reads it again (a read
// would fault the application); the new context gets a ring of its own,
// and every sampled launch before and after has its Exec record.
func TestSASSContextDestroy(t *testing.T) {
	st, counts := runSASSApp(t, sassOn(0), b0(t).app, "cudart", "sassreset", "3")
	if !strings.Contains(counts, "rings=2") {
		t.Errorf("MOCK Sanitizer counts %q: want a ring for each of the two contexts", counts)
	}
	timed := map[uint64]bool{}
	for _, e := range st.execs {
		timed[e.LaunchID] = true
	}
	flagged := 0
	for _, l := range st.launches {
		if l.Flags&record.LaunchSASS == 0 {
			continue
		}
		flagged++
		if !timed[l.LaunchID] {
			t.Errorf("launch %d: flagged SASS, no Exec record", l.LaunchID)
		}
	}
	if n := len(basicLaunches()) - 5 + 3; flagged != 2*n || len(st.launches) != 2*n {
		t.Errorf("%d launches, %d flagged SASS: want %d and %d", len(st.launches), flagged, 2*n, 2*n)
	}
}

// TestSASSWindowsUnavailable: a process that opted in has no CUPTI
// windows, asked for or not, and says why (reason sass) instead of
// failing cuptiSubscribe; its launches are marked NO_WINDOW, so the
// collector does not wait, and the route's Exec records still come.
func TestSASSWindowsUnavailable(t *testing.T) {
	b := binaries(t)
	both := agent.Options{Settings: agentwire.Settings{Flags: agentwire.SettingWindows | agentwire.SettingSASS, FlushPeriod: 10 * time.Millisecond}}
	for _, tc := range []struct {
		name  string
		opts  agent.Options
		execs bool
	}{
		{"windows and sass", both, true},
		{"windows only", windowsOn, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := runSASSApp(t, tc.opts, b.appDirect, "direct", "basic", "3", "GPUPROBE_CUPTI="+b.cupti)
			if len(st.states) != 1 || st.states[0].State != record.WindowsUnavailable || st.states[0].Reason != record.WindowsReasonSASS {
				t.Fatalf("window states %+v, want one: unavailable, reason sass", st.states)
			}
			if len(st.windows) != 0 {
				t.Errorf("%d windows, want none", len(st.windows))
			}
			for i, l := range st.launches {
				if l.Flags&record.LaunchNoWindow == 0 {
					t.Errorf("launch %d: not marked NO_WINDOW", i)
				}
			}
			if got := len(st.execs) == len(st.launches) && len(st.execs) > 0; got != tc.execs {
				t.Errorf("%d Exec records for %d launches; want one each: %v", len(st.execs), len(st.launches), tc.execs)
			}
		})
	}
}

// TestSASSStepsAside: an application that starts its own CUPTI profiler
// (as torch.profiler does) in a process on the SASS route gets its kernel
// records; the route samples nothing while the profiler holds CUPTI
// (patched kernels would distort what it measures), says so (window
// state STEPPED_ASIDE, reason profiler, then back to UNAVAILABLE, reason
// sass) and samples again once the application disabled its kinds.
func TestSASSStepsAside(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, sassOn(0))
	log := filepath.Join(t.TempDir(), "sanitizer.txt")
	env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_TRACE=1", "GPUPROBE_SASS=1",
		"GPUPROBE_SANITIZER="+b.sanitizer, "MOCK_SANITIZER_LOG="+log)
	out, errOut, err := run(t, b, env, b.profiler, "4", "5", "6", "0")
	if err != nil || !strings.Contains(out, "its own profiler saw 5 kernels") {
		t.Fatalf("profiler run: %v, output %q\n%s", err, out, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	if len(st.launches) != 15 {
		t.Fatalf("%d launch records, want 15", len(st.launches))
	}
	for i, l := range st.launches {
		want := i < 4 || i >= 9
		if got := l.Flags&record.LaunchSASS != 0; got != want {
			t.Errorf("launch %d: sampled %v, want %v (the application's profiler had launches 4..8)", i, got, want)
		}
	}
	var states []string
	for _, s := range st.states {
		states = append(states, fmt.Sprintf("%v/%v", s.State, s.Reason))
	}
	want := []string{
		fmt.Sprintf("%v/%v", record.WindowsSteppedAside, record.WindowsReasonProfiler),
		fmt.Sprintf("%v/%v", record.WindowsUnavailable, record.WindowsReasonSASS),
	}
	if strings.Join(states, " ") != strings.Join(want, " ") {
		t.Errorf("window states %q, want %q", states, want)
	}
	if !strings.Contains(errOut, "sass: stepped aside: the application's profiler called cuptiActivityEnable") ||
		!strings.Contains(errOut, "sass: back on") {
		t.Errorf("the trace does not say the route stepped aside and came back:\n%s", errOut)
	}
}
