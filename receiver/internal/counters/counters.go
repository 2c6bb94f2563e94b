// Package counters joins one GPU's hardware-counter samples (CUPTI PM
// sampling, gpuprobe-counters) to the kernel windows of every process on
// that GPU: per launch and per (process, kernel name), each metric's mean
// over the launch's window weighted by time.
//
// A sample is the whole device's: its values cover every kernel running
// during it. A sample's time is cut at the window boundaries inside it,
// and each piece goes to the windows running then, split equally when
// several run at once (what a round-robin scheduler gives contexts that
// all have work; package gputime models time-sliced sharing further).
// That attributed time weighs the sample's values in each window's mean,
// so a sample is never counted twice: the attributed time of all windows
// plus the idle time (no window) is the samples' total. Where windows
// overlap, the values are the device's, shared by the overlapping
// kernels, not each kernel's own; the overlapped time says how much of a
// launch, or of a kernel's total, that is.
//
// A value that is not a number (a ratio over an idle sample: occupancy of
// no active cycles) is left out of its metric's mean, so each metric has
// its own weight: the attributed time during which it had a value.
package counters

import (
	"fmt"
	"math"
	"sort"
)

// Sample is one PM sample of a GPU: [Start, End) in ns on the windows'
// clock, one value per metric.
type Sample struct {
	Start, End uint64
	Values     []float64
}

// Window is one kernel launch's device window on the GPU, [Start, End)
// in ns.
type Window struct {
	PID        uint32
	Kernel     string
	LaunchID   uint64
	Start, End uint64
}

// Launch is one window's counters.
type Launch struct {
	Window Window
	// Values is each metric's mean over the window, weighted by
	// attributed time; nil when no sample covered the window, NaN for a
	// metric with no value over it.
	Values []float64
	// Weights is, per metric, the attributed time (ns) during which it
	// had a value: Attributed unless some samples had none.
	Weights []float64
	// Sampled is the window's time covered by samples (ns).
	Sampled uint64
	// Attributed is the sample time given to this window (ns): Sampled,
	// less the shares other windows running at the same time took.
	Attributed float64
	// Overlapped is the window's sampled time during which another
	// window also ran (ns).
	Overlapped uint64
}

// Key names one kernel of one process.
type Key struct {
	PID    uint32
	Kernel string
}

// Kernel is the aggregate of one process's launches of one kernel.
type Kernel struct {
	Launches   int
	Values     []float64 // weighted by attributed time; nil when none sampled
	Weights    []float64 // per metric, the attributed time it had a value (ns)
	Sampled    uint64
	Attributed float64
	Overlapped uint64
}

// Result is a join of one GPU's samples and windows.
type Result struct {
	Launches []Launch // in the order of the windows given
	Kernels  map[Key]*Kernel
	// Idle is the sample time during which no window ran (ns).
	Idle uint64
	// Total is the time the samples cover (ns).
	Total uint64
}

// Join joins samples (each with metrics values) to windows. Samples must
// not overlap each other; neither need be sorted.
func Join(samples []Sample, windows []Window, metrics int) (*Result, error) {
	if err := validate(samples, windows, metrics); err != nil {
		return nil, err
	}
	ss := append([]Sample(nil), samples...)
	sort.Slice(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })
	for i := 1; i < len(ss); i++ {
		if ss[i].Start < ss[i-1].End {
			return nil, fmt.Errorf("counters: samples [%d, %d) and [%d, %d) overlap", ss[i-1].Start, ss[i-1].End, ss[i].Start, ss[i].End)
		}
	}
	order := make([]int, len(windows))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return windows[order[a]].Start < windows[order[b]].Start })

	j := newJoiner(windows, metrics)
	next := 0
	var active []int
	for _, s := range ss {
		for next < len(order) && windows[order[next]].Start < s.End {
			active = append(active, order[next])
			next++
		}
		active = j.prune(active, s.Start)
		j.sample(s, active)
	}
	return j.result(), nil
}

func validate(samples []Sample, windows []Window, metrics int) error {
	for i, s := range samples {
		if s.End < s.Start {
			return fmt.Errorf("counters: sample %d ends (%d) before it starts (%d)", i, s.End, s.Start)
		}
		if len(s.Values) != metrics {
			return fmt.Errorf("counters: sample %d has %d values, want %d metrics", i, len(s.Values), metrics)
		}
	}
	for i, w := range windows {
		if w.End < w.Start {
			return fmt.Errorf("counters: window %d (%s, launch %d) ends (%d) before it starts (%d)", i, w.Kernel, w.LaunchID, w.End, w.Start)
		}
	}
	return nil
}

