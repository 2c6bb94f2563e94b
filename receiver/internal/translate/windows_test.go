package translate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/internal/kernelfilter"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The steps at which the window tests call Expire, after feeding their
// records at now: with a grace of 10 ms and a window wait of 100 ms.
var winSteps = []time.Duration{0, 11 * time.Millisecond, 50 * time.Millisecond, 101 * time.Millisecond, 112 * time.Millisecond}

const (
	winGrace = 10 * time.Millisecond
	winWait  = 100 * time.Millisecond
)

func windowsState(st record.WindowsState, r record.WindowsReason) rec {
	return shim(&record.WindowState{TimeNS: 1, State: st, Reason: r})
}

var windowsOn = windowsState(record.WindowsOn, record.WindowsReasonNone)

// winTr is a translator for the window tests.
func winTr(probes bool) *Translator {
	return newTr(Options{ExpectWarps: probes, CompletionGrace: winGrace, LaunchTimeout: time.Hour, Windows: WindowOptions{Wait: winWait}})
}

// expireSteps calls Expire at each of winSteps and returns the first step
// after which nothing is pending (-1: never).
func expireSteps(tr *Translator, now time.Time) time.Duration {
	for _, d := range winSteps {
		tr.Expire(now.Add(d))
		if tr.Pending() == 0 {
			return d
		}
	}
	return -1
}

// phases returns the [start, end] (mono ns) of the children of span
// root, by name.
func phases(td ptrace.Traces, root ptrace.Span) map[string][2]uint64 {
	out := map[string][2]uint64{}
	for _, c := range children(td)[root.SpanID()] {
		out[c.Name()] = [2]uint64{uint64(c.StartTimestamp() - realBase), uint64(c.EndTimestamp() - realBase)}
	}
	return out
}

