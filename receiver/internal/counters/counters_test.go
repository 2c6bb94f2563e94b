package counters

import (
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func nearAll(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestJoinLaunches: each launch's values, sampled, attributed and
// overlapped time, one case per way samples and windows meet.
func TestJoinLaunches(t *testing.T) {
	type want struct {
		values     []float64
		sampled    uint64
		attributed float64
		overlapped uint64
	}
	for _, c := range []struct {
		name    string
		samples []Sample
		windows []Window
		want    []want
		idle    uint64
	}{{
		name:    "window inside one sample",
		samples: []Sample{{0, 100, []float64{5, 50}}},
		windows: []Window{{PID: 1, Kernel: "k", Start: 20, End: 60}},
		want:    []want{{[]float64{5, 50}, 40, 40, 0}},
		idle:    60,
	}, {
		name:    "window across two samples: weighted by the time in each",
		samples: []Sample{{0, 100, []float64{10}}, {100, 200, []float64{40}}},
		windows: []Window{{PID: 1, Kernel: "k", Start: 50, End: 200}},
		// 50 ns at 10, 100 ns at 40.
		want: []want{{[]float64{30}, 150, 150, 0}},
		idle: 50,
	}, {
		name:    "back-to-back windows in one sample share its values, not its time",
		samples: []Sample{{0, 100, []float64{7}}},
		windows: []Window{{PID: 1, Kernel: "a", Start: 0, End: 30}, {PID: 1, Kernel: "b", Start: 30, End: 100}},
		want:    []want{{[]float64{7}, 30, 30, 0}, {[]float64{7}, 70, 70, 0}},
	}, {
		name: "two processes overlapping: the overlap split equally and reported",
		samples: []Sample{
			{0, 100, []float64{10}},
			{100, 200, []float64{30}},
			{200, 300, []float64{20}},
		},
		windows: []Window{
			{PID: 1, Kernel: "a", Start: 0, End: 200},
			{PID: 2, Kernel: "b", Start: 100, End: 300},
		},
		// a: 100 ns alone at 10, 50 ns (half of 100) at 30 -> (1000+1500)/150.
		// b: 50 ns at 30, 100 ns alone at 20 -> (1500+2000)/150.
		want: []want{
			{[]float64{2500.0 / 150}, 200, 150, 100},
			{[]float64{3500.0 / 150}, 200, 150, 100},
		},
	}, {
		name:    "three-way overlap inside one sample",
		samples: []Sample{{0, 90, []float64{9}}},
		windows: []Window{{PID: 1, Kernel: "a", Start: 0, End: 90}, {PID: 2, Kernel: "b", Start: 0, End: 90}, {PID: 3, Kernel: "c", Start: 0, End: 90}},
		want:    []want{{[]float64{9}, 90, 30, 90}, {[]float64{9}, 90, 30, 90}, {[]float64{9}, 90, 30, 90}},
	}, {
		name:    "window in a gap between samples: no values",
		samples: []Sample{{0, 100, []float64{1}}, {300, 400, []float64{1}}},
		windows: []Window{{PID: 1, Kernel: "k", Start: 150, End: 250}},
		want:    []want{{nil, 0, 0, 0}},
		idle:    200,
	}, {
		name:    "samples out of order, window partly sampled",
		samples: []Sample{{200, 300, []float64{4}}, {100, 200, []float64{2}}},
		windows: []Window{{PID: 1, Kernel: "k", Start: 50, End: 250}},
		// 100 ns at 2, 50 ns at 4.
		want: []want{{[]float64{8.0 / 3}, 150, 150, 0}},
		idle: 50,
	}, {
		name:    "zero-length window",
		samples: []Sample{{0, 100, []float64{3}}},
		windows: []Window{{PID: 1, Kernel: "k", Start: 40, End: 40}},
		want:    []want{{nil, 0, 0, 0}},
		idle:    100,
	}} {
		t.Run(c.name, func(t *testing.T) {
			metrics := len(c.samples[0].Values)
			r, err := Join(c.samples, c.windows, metrics)
			if err != nil {
				t.Fatal(err)
			}
			if r.Idle != c.idle {
				t.Errorf("idle %d, want %d", r.Idle, c.idle)
			}
			for i, w := range c.want {
				l := r.Launches[i]
				if l.Window != c.windows[i] || !nearAll(l.Values, w.values) || (l.Values == nil) != (w.values == nil) ||
					l.Sampled != w.sampled || !near(l.Attributed, w.attributed) || l.Overlapped != w.overlapped {
					t.Errorf("launch %d: %+v, want values %v sampled %d attributed %v overlapped %d",
						i, l, w.values, w.sampled, w.attributed, w.overlapped)
				}
			}
		})
	}
}

// TestJoinKernels: a kernel's aggregate weighs its launches by their
// attributed time, and counts launches that got no sample.
func TestJoinKernels(t *testing.T) {
	samples := []Sample{{0, 100, []float64{10, 1}}, {100, 200, []float64{40, 2}}, {200, 300, []float64{0, 0}}}
	windows := []Window{
		{PID: 7, Kernel: "gemm", LaunchID: 1, Start: 0, End: 100},   // 100 ns at (10, 1)
		{PID: 7, Kernel: "gemm", LaunchID: 2, Start: 150, End: 200}, // 50 ns at (40, 2)
		{PID: 7, Kernel: "gemm", LaunchID: 3, Start: 400, End: 500}, // unsampled
		{PID: 8, Kernel: "gemm", LaunchID: 1, Start: 150, End: 200}, // overlaps launch 2
	}
	r, err := Join(samples, windows, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Launch 2 shares its 50 ns with PID 8: 25 ns attributed.
	g := r.Kernels[Key{7, "gemm"}]
	wantV := []float64{(10*100 + 40*25) / 125.0, (1*100 + 2*25) / 125.0}
	if g == nil || g.Launches != 3 || !nearAll(g.Values, wantV) || g.Sampled != 150 || !near(g.Attributed, 125) || g.Overlapped != 50 {
		t.Errorf("pid 7 gemm: %+v, want 3 launches, values %v, sampled 150, attributed 125, overlapped 50", g, wantV)
	}
	o := r.Kernels[Key{8, "gemm"}]
	if o == nil || o.Launches != 1 || !nearAll(o.Values, []float64{40, 2}) || !near(o.Attributed, 25) || o.Overlapped != 50 {
		t.Errorf("pid 8 gemm: %+v, want one launch at (40, 2), attributed 25, overlapped 50", o)
	}
	if len(r.Kernels) != 2 {
		t.Errorf("kernels %v, want two keys", reflect.ValueOf(r.Kernels).MapKeys())
	}
}

// TestJoinConserves: over random windows (overlapping, nested, outside
// the samples) every sample ns goes either to windows or to idle, once,
// and no launch is attributed more than it was sampled.
func TestJoinConserves(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		var samples []Sample
		t0 := uint64(0)
		for i := 0; i < 40; i++ {
			d := uint64(rng.Intn(100) + 1)
			samples = append(samples, Sample{t0, t0 + d, []float64{rng.Float64()}})
			t0 += d + uint64(rng.Intn(3)*10) // some gaps
		}
		var windows []Window
		for i := 0; i < 30; i++ {
			s := uint64(rng.Intn(int(t0) + 200))
			windows = append(windows, Window{PID: uint32(rng.Intn(3)), Kernel: "k", Start: s, End: s + uint64(rng.Intn(400))})
		}
		r, err := Join(samples, windows, 1)
		if err != nil {
			t.Fatal(err)
		}
		var att float64
		var want uint64
		for _, s := range samples {
			want += s.End - s.Start
		}
		for _, l := range r.Launches {
			att += l.Attributed
			if l.Attributed > float64(l.Sampled)+1e-9 || l.Overlapped > l.Sampled {
				t.Fatalf("round %d: launch %+v attributed or overlapped more than sampled", round, l)
			}
			for _, v := range l.Values {
				if v < 0 || v > 1 {
					t.Fatalf("round %d: launch %+v: a mean outside the samples' range [0, 1)", round, l)
				}
			}
		}
		if r.Total != want || !near(att+float64(r.Idle), float64(want)) {
			t.Fatalf("round %d: attributed %v + idle %d = %v, want the samples' %d (total %d)", round, att, r.Idle, att+float64(r.Idle), want, r.Total)
		}
	}
}

// TestJoinRejects: malformed input is an error naming what is wrong.
func TestJoinRejects(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []Sample
		windows []Window
		msg     string
	}{
		{"sample backwards", []Sample{{10, 5, []float64{1}}}, nil, "sample 0 ends (5) before it starts (10)"},
		{"values missing", []Sample{{0, 5, nil}}, nil, "sample 0 has 0 values, want 1 metrics"},
		{"window backwards", []Sample{{0, 5, []float64{1}}}, []Window{{Kernel: "k", LaunchID: 3, Start: 9, End: 2}}, "window 0 (k, launch 3) ends (2) before it starts (9)"},
		{"samples overlap", []Sample{{0, 10, []float64{1}}, {5, 15, []float64{1}}}, nil, "samples [0, 10) and [5, 15) overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Join(c.samples, c.windows, 1); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %v, want %q", err, c.msg)
			}
		})
	}
}

