package translate

import (
	"math"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// TestWholeGraphWindows: a graph launch timed whole gives each node of its
// call the call's window, marked graph: the nodes are emitted at once,
// their spans have no executing phase of their own and their kernels no
// duration, and their GPU time is their share of the window; a window that
// began before the call, one that comes again for an emitted call and an
// untimed one are told apart.
func TestWholeGraphWindows(t *testing.T) {
	kernels := []struct {
		fn   uint64
		name string
	}{{0xa, "_Z2kav"}, {0xb, "_Z2kbv"}, {0xa, "_Z2kav"}}
	enq := func(r int) uint64 { return 10_000 + uint64(r)*1_000_000 }
	id := func(r, i int) uint64 { return 100 + 10*uint64(r) + uint64(i) }
	call := func(r int) []rec {
		var out []rec
		for i, k := range kernels {
			out = append(out, shim(&record.Launch{LaunchID: id(r, i), PID: 42, TID: 43, EnqueueNS: enq(r), ReturnNS: enq(r) + 50,
				Stream: 7, Function: k.fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
				API: record.APIGraphLaunch, Flags: record.LaunchUnprobed}))
		}
		return out
	}
	whole := func(r int, start, end uint64, flags record.WindowFlags) rec {
		return shim(&record.Window{LaunchID: id(r, 0), StartNS: start, EndNS: end,
			Flags: record.WindowGraph | record.WindowGraphExec | flags})
	}
	tr := winTr(false)
	tr.Connect(1, Peer{PID: 4242})
	now := time.Unix(1000, 0)
	recs := []rec{windowsOn, shim(&record.KernelName{Function: 0xa, Name: "_Z2kav"}), shim(&record.KernelName{Function: 0xb, Name: "_Z2kbv"})}
	recs = append(recs, call(0)...)
	recs = append(recs, call(1)...)
	recs = append(recs,
		whole(1, enq(1)-10, enq(1)+3000, 0),   // began before call 1: an earlier call's
		whole(0, enq(0)+1000, enq(0)+7000, 0), // call 0's
		whole(0, enq(0)+1000, enq(0)+7000, 0), // again, call 0 emitted
		whole(1, 0, 0, record.WindowUntimed),  // call 1, untimed
		whole(9, 5, 6, 0),                     // no such call
	)
	handleAll(t, tr, now, recs...)
	if got := expireSteps(tr, now); got != winSteps[0] {
		t.Fatalf("emitted at %v, want at once", got)
	}
	td := tr.TakeTraces()
	x := index(td)
	spans := 0
	for _, name := range []string{"_Z2kav", "_Z2kbv"} {
		for _, s := range x.byName[name] {
			spans++
			if p, ok := phases(td, s)[SpanExecuting]; ok {
				t.Errorf("launch %v has an executing phase %v: a whole graph's window is not its kernel's", attr(s, "cuda.launch.id"), p)
			}
		}
	}
	if spans != 6 {
		t.Errorf("%d launch spans, want 6", spans)
	}
	md := tr.Metrics(now, nil)
	if s := execSum(md); s != 0 {
		t.Errorf("kernel execution duration sum %g, want none from whole-graph windows", s)
	}
	n, secs := coveragePoints(md)
	if n["4242/graph"] != 3 || n["4242/none"] != 3 || n["4242/windows"] != 0 {
		t.Errorf("coverage launches %v, want call 0's 3 nodes under graph, call 1's (untimed) under none", n)
	}
	if g := secs["4242/graph"]; math.Abs(g-6000e-9) > 1e-15 {
		t.Errorf("graph route GPU time %g s, want the call's 6000 ns window shared by its nodes", g)
	}
	c := tr.Counters().WindowCounters
	want := WindowCounters{WindowsRead: 5, WindowsMatched: 2, WindowsWhole: 2, WindowsLate: 2, WindowsUnmatched: 1, WindowsUntimed: 3, WindowStates: 1}
	want.UntimedByAPI[record.APIGraphLaunch] = 3
	if c != want {
		t.Errorf("counters %+v\nwant     %+v", c, want)
	}
	if n := tr.launches.windows.groups.entries; n != 0 {
		t.Errorf("%d node entries left", n)
	}
}