// TestDriverWindows: a driver window gives its launch the executing and
// queued phases when the launch's probes did not time it, is compared with
// the probes' window when they did (which the span keeps), and while the
// client's windows are on, a launch waits for it at most the window wait;
// windows of no pending launch are counted late or unmatched.
func TestDriverWindows(t *testing.T) {
	const k = "_Z1kv"
	launch := func(id uint64, flags record.LaunchFlags, result uint32) rec {
		return shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
			Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: flags, Result: result})
	}
	probed, unprobed := launch(9, 0, 0), launch(9, record.LaunchUnprobed, 0)
	coop := shim(&record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
		Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: record.LaunchUnprobed, API: record.APILaunchCooperativeKernel})
	exec := shim(&record.Exec{LaunchID: 9, StartNS: gpuBase + 10_600, EndNS: gpuBase + 90_600, Blocks: 4, Threads: 1024})
	window := func(id, start uint64, flags record.WindowFlags) rec {
		return shim(&record.Window{LaunchID: id, StartNS: start, EndNS: 90_800, NameHash: record.NameHash(k), Correlation: 5, Flags: flags})
	}
	win := window(9, 10_500, 0)
	probeWin, driverWin := [2]uint64{10_600, 90_600}, [2]uint64{10_500, 90_800}
	tests := []struct {
		name      string
		probes    bool // kernel_phases on (ExpectWarps)
		recs      []rec
		late      []rec         // fed once the launch was emitted
		doneAt    time.Duration // the step that emits the launch
		executing [2]uint64     // want cuda.executing (zero: none)
		route     any           // cuda.launch.window (nil: none)
		c         WindowCounters
		offsets   int // probe_offset data points
	}{
		{"window only (SASS kernel), probes off", false, []rec{windowsOn, unprobed, win}, nil,
			winSteps[0], driverWin, "windows", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 0},
		{"a producer that writes completion records waits a grace for one", false, []rec{windowsOn,
			shim(&record.Completion{LaunchID: 8, CompleteNS: 9_000}), unprobed, win}, nil,
			winSteps[1], driverWin, "windows", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 0},
		{"window only, kernel not patched", true, []rec{windowsOn, unprobed, win}, nil,
			winSteps[0], driverWin, "windows", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 0},
		{"window after Exec: the probes' window stays", true, []rec{windowsOn, probed, exec, win}, nil,
			winSteps[0], probeWin, "inline_ptx", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 2},
		{"window before Exec: the probes' window stays", true, []rec{windowsOn, probed, win, exec}, nil,
			winSteps[0], probeWin, "inline_ptx", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 2},
		{"window between Exec and launch record", true, []rec{windowsOn, exec, win, probed}, nil,
			winSteps[0], probeWin, "inline_ptx", WindowCounters{WindowsMatched: 1, WindowStates: 1}, 2},
		{"late window after Exec", true, []rec{windowsOn, probed, exec}, []rec{win},
			winSteps[3], probeWin, "inline_ptx", WindowCounters{WindowsLate: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"late window, no probes: the wait expires", false, []rec{windowsOn, unprobed}, []rec{win},
			winSteps[3], [2]uint64{}, nil, WindowCounters{WindowsLate: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"windows stepped aside: no wait", true, []rec{windowsOn,
			windowsState(record.WindowsSteppedAside, record.WindowsReasonProfiler), unprobed}, []rec{win},
			winSteps[1], [2]uint64{}, nil, WindowCounters{WindowsLate: 1, WindowStates: 2}, 0},
		{"windows never reported: no wait", true, []rec{unprobed}, nil,
			winSteps[1], [2]uint64{}, nil, WindowCounters{}, 0},
		{"flagged NO_WINDOW (rate cap): no wait, not missing", false, []rec{windowsOn,
			launch(9, record.LaunchUnprobed|record.LaunchNoWindow, 0)}, []rec{win},
			winSteps[0], [2]uint64{}, nil, WindowCounters{WindowsUnmatched: 1, WindowStates: 1}, 0},
		{"a failed launch waits for none", true, []rec{windowsOn, launch(9, record.LaunchUnprobed, 1)}, nil,
			winSteps[0], [2]uint64{}, nil, WindowCounters{WindowStates: 1}, 0},
		{"unknown launch id", true, []rec{windowsOn, unprobed, window(99, 10_500, 0)}, nil,
			winSteps[3], [2]uint64{}, nil, WindowCounters{WindowsUnmatched: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"no launch", true, []rec{windowsOn, unprobed, window(0, 10_500, record.WindowNoLaunch)}, nil,
			winSteps[3], [2]uint64{}, nil, WindowCounters{WindowsUnmatched: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"began before the launch call", true, []rec{windowsOn, unprobed, window(9, 9_000, 0)}, nil,
			winSteps[3], [2]uint64{}, nil, WindowCounters{WindowsUnmatched: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"duplicate: the first stays", true, []rec{windowsOn, unprobed, win, window(9, 20_000, 0)}, nil,
			winSteps[0], driverWin, "windows", WindowCounters{WindowsMatched: 1, WindowsUnmatched: 1, WindowStates: 1}, 0},
		{"untimed by the driver: no wait, counted untimed", false, []rec{windowsOn, unprobed,
			shim(&record.Window{LaunchID: 9, NameHash: record.NameHash(k), Correlation: 5, Flags: record.WindowUntimed})}, nil,
			winSteps[0], [2]uint64{}, nil, WindowCounters{WindowsUntimed: 1, UntimedByAPI: [nLaunchAPIs]uint64{1}, WindowStates: 1}, 0},
		{"untimed cooperative launch: counted under its entry point", false, []rec{windowsOn, coop,
			shim(&record.Window{LaunchID: 9, NameHash: record.NameHash(k), Correlation: 5, Flags: record.WindowUntimed})}, nil,
			winSteps[0], [2]uint64{}, nil, WindowCounters{WindowsUntimed: 1, UntimedByAPI: [nLaunchAPIs]uint64{record.APILaunchCooperativeKernel: 1}, WindowStates: 1}, 0},
		{"untimed of no launch: unmatched", false, []rec{windowsOn, unprobed,
			shim(&record.Window{NameHash: record.NameHash(k), Flags: record.WindowUntimed | record.WindowNoLaunch})}, nil,
			winSteps[3], [2]uint64{}, nil, WindowCounters{WindowsUnmatched: 1, WindowsMissing: 1, WindowStates: 1}, 0},
		{"device-launched children are not the parent's window", false, []rec{windowsOn, unprobed,
			window(9, 10_600, record.WindowDeviceLaunched), window(9, 10_700, record.WindowDeviceLaunched), win}, nil,
			winSteps[0], driverWin, "windows", WindowCounters{WindowsMatched: 1, WindowsDevice: 2, WindowStates: 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := winTr(tc.probes)
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, append([]rec{shim(&record.KernelName{Function: 0xf, Name: k})}, tc.recs...)...)
			if got := expireSteps(tr, now); got != tc.doneAt {
				t.Fatalf("emitted at step %v, want %v", got, tc.doneAt)
			}
			handleAll(t, tr, now.Add(time.Second), tc.late...)
			td := tr.TakeTraces()
			x := index(td)
			root := x.one(t, "_Z1kv")
			ph := phases(td, root)
			if tc.executing == [2]uint64{} {
				if _, ok := ph[SpanExecuting]; ok {
					t.Errorf("phases %v, want no %s", ph, SpanExecuting)
				}
			} else {
				want := map[string][2]uint64{SpanLaunchCall: {10_000, 10_100}, SpanQueued: {10_000, tc.executing[0]}, SpanExecuting: tc.executing}
				if fmt.Sprint(ph) != fmt.Sprint(want) {
					t.Errorf("phases %v, want %v", ph, want)
				}
			}
			if got := attr(root, "cuda.launch.window"); got != tc.route {
				t.Errorf("cuda.launch.window = %v, want %v", got, tc.route)
			}
			c := tr.Counters().WindowCounters
			c.WindowsRead = 0
			if c != tc.c {
				t.Errorf("counters %+v\nwant     %+v", c, tc.c)
			}
			md := tr.Metrics(now, nil)
			if n := dataPoints(md, MetricProbeOffset); n != tc.offsets {
				t.Errorf("%s: %d points, want %d", MetricProbeOffset, n, tc.offsets)
			}
			if got, want := untimedByAPI(md), untimedWant(tr.Counters().WindowCounters, tc.c); got != want {
				t.Errorf("gpuprobe.receiver.windows.untimed by cuda.launch.api: %s, want %s", got, want)
			}
			// The execution-time metric takes the window the span shows.
			if tc.executing != [2]uint64{} {
				if sum := execSum(md); math.Abs(sum-float64(tc.executing[1]-tc.executing[0])/1e9) > 1e-12 {
					t.Errorf("%s sum %g, want %g", MetricExecDuration, sum, float64(tc.executing[1]-tc.executing[0])/1e9)
				}
			}
		})
	}
}

// execSum is the sum of gpu.cuda.kernel.execution.duration over its points.
func execSum(md pmetric.Metrics) float64 {
	var sum float64
	eachMetric(md, func(m pmetric.Metric) { // the kernel series are their process's
		if m.Name() == MetricExecDuration {
			for j := range m.ExponentialHistogram().DataPoints().Len() {
				sum += m.ExponentialHistogram().DataPoints().At(j).Sum()
			}
		}
	})
	return sum
}

// TestProbeOffsets: the probes' window is compared with the driver's at
// each edge, inside or outside it, in seconds.
func TestProbeOffsets(t *testing.T) {
	tests := []struct {
		name           string
		winStart, wEnd uint64
		want           map[string]float64 // edge/direction → sum
	}{
		{"probes inside", 10_500, 90_800, map[string]float64{"start/inside": 100e-9, "end/inside": 200e-9}},
		{"probes outside", 10_700, 90_500, map[string]float64{"start/outside": 100e-9, "end/outside": 100e-9}},
		{"same edges", 10_600, 90_600, map[string]float64{"start/inside": 0, "end/inside": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := winTr(true)
			hooked := map[string]float64{} // what OnProbeOffset got
			tr.o.Windows.OnProbeOffset = func(e, d int, secs float64) { hooked[EdgeNames[e]+"/"+DirectionNames[d]] += secs }
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, shim(&record.KernelName{Function: 0xf, Name: "k"}), windowsOn,
				shim(&record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
					Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}}),
				shim(&record.Exec{LaunchID: 9, StartNS: gpuBase + 10_600, EndNS: gpuBase + 90_600, Blocks: 4, Threads: 1024}),
				shim(&record.Window{LaunchID: 9, StartNS: tc.winStart, EndNS: tc.wEnd}))
			expireSteps(tr, now)
			got := map[string]float64{}
			sm := tr.Metrics(now, nil).ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			for i := range sm.Len() {
				if m := sm.At(i); m.Name() == MetricProbeOffset {
					for j := range m.ExponentialHistogram().DataPoints().Len() {
						dp := m.ExponentialHistogram().DataPoints().At(j)
						e, _ := dp.Attributes().Get("gpuprobe.windows.edge")
						d, _ := dp.Attributes().Get("gpuprobe.windows.direction")
						got[e.Str()+"/"+d.Str()] = dp.Sum()
					}
				}
			}
			for _, got := range []map[string]float64{got, hooked} {
				if len(got) != len(tc.want) {
					t.Fatalf("offsets %v, want %v", got, tc.want)
				}
				for k, w := range tc.want {
					if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-15 {
						t.Errorf("%s = %g, want %g (all: %v)", k, g, w, got)
					}
				}
			}
		})
	}
}