// joiner accumulates, per window, the weighted sums of each metric.
type joiner struct {
	w       []Window
	sums    [][]float64
	weights [][]float64
	out     []Launch
	idle    uint64
	total   uint64
	metrics int
}

func newJoiner(windows []Window, metrics int) *joiner {
	j := &joiner{w: windows, sums: make([][]float64, len(windows)), weights: make([][]float64, len(windows)),
		out: make([]Launch, len(windows)), metrics: metrics}
	for i := range windows {
		j.out[i].Window = windows[i]
	}
	return j
}

// prune drops the windows that end at or before t: no later sample (they
// start at t or after) can overlap them.
func (j *joiner) prune(active []int, t uint64) []int {
	kept := active[:0]
	for _, i := range active {
		if j.w[i].End > t {
			kept = append(kept, i)
		}
	}
	return kept
}

// sample cuts s at the boundaries of the active windows inside it and
// gives each piece to the windows running during it.
func (j *joiner) sample(s Sample, active []int) {
	j.total += s.End - s.Start
	cuts := []uint64{s.Start, s.End}
	for _, i := range active {
		for _, t := range []uint64{j.w[i].Start, j.w[i].End} {
			if t > s.Start && t < s.End {
				cuts = append(cuts, t)
			}
		}
	}
	sort.Slice(cuts, func(a, b int) bool { return cuts[a] < cuts[b] })
	running := make([]int, 0, len(active))
	for c := 1; c < len(cuts); c++ {
		a, b := cuts[c-1], cuts[c]
		if b == a {
			continue
		}
		running = running[:0]
		for _, i := range active {
			if j.w[i].Start <= a && j.w[i].End >= b {
				running = append(running, i)
			}
		}
		j.piece(s, b-a, running)
	}
}

// piece gives d ns of sample s to the windows running, in equal shares.
func (j *joiner) piece(s Sample, d uint64, running []int) {
	if len(running) == 0 {
		j.idle += d
		return
	}
	share := float64(d) / float64(len(running))
	for _, i := range running {
		l := &j.out[i]
		l.Sampled += d
		l.Attributed += share
		if len(running) > 1 {
			l.Overlapped += d
		}
		if j.sums[i] == nil {
			j.sums[i], j.weights[i] = make([]float64, j.metrics), make([]float64, j.metrics)
		}
		for k, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			j.sums[i][k] += v * share
			j.weights[i][k] += share
		}
	}
}

// result turns the sums into means, per launch and per kernel.
func (j *joiner) result() *Result {
	r := &Result{Launches: j.out, Kernels: map[Key]*Kernel{}, Idle: j.idle, Total: j.total}
	ksums, kweights := map[Key][]float64{}, map[Key][]float64{}
	for i := range j.out {
		l := &j.out[i]
		key := Key{l.Window.PID, l.Window.Kernel}
		k := r.Kernels[key]
		if k == nil {
			k = &Kernel{}
			r.Kernels[key] = k
		}
		k.Launches++
		if l.Attributed == 0 {
			continue
		}
		l.Values, l.Weights = mean(j.sums[i], j.weights[i]), j.weights[i]
		k.Sampled += l.Sampled
		k.Attributed += l.Attributed
		k.Overlapped += l.Overlapped
		if ksums[key] == nil {
			ksums[key], kweights[key] = make([]float64, j.metrics), make([]float64, j.metrics)
		}
		for m, v := range j.sums[i] {
			ksums[key][m] += v
			kweights[key][m] += j.weights[i][m]
		}
	}
	for key, s := range ksums {
		r.Kernels[key].Values, r.Kernels[key].Weights = mean(s, kweights[key]), kweights[key]
	}
	return r
}

// mean is each sum over its weight, NaN where the weight is 0.
func mean(sums, weights []float64) []float64 {
	out := make([]float64, len(sums))
	for i, s := range sums {
		out[i] = math.NaN()
		if weights[i] > 0 {
			out[i] = s / weights[i]
		}
	}
	return out
}
