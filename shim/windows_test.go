package shim

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
)

// windowsOn is a collector that asks for device windows.
var windowsOn = agent.Options{Settings: agentwire.Settings{Flags: agentwire.SettingWindows, FlushPeriod: 10 * time.Millisecond}}

// TestWindows: with the collector asking for them, every launch of the
// basic workload gets exactly one window (the MOCK CUPTI's kernel record)
// filed under its launch id, with its kernel's name hash, in the launch
// records' clock; the output is unchanged.
func TestWindows(t *testing.T) {
	b := binaries(t)
	for _, mode := range []string{"cudart", "direct"} {
		t.Run(mode, func(t *testing.T) {
			plain, _, err := run(t, b, nil, b.program(mode), mode, "basic", "5")
			if err != nil {
				t.Fatalf("uninstrumented run: %v", err)
			}
			a := startAgent(t, 256, 1024, windowsOn)
			out, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti), b.program(mode), mode, "basic", "5")
			if err != nil || out != plain {
				t.Fatalf("run under the shim: %v, output %q, want %q\n%s", err, out, plain, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			checkLaunches(t, st, a.sessions[0].peer.PID, basicLaunches())
			if len(st.states) == 0 || st.states[0].State != record.WindowsOn {
				t.Fatalf("window states %+v, want ON first", st.states)
			}
			byID := map[uint64]record.Window{}
			for _, w := range st.windows {
				if _, dup := byID[w.LaunchID]; dup || w.Flags != 0 {
					t.Errorf("window %+v: repeated launch id or flags set", w)
				}
				byID[w.LaunchID] = w
			}
			for i, l := range st.launches {
				if l.Flags&record.LaunchNoWindow != 0 {
					t.Errorf("launch %d (id %d) flagged NO_WINDOW while windows are on", i, l.LaunchID)
				}
				w, ok := byID[l.LaunchID]
				if !ok {
					t.Errorf("launch %d (id %d): no window", i, l.LaunchID)
					continue
				}
				if w.NameHash != record.NameHash(st.names[l.Function]) {
					t.Errorf("launch %d: window name hash %#x, want FNV-1a of %q", i, w.NameHash, st.names[l.Function])
				}
				// The MOCK CUPTI timed the kernel inside the launch call,
				// with the clock the shim handed it.
				if w.StartNS < l.EnqueueNS || w.StartNS > l.ReturnNS || w.EndNS != w.StartNS+1000 {
					t.Errorf("launch %d: window %d..%d outside its launch call %d..%d", i, w.StartNS, w.EndNS, l.EnqueueNS, l.ReturnNS)
				}
			}
			if len(st.windows) != len(st.launches) {
				t.Errorf("%d windows for %d launches", len(st.windows), len(st.launches))
			}
		})
	}
}

// TestWindowsOff: a collector that does not ask, GPUPROBE_WINDOWS=0, or a
// CUPTI whose kernel activity cannot be enabled: no window records, the
// application unchanged; the last two say why.
func TestWindowsOff(t *testing.T) {
	b := binaries(t)
	plain, _, err := run(t, b, nil, b.appDirect, "direct", "basic", "3")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  agent.Options
		env   []string
		state record.WindowsState // 0: none expected
	}{
		{"not asked", agent.Options{}, nil, 0},
		{"GPUPROBE_WINDOWS=0", windowsOn, []string{"GPUPROBE_WINDOWS=0"}, record.WindowsUnavailable},
		{"enable fails", windowsOn, []string{"MOCK_CUPTI_FAIL=enable"}, record.WindowsUnavailable},
		{"no libcupti", windowsOn, []string{"GPUPROBE_CUPTI=/nonexistent/libcupti.so"}, record.WindowsUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, tc.opts)
			env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti)
			out, errOut, err := run(t, b, append(env, tc.env...), b.appDirect, "direct", "basic", "3")
			if err != nil || out != plain {
				t.Fatalf("run: %v, output %q, want %q\n%s", err, out, plain, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			if len(st.windows) != 0 || len(st.launches) != 6 {
				t.Errorf("%d windows and %d launches, want 0 and 6", len(st.windows), len(st.launches))
			}
			for i, l := range st.launches {
				if l.Flags&record.LaunchNoWindow == 0 {
					t.Errorf("launch %d not flagged NO_WINDOW with windows off", i)
				}
			}
			if tc.state == 0 && len(st.states) != 0 || tc.state != 0 && (len(st.states) != 1 || st.states[0].State != tc.state) {
				t.Errorf("window states %+v, want one of state %d", st.states, tc.state)
			}
		})
	}
}