// TestGraphWindows: the windows of a cuGraphLaunch call name it by its
// first node record's launch id and each node by its kernel's name hash:
// they go to the nodes in node order (the same kernel twice: first window
// to the first node), whether the nodes keep their ids in every replay
// (graph.go) or get fresh ones; a window of an earlier call whose nodes
// were emitted without one is late, not given to the next call's node.
func TestGraphWindows(t *testing.T) {
	kernels := []struct {
		fn   uint64
		name string
	}{{0xa, "_Z2kav"}, {0xb, "_Z2kbv"}, {0xa, "_Z2kav"}}
	const gap = 1_000_000
	enq := func(r int) uint64 { return 10_000 + uint64(r)*gap }
	// node i of replay r runs [enq + 1000(i+1), enq + 1000(i+1) + 500].
	winStart := func(r, i int) uint64 { return enq(r) + 1000*uint64(i+1) }
	type call struct{ ids []uint64 }
	tests := []struct {
		name string
		id   func(r, i int) uint64
	}{
		{"fresh ids every call", func(r, i int) uint64 { return 100 + 10*uint64(r) + uint64(i) }},
		{"graph node ids, the same every replay", func(_, i int) uint64 { return GraphIDBit | uint64(0x11+i) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			launches := func(r int) []rec {
				var out []rec
				for i, k := range kernels {
					out = append(out, shim(&record.Launch{LaunchID: tc.id(r, i), PID: 42, TID: 43, EnqueueNS: enq(r), ReturnNS: enq(r) + 50,
						Stream: 7, Function: k.fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
						API: record.APIGraphLaunch, Flags: record.LaunchUnprobed}))
				}
				return out
			}
			// The driver's windows of replay r: kb's first, then ka's in order.
			windows := func(r int) []rec {
				var out []rec
				for _, i := range []int{1, 0, 2} {
					out = append(out, shim(&record.Window{LaunchID: tc.id(r, 0), StartNS: winStart(r, i), EndNS: winStart(r, i) + 500,
						NameHash: record.NameHash(kernels[i].name), Flags: record.WindowGraph}))
				}
				return out
			}
			tr := winTr(false)
			now := time.Unix(1000, 0)
			recs := []rec{windowsOn, shim(&record.KernelName{Function: 0xa, Name: "_Z2kav"}), shim(&record.KernelName{Function: 0xb, Name: "_Z2kbv"})}
			// Replay 0 gets no window in time: its nodes are emitted without.
			handleAll(t, tr, now, append(recs, launches(0)...)...)
			if got := expireSteps(tr, now); got != winSteps[3] {
				t.Fatalf("replay 0 emitted at %v, want %v", got, winSteps[3])
			}
			tr.TakeTraces()
			// Replay 1's launches, then replay 0's late windows, a window
			// of an unknown kernel and one naming the call by its second
			// node (while the call waits), then replay 1's windows.
			stray := []rec{
				shim(&record.Window{LaunchID: tc.id(1, 0), StartNS: winStart(1, 0), EndNS: winStart(1, 0) + 1, NameHash: record.NameHash("_Z2kcv"), Flags: record.WindowGraph}),
				shim(&record.Window{LaunchID: tc.id(1, 1), StartNS: winStart(1, 1), EndNS: winStart(1, 1) + 1, NameHash: record.NameHash("_Z2kbv"), Flags: record.WindowGraph}),
			}
			later := now.Add(time.Second)
			handleAll(t, tr, later, append(append(append(launches(1), windows(0)...), stray...), windows(1)...)...)
			if got := expireSteps(tr, later); got != winSteps[0] {
				t.Fatalf("replay 1 emitted at %v, want %v", got, winSteps[0])
			}
			td := tr.TakeTraces()
			x := index(td)
			got := map[uint64][2]uint64{}
			for _, name := range []string{"_Z2kav", "_Z2kbv"} {
				for _, s := range x.byName[name] {
					id := uint64(attr(s, "cuda.launch.id").(int64))
					got[id] = phases(td, s)[SpanExecuting]
				}
			}
			want := map[uint64][2]uint64{}
			for i := range kernels {
				want[tc.id(1, i)] = [2]uint64{winStart(1, i), winStart(1, i) + 500}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("executing by launch id %v\nwant %v", got, want)
			}
			c := tr.Counters().WindowCounters
			want2 := WindowCounters{WindowsRead: 8, WindowsMatched: 3, WindowsLate: 3, WindowsUnmatched: 2, WindowsMissing: 3, WindowStates: 1}
			if c != want2 {
				t.Errorf("counters %+v\nwant     %+v", c, want2)
			}
			if n := tr.launches.windows.groups.entries; n != 0 {
				t.Errorf("%d node entries left", n)
			}
		})
	}
}