// TestJoinNaN: a metric's value that is not a number (occupancy over an
// idle sample) is left out of that metric's mean and weight only.
func TestJoinNaN(t *testing.T) {
	samples := []Sample{{0, 100, []float64{10, math.NaN()}}, {100, 200, []float64{30, 5}}}
	windows := []Window{{PID: 1, Kernel: "k", Start: 50, End: 200}}
	r, err := Join(samples, windows, 2)
	if err != nil {
		t.Fatal(err)
	}
	l, k := r.Launches[0], r.Kernels[Key{1, "k"}]
	for _, got := range []struct{ values, weights []float64 }{{l.Values, l.Weights}, {k.Values, k.Weights}} {
		if !nearAll(got.values, []float64{(50*10 + 100*30) / 150.0, 5}) || !nearAll(got.weights, []float64{150, 100}) {
			t.Errorf("values %v weights %v: want metric 1's NaN half left out", got.values, got.weights)
		}
	}
	r, _ = Join([]Sample{{0, 100, []float64{math.NaN()}}}, windows[:1], 1)
	if v := r.Launches[0].Values[0]; !math.IsNaN(v) || r.Launches[0].Weights[0] != 0 {
		t.Errorf("only NaN: value %v weight %v, want NaN and 0", v, r.Launches[0].Weights[0])
	}
}