// TestWindowsStepAside: an application that starts its own CUPTI
// profiler (as torch.profiler does) gets its kernel records; the shim
// steps aside first (saying so), records nothing meanwhile, and comes back
// a second after the application disabled kernel activity.
func TestWindowsStepAside(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, windowsOn)
	out, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_TRACE=1"), b.profiler, "4", "5", "6", "1500")
	if err != nil || !strings.Contains(out, "its own profiler saw 5 kernels") {
		t.Fatalf("profiler run: %v, output %q\n%s", err, out, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	if len(st.launches) != 15 {
		t.Fatalf("%d launch records, want 15", len(st.launches))
	}
	var states []record.WindowsState
	for _, s := range st.states {
		states = append(states, s.State)
	}
	if len(states) != 3 || states[0] != record.WindowsOn || states[1] != record.WindowsSteppedAside || states[2] != record.WindowsOn || st.states[1].Reason != record.WindowsReasonProfiler {
		t.Errorf("window states %+v, want ON, STEPPED_ASIDE (profiler), ON", st.states)
	}
	got := map[uint64]bool{}
	for _, w := range st.windows {
		got[w.LaunchID] = true
	}
	for i, l := range st.launches {
		want := i < 4 || i >= 9
		if got[l.LaunchID] != want {
			t.Errorf("launch %d: window %v, want %v (the application's profiler had launches 4..8)", i, got[l.LaunchID], want)
		}
	}
	if !strings.Contains(errOut, "stepped aside (the application called cuptiActivityRegisterCallbacks)") {
		t.Errorf("the trace does not say the shim stepped aside:\n%s", errOut)
	}
}

// TestWindowsRateCap: a process that launches faster than the windows'
// budget allows (GPUPROBE_WINDOWS_BUDGET_PPM=1000 at about 1 us a launch:
// 1,000 launches a second) for two epochs (of 200 ms) has CUPTI detached:
// its later launches are flagged NO_WINDOW, the shim says why (OFF,
// reason rate), and every launch either has its window or the flag. With
// CUPTI holding every record until a forced flush, the windows it held
// at the detach still come (cuptiFinalize would drop them).
func TestWindowsRateCap(t *testing.T) {
	b := binaries(t)
	for _, tc := range []struct{ name, flush string }{
		{"periodic flushes", ""},
		{"records held until the detach", "MOCK_CUPTI_FLUSH=forced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1<<15, windowsOn)
			env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_WINDOWS_BUDGET_PPM=1000")
			if tc.flush != "" {
				env = append(env, tc.flush)
			}
			out, errOut, err := run(t, b, env, b.profiler, "rate", "8000", "2500")
			if err != nil || !strings.Contains(out, "rate done") {
				t.Fatalf("run: %v, output %q\n%s", err, out, errOut)
			}
			checkRateCap(t, a.waitGone(t, 1)[0].read(t))
		})
	}
}