// TestWindowStates: each change of a client's windows state is counted by
// state and reason and reported once; repeats only add their drops.
func TestWindowStates(t *testing.T) {
	type report struct {
		pid   uint32
		state string
	}
	st := func(src uint32, s record.WindowsState, r record.WindowsReason, dropped uint32) rec {
		return rec{src, &record.WindowState{TimeNS: 5, State: s, Reason: r, Dropped: dropped}}
	}
	tests := []struct {
		name    string
		recs    []rec
		reports []report
		changes map[string]int64 // state/reason → count
		dropped uint64
	}{
		{"on, repeated", []rec{st(1, record.WindowsOn, 0, 0), st(1, record.WindowsOn, 0, 2), st(1, record.WindowsOn, 0, 3)},
			[]report{{100, "on/none"}}, map[string]int64{"on/none": 1}, 5},
		{"stepped aside for the profiler and back", []rec{st(1, record.WindowsOn, 0, 0),
			st(1, record.WindowsSteppedAside, record.WindowsReasonProfiler, 1), st(1, record.WindowsSteppedAside, record.WindowsReasonProfiler, 0),
			st(1, record.WindowsOn, 0, 0)},
			[]report{{100, "on/none"}, {100, "stepped_aside/profiler"}, {100, "on/none"}},
			map[string]int64{"on/none": 2, "stepped_aside/profiler": 1}, 1},
		{"unavailable, another reason", []rec{st(1, record.WindowsUnavailable, record.WindowsReasonNoLibrary, 0),
			st(1, record.WindowsUnavailable, record.WindowsReasonAPIError, 0)},
			[]report{{100, "unavailable/no_library"}, {100, "unavailable/api_error"}},
			map[string]int64{"unavailable/no_library": 1, "unavailable/api_error": 1}, 0},
		{"two clients", []rec{st(1, record.WindowsOn, 0, 0), st(2, record.WindowsOn, 0, 0), st(2, record.WindowsOff, record.WindowsReasonConfig, 0)},
			[]report{{100, "on/none"}, {200, "on/none"}, {200, "off/config"}},
			map[string]int64{"on/none": 2, "off/config": 1}, 0},
		// The rate cap's reason is the last one Decode accepts: counting it
		// must not index past the table (a launch loop that trips the cap
		// would panic the collector).
		{"off by the rate cap", []rec{st(1, record.WindowsOn, 0, 0), st(1, record.WindowsOff, record.WindowsReasonRate, 0)},
			[]report{{100, "on/none"}, {100, "off/rate"}},
			map[string]int64{"on/none": 1, "off/rate": 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []report
			tr := newTr(Options{Windows: WindowOptions{OnState: func(pid uint32, s record.WindowState) {
				got = append(got, report{pid, s.State.String() + "/" + s.Reason.String()})
			}}})
			tr.Connect(1, Peer{PID: 100})
			tr.Connect(2, Peer{PID: 200})
			handleAll(t, tr, time.Now(), tc.recs...)
			if fmt.Sprint(got) != fmt.Sprint(tc.reports) {
				t.Errorf("reports %v, want %v", got, tc.reports)
			}
			changes := map[string]int64{}
			var n uint64
			sm := tr.Metrics(time.Now(), nil).ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			for i := range sm.Len() {
				m := sm.At(i)
				switch m.Name() {
				case MetricWindowStates:
					for j := range m.Sum().DataPoints().Len() {
						dp := m.Sum().DataPoints().At(j)
						s, _ := dp.Attributes().Get("gpuprobe.windows.state")
						r, _ := dp.Attributes().Get("gpuprobe.windows.reason")
						changes[s.Str()+"/"+r.Str()] = dp.IntValue()
					}
				case "gpuprobe.receiver.windows.dropped":
					n = uint64(m.Sum().DataPoints().At(0).IntValue())
				}
			}
			if fmt.Sprint(changes) != fmt.Sprint(tc.changes) {
				t.Errorf("state changes %v, want %v", changes, tc.changes)
			}
			if n != tc.dropped || tr.Counters().WindowsDropped != tc.dropped {
				t.Errorf("dropped %d (counter %d), want %d", n, tr.Counters().WindowsDropped, tc.dropped)
			}
		})
	}
}

