package gputime

import (
	"math"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// settleAll settles everything added (now far after the windows).
func settleAll(a *Attributor, ws []Window) map[uint32]float64 {
	var now int64
	for _, w := range ws {
		now = max(now, w.End)
	}
	for _, w := range ws {
		a.Add("g", w, now)
	}
	a.Settle(now + int64(a.o.Lag))
	got := map[uint32]float64{}
	for _, g := range a.Snapshot() {
		for _, p := range g.Procs {
			got[p.Proc] = p.Seconds * 1e3
		}
	}
	return got
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode Mode
		ws   []Window
		want map[uint32]float64 // ms
	}{
		{"alone", TimeSlicing, []Window{{1, 1, 0, 10 * ms}, {1, 1, 20 * ms, 25 * ms}}, map[uint32]float64{1: 15}},
		{"own streams overlap", TimeSlicing, []Window{{1, 1, 0, 10 * ms}, {1, 2, 5 * ms, 12 * ms}}, map[uint32]float64{1: 12}},
		{"equal without estimates", TimeSlicing, []Window{{1, 1, 0, 10 * ms}, {2, 2, 0, 10 * ms}}, map[uint32]float64{1: 5, 2: 5}},
		{"alone part is exact", TimeSlicing, []Window{{1, 1, 0, 10 * ms}, {2, 2, 5 * ms, 10 * ms}}, map[uint32]float64{1: 7.5, 2: 2.5}},
		// MPS: both ran at once on their SM shares: the overlap in halves.
		{"concurrent", Concurrent, []Window{{1, 1, 0, 10 * ms}, {2, 2, 4 * ms, 8 * ms}}, map[uint32]float64{1: 8, 2: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settleAll(New(Options{Mode: tc.mode}), tc.ws)
			for p, w := range tc.want {
				if math.Abs(got[p]-w) > 1e-6 {
					t.Errorf("proc %d: %.4f ms, want %.4f", p, got[p], w)
				}
			}
		})
	}
}

// TestSplitKnownDemand: process 2's kernel was seen alone at 2 ms, so
// of the 6 ms that both cover it gets 2 ms, the residual 4 go to 1.
func TestSplitKnownDemand(t *testing.T) {
	a := New(Options{})
	settleAll(a, []Window{{2, 7, 0, 2 * ms}})
	got := settleAll(a, []Window{{1, 1, 20_000 * ms, 20_010 * ms}, {2, 7, 20_004 * ms, 20_010 * ms}})
	if math.Abs(got[1]-(4+4)) > 1e-6 || math.Abs(got[2]-(2+2)) > 1e-6 {
		t.Fatalf("got %v, want 1: 8 ms, 2: 4 ms (cumulative)", got)
	}
}

// TestHostile: a client's bogus windows cannot take what another had
// alone, nor take an estimated process below its equal share of their
// overlap (nor below its demand, when that is less), nor exceed the
// union; future windows are clipped to now.
func TestHostile(t *testing.T) {
	a := New(Options{})
	// The honest process learns its 10 ms kernel; the liar a 10 s one.
	settleAll(a, []Window{{1, 1, 0, 10 * ms}, {66, 9, 100 * ms, 10_100 * ms}})
	// The liar covers two honest windows with a 1 s one: the first has
	// 5 ms alone, the second none.
	got := settleAll(a, []Window{{66, 9, 20_000 * ms, 21_000 * ms},
		{1, 1, 19_999 * ms, 20_009 * ms}, {1, 1, 20_500 * ms, 20_510 * ms}})
	honest, liar := got[1]-10, got[66]-10_000
	if honest < 1+4.5+5-1e-6 { // the first's 1 ms alone and half its 9 ms shared, half the second's 10
		t.Errorf("honest process got %.3f ms, want ≥ 10.5", honest)
	}
	if liar+honest > 1001+1e-6 {
		t.Errorf("liar %.3f + honest %.3f ms exceed the 1001 ms union", liar, honest)
	}
	b := New(Options{})
	b.Add("g", Window{1, 1, 0, 1 << 62}, 100*ms)
	if c := b.Counters(); c.Clipped == 0 {
		t.Errorf("a window ending in the future was not clipped: %+v", c)
	}
}

// TestLateAndBounds: a window before the watermark is cut and counted; a
// client over its share merges into its latest window, and the GPU's
// buffer never exceeds MaxWindows.
func TestLateAndBounds(t *testing.T) {
	a := New(Options{MaxWindows: 128})
	a.Add("g", Window{1, 1, 0, 10 * ms}, 3000*ms)
	a.Settle(3000 * ms) // watermark 1 s
	a.Add("g", Window{2, 1, 500 * ms, 1500 * ms}, 3000*ms)
	if c := a.Counters(); c.LateNS != 500*ms {
		t.Errorf("late ns %d, want %d", c.LateNS, 500*ms)
	}
	for i := range int64(1000) {
		a.Add("g", Window{3, 1, 2000*ms + i*1000, 2000*ms + i*1000 + 500}, 3000*ms)
	}
	if n := a.gpus["g"].nwin; n > 128 {
		t.Errorf("%d windows buffered, bound 128", n)
	}
	if c := a.Counters(); c.Merged == 0 {
		t.Errorf("no window merged: %+v", c)
	}
}

// TestNothingLost: what is buffered when the processes go or the
// collector stops is attributed, not left behind the lag; what arrives
// after it is counted as cut.
func TestNothingLost(t *testing.T) {
	sum := func(a *Attributor) float64 {
		var s float64
		for _, g := range a.Snapshot() {
			for _, p := range g.Procs {
				s += p.Seconds * 1e3
			}
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		finish func(a *Attributor, now int64)
	}{
		// Both processes gone: their GPU settles to their last window's end.
		{"all gone", func(a *Attributor, now int64) { a.Forget(1); a.Forget(2); a.Settle(now) }},
		// The collector stops with both still connected.
		{"flush", func(a *Attributor, now int64) { a.Flush(now) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Options{})
			now := 10_000 * ms
			a.Add("g", Window{1, 1, now - 30*ms, now - 20*ms}, now)
			a.Add("g", Window{2, 2, now - 15*ms, now - 5*ms}, now)
			a.Settle(now)
			if got := sum(a); got != 0 {
				t.Fatalf("%.3f ms settled within the lag", got)
			}
			tc.finish(a, now)
			if got := sum(a); math.Abs(got-20) > 1e-6 {
				t.Errorf("attributed %.3f ms, want 20", got)
			}
		})
	}
	a := New(Options{})
	a.Add("g", Window{1, 1, 0, 10 * ms}, 10*ms)
	a.Forget(2) // another process gone: 1 is not, the lag holds
	a.Settle(10 * ms)
	if got := sum(a); got != 0 {
		t.Errorf("%.3f ms settled with a process still there", got)
	}
	a.Flush(10 * ms)
	a.Add("g", Window{1, 1, 5 * ms, 12 * ms}, 12*ms)
	a.Add("g", Window{1, 1, 20 * ms, 30 * ms}, 25*ms)
	if c := a.Counters(); c.LateNS != 5*ms || c.ClippedNS != 5*ms || c.CutNS() != 10*ms {
		t.Errorf("counters %+v, want 5 ms late, 5 ms clipped", c)
	}
}