// TestWindowsBufferFill: where CUPTI hands a buffer over only when it is
// full (a stream that always has a kernel running), windows still reach
// the collector while the process runs, not at its exit: the shim sizes
// its buffers to the launch rate. With fixed 512 KiB buffers (2,520
// records) none of these 300 launches' windows came before the exit.
func TestWindowsBufferFill(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1<<15, windowsOn)
	env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_TRACE=1", "MOCK_CUPTI_FLUSH=full")
	out, errOut, err := run(t, b, env, b.profiler, "rate", "200", "1500")
	if err != nil || !strings.Contains(out, "rate done") {
		t.Fatalf("run: %v, output %q\n%s", err, out, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	if len(st.windows) != len(st.launches) || len(st.launches) != 300 {
		t.Fatalf("%d windows for %d launches, want 300 each", len(st.windows), len(st.launches))
	}
	early := 0 // windows written before the last launch
	for _, n := range st.windowAfter {
		if n < len(st.launches) {
			early++
		}
	}
	if early < len(st.windows)/2 {
		t.Errorf("%d of %d windows came before the process's last launch, want at least half\n%s", early, len(st.windows), errOut)
	}
}

// TestWindowsExitFlush: the process exits while the shim's flush thread
// is inside a periodic flush (the MOCK CUPTI holds it a second and hands
// records over only in a forced flush): the exit flush waits for it, and
// every launch still gets its window. An exit that gave up on the busy
// lock lost them all, untraced (cdp on an H200, one run in two).
func TestWindowsExitFlush(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, windowsOn)
	hold := filepath.Join(t.TempDir(), "flush-held")
	env := append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_TRACE=1",
		"MOCK_CUPTI_FLUSH=forced", "MOCK_CUPTI_FLUSH_HOLD="+hold)
	out, errOut, err := run(t, b, env, b.profiler, "exitflush", "4", hold)
	if err != nil || !strings.Contains(out, "exitflush done") {
		t.Fatalf("run: %v, output %q\n%s", err, out, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	has := map[uint64]bool{}
	for _, w := range st.windows {
		has[w.LaunchID] = true
	}
	for i, l := range st.launches {
		if !has[l.LaunchID] {
			t.Errorf("launch %d (id %d): no window", i, l.LaunchID)
		}
	}
	if len(st.launches) != 4 || !strings.Contains(errOut, "device windows: 4 written") {
		t.Errorf("%d launches, %d windows; want 4 each, and the trace's exit line:\n%s", len(st.launches), len(st.windows), errOut)
	}
}

// checkRateCap checks a rate-capped session: windows, then NO_WINDOW
// flags from one launch on, each launch with exactly one of the two, and
// OFF (reason rate) as the last window state.
func checkRateCap(t *testing.T, st *stream) {
	t.Helper()
	has := map[uint64]bool{}
	for _, w := range st.windows {
		has[w.LaunchID] = true
	}
	noWin, both, neither, lastWin, firstNo := 0, 0, 0, -1, -1
	for i, l := range st.launches {
		flagged := l.Flags&record.LaunchNoWindow != 0
		if flagged {
			noWin++
			if firstNo < 0 {
				firstNo = i
			}
		}
		if flagged && has[l.LaunchID] {
			both++
		}
		if !flagged && !has[l.LaunchID] {
			if neither++; neither <= 5 {
				t.Errorf("launch %d: neither a window nor NO_WINDOW", l.LaunchID)
			}
		}
		if has[l.LaunchID] {
			lastWin = i
		}
	}
	n := len(st.launches)
	t.Logf("%d launches: %d windows (the last at launch %d), %d flagged NO_WINDOW (the first at %d), %d neither", n, len(st.windows), lastWin, noWin, firstNo, neither)
	if n < 4000 || len(st.windows) == 0 || noWin < n/2 || both != 0 || lastWin > firstNo {
		t.Errorf("%d launches, %d windows, %d flagged, %d both: the cap did not detach once and for all", n, len(st.windows), noWin, both)
	}
	var last record.WindowState
	if len(st.states) > 0 {
		last = st.states[len(st.states)-1]
	}
	if last.State != record.WindowsOff || last.Reason != record.WindowsReasonRate {
		t.Errorf("window states %+v, want OFF (reason rate) last", st.states)
	}
}

// TestProfilerLocalScope: torch.profiler's libcupti is loaded with
// RTLD_LOCAL (Python loads torch so), outside the global scope where the
// shim's CUPTI interposers look with RTLD_NEXT. With device windows off
// (the shim loads no libcupti of its own) and on the SASS route, the
// application's profiler must still reach its libcupti. Guards against it
// getting CUPTI_ERROR_NOT_INITIALIZED from the interposers and no kernel
// records (torch.profiler on an H100).
func TestProfilerLocalScope(t *testing.T) {
	b := binaries(t)
	for _, tc := range []struct {
		name string
		opts agent.Options
		env  []string
	}{
		{"windows off", agent.Options{}, nil},
		{"sass", sassOn(0), []string{"GPUPROBE_SASS=1", "GPUPROBE_SANITIZER=" + b.sanitizer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, tc.opts)
			env := append(append(preload(b, a.path), "GPUPROBE_TRACE=1"), tc.env...)
			out, errOut, err := run(t, b, env, b.profilerLocal, b.profilerLib, "4", "5", "6", "0")
			if err != nil || !strings.Contains(out, "its own profiler saw 5 kernels") {
				t.Fatalf("profiler run: %v, output %q\n%s", err, out, errOut)
			}
			if st := a.waitGone(t, 1)[0].read(t); len(st.launches) != 15 {
				t.Errorf("%d launch records, want 15", len(st.launches))
			}
		})
	}
}