// TestStreamGapWindows: the stream idle time and host wait use a launch's
// driver window as they use its probes' window, and compare a probe window
// (%globaltimer) with a driver window (CLOCK_MONOTONIC) through their
// realtime mappings.
func TestStreamGapWindows(t *testing.T) {
	// One launch: host call [enq, ret], device window [start, end] (mono
	// ns) from its probes (Exec) or the driver (Window).
	type gl struct {
		enq, ret, start, end uint64
		probe                bool
	}
	tests := []struct {
		name     string
		first    gl
		second   gl
		idle     int64
		hostWait int64
	}{
		{"driver windows, queued in time", gl{1000, 1100, 1500, 3000, false}, gl{1200, 1300, 3100, 4000, false}, 100, 0},
		{"driver windows, the host late", gl{1000, 1100, 1500, 3000, false}, gl{3400, 3500, 3600, 4000, false}, 600, 500},
		{"probe then driver window", gl{1000, 1100, 1500, 3000, true}, gl{3400, 3500, 3600, 4000, false}, 600, 500},
		{"driver then probe window", gl{1000, 1100, 1500, 3000, false}, gl{3400, 3500, 3700, 4000, true}, 700, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs := []rec{windowsOn, shim(&record.KernelName{Function: 0xf, Name: "k"})}
			for i, g := range []gl{tc.first, tc.second} {
				id := uint64(i + 1)
				l := &record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: g.enq, ReturnNS: g.ret, Stream: 7, Function: 0xf,
					Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}}
				if g.probe {
					// The driver times it too; its span keeps the probes' window.
					recs = append(recs, shim(l), shim(&record.Exec{LaunchID: id, StartNS: gpuBase + g.start, EndNS: gpuBase + g.end, Blocks: 4, Threads: 1024}),
						shim(&record.Window{LaunchID: id, StartNS: g.start - 50, EndNS: g.end + 50}))
					continue
				}
				l.Flags = record.LaunchUnprobed
				recs = append(recs, shim(l), shim(&record.Window{LaunchID: id, StartNS: g.start, EndNS: g.end}))
			}
			tr := winTr(true)
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, recs...)
			if got := expireSteps(tr, now); got != winSteps[0] {
				t.Fatalf("emitted at %v, want %v", got, winSteps[0])
			}
			for _, s := range index(tr.TakeTraces()).byName["k"] {
				if attr(s, "cuda.launch.id") != int64(2) {
					continue
				}
				if idle, wait := attr(s, "cuda.launch.stream_idle"), attr(s, "cuda.launch.host_wait"); idle != tc.idle || wait != tc.hostWait {
					t.Errorf("stream_idle %v host_wait %v, want %d and %d", idle, wait, tc.idle, tc.hostWait)
				}
				return
			}
			t.Fatal("no span of launch 2")
		})
	}
}

// coveragePoints returns the coverage by "pid/route": launches and seconds.
func coveragePoints(md pmetric.Metrics) (map[string]int64, map[string]float64) {
	n, secs := map[string]int64{}, map[string]float64{}
	sm := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range sm.Len() {
		m := sm.At(i)
		if m.Name() != MetricCoverageLaunches && m.Name() != MetricCoverageGPUTime {
			continue
		}
		for j := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(j)
			pid, _ := dp.Attributes().Get("process.pid")
			rt, _ := dp.Attributes().Get("gpuprobe.windows.route")
			k := fmt.Sprintf("%d/%s", pid.Int(), rt.Str())
			if m.Name() == MetricCoverageLaunches {
				n[k] = dp.IntValue()
			} else {
				secs[k] = dp.DoubleValue()
			}
		}
	}
	return n, secs
}

// TestCoverage: every emitted launch that ran counts once under the route
// of its exact device window, per process, with its GPU time (estimated
// from its kernel's mean when it has no exact window); a gone client's
// process is reported once more, then forgotten.
func TestCoverage(t *testing.T) {
	launch := func(id uint64, flags record.LaunchFlags, result uint32) rec {
		return shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: 10_000 * id, ReturnNS: 10_000*id + 100, Stream: uint64(id),
			Function: 0xf, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: flags, Result: result})
	}
	tr := winTr(true)
	tr.Connect(1, Peer{PID: 4242})
	now := time.Unix(1000, 0)
	handleAll(t, tr, now, windowsOn, shim(&record.KernelName{Function: 0xf, Name: "k"}),
		// 1: probes (4000 ns) and a driver window; 2, 3: a driver window
		// alone (1000, 3000 ns); 4: none (its wait expires); 5: failed.
		launch(1, 0, 0), shim(&record.Exec{LaunchID: 1, StartNS: gpuBase + 10_500, EndNS: gpuBase + 14_500, Blocks: 4, Threads: 1024}),
		shim(&record.Window{LaunchID: 1, StartNS: 10_400, EndNS: 14_600}),
		launch(2, record.LaunchUnprobed, 0), shim(&record.Window{LaunchID: 2, StartNS: 20_500, EndNS: 21_500}),
		launch(3, record.LaunchUnprobed, 0), shim(&record.Window{LaunchID: 3, StartNS: 30_500, EndNS: 33_500}),
		launch(4, record.LaunchUnprobed, 0), launch(5, record.LaunchUnprobed, 1))
	if got := expireSteps(tr, now); got != winSteps[3] {
		t.Fatalf("emitted at %v, want %v", got, winSteps[3])
	}
	n, secs := coveragePoints(tr.Metrics(now, nil))
	wantN := map[string]int64{"4242/none": 1, "4242/inline_ptx": 1, "4242/windows": 2, "4242/patched_sass": 0, "4242/graph": 0}
	// Launch 4's time is the kernel's mean of the three timed ones.
	wantS := map[string]float64{"4242/none": 8000e-9 / 3, "4242/inline_ptx": 4000e-9, "4242/windows": 4000e-9, "4242/patched_sass": 0, "4242/graph": 0}
	if fmt.Sprint(n) != fmt.Sprint(wantN) {
		t.Errorf("launches %v, want %v", n, wantN)
	}
	for k, w := range wantS {
		if g, ok := secs[k]; !ok || math.Abs(g-w) > 1e-12 {
			t.Errorf("gpu_time %s = %g, want %g", k, g, w)
		}
	}
	tr.Disconnect(1, now)
	if n, _ := coveragePoints(tr.Metrics(now, nil)); n["4242/windows"] != 2 {
		t.Errorf("after disconnect: %v, want the process reported once more", n)
	}
	if n, _ := coveragePoints(tr.Metrics(now, nil)); len(n) != 0 {
		t.Errorf("then: %v, want nothing", n)
	}
}