// TestWindowsKinds: the launch kinds whose windows CUPTI reports apart
// (testdata/app_kinds.c, the MOCK CUPTI's kernels by name): a dynamic-
// parallelism parent gets its own window and its two device-launched
// children's windows name it, flagged DEVICE_LAUNCHED; launches through a
// nested entry point (launch attributes, cooperative) are matched by the
// inner call's correlation id; a kernel the driver did not time gets an
// UNTIMED window (times 0) instead of none; the cuLaunchKernelEx launches
// are flagged by their attributes (cooperative, cluster).
func TestWindowsKinds(t *testing.T) {
	b := binaries(t)
	for _, mode := range []string{"cudart", "direct"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 256, 1024, windowsOn)
			out, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_CUPTI="+b.cupti, "GPUPROBE_TRACE=1"), b.program(mode), mode, "kinds")
			if err != nil || !strings.Contains(out, "app: kinds done") {
				t.Fatalf("run: %v, output %q\n%s", err, out, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			if len(st.launches) != 5 {
				t.Fatalf("%d launch records, want 5", len(st.launches))
			}
			// The launch kinds of cuLaunchKernelEx's attributes, in the
			// app's order: plain, cooperative, cluster, the cooperative
			// API (its own entry point, no flag), plain.
			kind := record.LaunchCooperative | record.LaunchCluster
			for i, want := range []record.LaunchFlags{0, record.LaunchCooperative, record.LaunchCluster, 0, 0} {
				if got := st.launches[i].Flags & kind; got != want {
					t.Errorf("launch %d: kind flags %#x, want %#x", i, got, want)
				}
			}
			own := map[uint64][]record.Window{}
			children := map[uint64]int{}
			for _, w := range st.windows {
				switch {
				case w.Flags == record.WindowDeviceLaunched:
					children[w.LaunchID]++
					if w.NameHash != record.NameHash("_Z9cdp_childv") || w.EndNS <= w.StartNS {
						t.Errorf("child window %+v: want _Z9cdp_childv's, timed", w)
					}
				case w.Flags&^record.WindowUntimed == 0:
					own[w.LaunchID] = append(own[w.LaunchID], w)
				default:
					t.Errorf("window %+v: unexpected flags", w)
				}
			}
			for i, l := range st.launches {
				name := st.names[l.Function]
				ws := own[l.LaunchID]
				if l.Flags&record.LaunchNoWindow != 0 || len(ws) != 1 {
					t.Errorf("launch %d (%s): flags %#x, %d windows of its own, want 1", i, name, l.Flags, len(ws))
					continue
				}
				w := ws[0]
				untimed := name == "_Z12untimed_kernv"
				if (w.Flags == record.WindowUntimed) != untimed || (untimed && w.StartNS|w.EndNS != 0) ||
					(!untimed && (w.StartNS < l.EnqueueNS || w.StartNS > l.ReturnNS)) {
					t.Errorf("launch %d (%s): window %+v, want untimed %v", i, name, w, untimed)
				}
				if want := map[bool]int{true: 2}[name == "_Z10cdp_parentv"]; children[l.LaunchID] != want {
					t.Errorf("launch %d (%s): %d device-launched windows, want %d", i, name, children[l.LaunchID], want)
				}
			}
			if !strings.Contains(errOut, "first record of kind 18") || !strings.Contains(errOut, "1 untimed, 2 device-launched") {
				t.Errorf("the trace does not say what CUPTI reported:\n%s", errOut)
			}
		})
	}
}