// TestWindowBounds: what a hostile client's window records can create
// stays bounded: graph launch calls (node entries), the remembered
// emitted launches, and the pending launches that wait for windows.
func TestWindowBounds(t *testing.T) {
	const calls = 20_000
	tr := newTr(Options{CompletionGrace: winGrace, LaunchTimeout: time.Hour, Windows: WindowOptions{Wait: time.Hour}, MaxPendingLaunches: 1000,
		Filter: mustFilter(t, "^keep")})
	now := time.Unix(1000, 0)
	recs := []rec{windowsOn, shim(&record.KernelName{Function: 0xa, Name: "keep"}), shim(&record.KernelName{Function: 0xb, Name: "drop"})}
	for i := range uint64(calls) {
		// Each call: 8 nodes of a filtered kernel, then one kept.
		for j := range uint64(9) {
			fn := uint64(0xb)
			if j == 8 {
				fn = 0xa
			}
			recs = append(recs, shim(&record.Launch{LaunchID: 1 + 9*i + j, PID: 42, TID: uint32(i % 7), EnqueueNS: 1000 + i, ReturnNS: 2000 + i,
				Stream: 7, Function: fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, API: record.APIGraphLaunch, Flags: record.LaunchUnprobed}))
		}
		recs = append(recs, shim(&record.Window{LaunchID: 1 + 9*i, StartNS: 5000, EndNS: 6000, NameHash: record.NameHash("drop"), Flags: record.WindowGraph}))
	}
	handleAll(t, tr, now, recs...)
	max := tr.launches.windows.groups.maxEntries()
	if e := tr.launches.windows.groups.entries; e > max || e == 0 {
		t.Errorf("%d node entries, want 1..%d", e, max)
	}
	if p := tr.Pending(); p > 1000 {
		t.Errorf("%d pending, want ≤ 1000", p)
	}
	if n := len(tr.launches.windows.recent.seen); n > maxRecent {
		t.Errorf("%d recent launches, want ≤ %d", n, maxRecent)
	}
	c := tr.Counters()
	if c.WindowsMissing == 0 || c.LaunchesEvicted == 0 {
		t.Errorf("counters %+v: want evictions counted as missing windows", c.WindowCounters)
	}
	tr.Disconnect(1, now)
	if e := tr.launches.windows.groups.entries; e != 0 {
		t.Errorf("%d node entries after the client left", e)
	}
}

func mustFilter(t *testing.T, include ...string) *kernelfilter.Filter {
	t.Helper()
	f, err := config.NewKernelFilter(config.KernelsConfig{Include: include})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWindowsOnPerClient: only the launches of clients whose windows are
// on wait, also for sources that share a slot of the answer cache, and a
// state change reaches the launches that wait.
func TestWindowsOnPerClient(t *testing.T) {
	tr := winTr(true)
	now := time.Unix(1000, 0)
	recs := []rec{{1, &record.WindowState{State: record.WindowsOn}}, {9, &record.WindowState{State: record.WindowsOn}},
		{9, &record.WindowState{State: record.WindowsUnavailable, Reason: record.WindowsReasonNoLibrary}},
		{17, &record.WindowState{State: record.WindowsOn}}}
	for _, src := range []uint32{1, 9, 17, 25} {
		recs = append(recs, rec{src, &record.Launch{LaunchID: 1, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Function: 0xf,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed}})
	}
	handleAll(t, tr, now, recs...)
	tr.Expire(now)
	tr.Expire(now.Add(winSteps[1]))
	if p := tr.Pending(); p != 2 {
		t.Fatalf("%d pending, want 2 (sources 1 and 17 wait)", p)
	}
	handleAll(t, tr, now, rec{17, &record.WindowState{State: record.WindowsOff}})
	tr.Expire(now.Add(winSteps[2]))
	if p := tr.Pending(); p != 1 {
		t.Fatalf("%d pending, want 1 (source 1 waits)", p)
	}
	tr.Expire(now.Add(winSteps[3]))
	if p, m := tr.Pending(), tr.Counters().WindowsMissing; p != 0 || m != 1 {
		t.Fatalf("%d pending, %d missing; want 0 and 1", p, m)
	}
}

// TestWindowWithoutCalibration: a launch its probes timed on a device with
// no calibration (the shim's calibration kernel got no reading) shows the
// driver's window instead of no window at all.
func TestWindowWithoutCalibration(t *testing.T) {
	const k = "_Z1kv"
	tr := winTr(true)
	now := time.Unix(1000, 0)
	// handleAll calibrates device 0 only: this launch runs on device 1.
	l := &record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
		Device: 1, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}}
	handleAll(t, tr, now, shim(&record.KernelName{Function: 0xf, Name: k}), windowsOn, shim(l),
		shim(&record.Exec{LaunchID: 9, StartNS: gpuBase + 10_600, EndNS: gpuBase + 90_600, Blocks: 4, Threads: 1024}),
		shim(&record.Window{LaunchID: 9, StartNS: 10_500, EndNS: 90_800, Device: 1, NameHash: record.NameHash(k), Correlation: 5}))
	expireSteps(tr, now)
	td := tr.TakeTraces()
	root := index(td).one(t, k)
	if got := phases(td, root)[SpanExecuting]; got != [2]uint64{10_500, 90_800} {
		t.Errorf("cuda.executing %v, want the driver's window [10500 90800]", got)
	}
}

// TestHandleRecovers: a panic while folding a record (here from a hook) is
// recovered: the record is counted invalid, Handle returns an
// *InternalError with the stack, and the translator goes on.
func TestHandleRecovers(t *testing.T) {
	tr := newTr(Options{Windows: WindowOptions{OnState: func(uint32, record.WindowState) { panic("hook") }}})
	tr.Connect(1, Peer{PID: 100})
	b := (&record.WindowState{TimeNS: 5, State: record.WindowsOn}).Append(nil)
	err := tr.Handle(1, b, time.Now())
	var ie *InternalError
	if !errors.As(err, &ie) || ie.Source != 1 || len(ie.Stack) == 0 || !strings.Contains(err.Error(), "hook") {
		t.Fatalf("Handle: %v, want an *InternalError from source 1 with a stack", err)
	}
	if c := tr.Counters(); c.RecordsInvalid != 1 || c.RecordsRead != 1 {
		t.Errorf("read %d, invalid %d: want 1 and 1", c.RecordsRead, c.RecordsInvalid)
	}
	b = (&record.WindowState{TimeNS: 6, State: record.WindowsOff, Reason: record.WindowsReasonConfig}).Append(nil)
	if err := tr.Handle(1, b, time.Now()); !errors.As(err, &ie) {
		t.Fatalf("the second record: %v, want the hook's panic again (the translator went on)", err)
	}
}

// TestNoWindowNotRemembered: launches the shim flagged NO_WINDOW (its
// windows paused by their rate cap) are not remembered for late windows,
// which none of them gets; a launch that missed its window is.
func TestNoWindowNotRemembered(t *testing.T) {
	tr := winTr(false)
	now := time.Unix(1000, 0)
	recs := []rec{windowsOn, shim(&record.KernelName{Function: 0xf, Name: "k"})}
	for id := uint64(1); id <= 100; id++ {
		recs = append(recs, shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: 1000 * id, ReturnNS: 1000*id + 10,
			Stream: 7, Function: 0xf, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
			Flags: record.LaunchUnprobed | record.LaunchNoWindow}))
	}
	recs = append(recs, shim(&record.Launch{LaunchID: 101, PID: 42, TID: 43, EnqueueNS: 200_000, ReturnNS: 200_010,
		Stream: 7, Function: 0xf, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed}))
	handleAll(t, tr, now, recs...)
	if got := expireSteps(tr, now); got != winSteps[3] {
		t.Fatalf("emitted at %v, want after the window wait", got)
	}
	if n := len(tr.launches.windows.recent.seen); n != 1 {
		t.Errorf("%d launches remembered for late windows, want 1 (the one that waited for its window)", n)
	}
}
