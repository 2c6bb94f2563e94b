package gputime

import (
	"slices"
	"time"
)

// Mode is the GPU scheduling model that splits overlapped time.
type Mode uint8

// Scheduling models.
const (
	TimeSlicing Mode = iota // one context at a time (the default of a shared GPU)
	Concurrent              // MPS or green contexts: kernels of several processes at once
)

// String is the mode's configuration value.
func (m Mode) String() string {
	if m == Concurrent {
		return "concurrent"
	}
	return "time_slicing"
}

// Defaults of Options' zero fields.
const (
	DefaultLag        = 2 * time.Second
	DefaultMaxWindow  = time.Minute
	DefaultMaxWindows = 1 << 16
	DefaultMaxGPUs    = 64
	DefaultMaxProcs   = 1024
	DefaultMaxKernels = 256
	minShare          = 64 // buffered windows a process may always hold on a GPU
)

// Options configure an Attributor; zero fields take the defaults above.
type Options struct {
	Mode       Mode
	Lag        time.Duration // how long windows are held before they are settled
	MaxWindow  time.Duration // the longest window believed; longer ones keep their last MaxWindow
	MaxWindows int           // buffered windows per GPU, shared among its processes
	MaxGPUs    int           // GPUs tracked
	MaxProcs   int           // processes per GPU
	MaxKernels int           // kernels per process with their own estimate and total
}

func (o *Options) defaults() {
	if o.Lag <= 0 {
		o.Lag = DefaultLag
	}
	if o.MaxWindow <= 0 {
		o.MaxWindow = DefaultMaxWindow
	}
	if o.MaxWindows <= 0 {
		o.MaxWindows = DefaultMaxWindows
	}
	if o.MaxGPUs <= 0 {
		o.MaxGPUs = DefaultMaxGPUs
	}
	if o.MaxProcs <= 0 {
		o.MaxProcs = DefaultMaxProcs
	}
	if o.MaxKernels <= 0 {
		o.MaxKernels = DefaultMaxKernels
	}
}

// Window is one kernel's device window on a GPU, in nanoseconds of the
// collector's clock (all processes' windows on one clock).
type Window struct {
	Proc       uint32 // the process it is charged to
	Kernel     uint32 // its kernel (record.NameHash); 0: unknown
	Start, End int64
}

// Counters count what the Attributor did not take as it came.
type Counters struct {
	Windows     uint64 // windows added
	LateWindows uint64 // windows wholly before the watermark: dropped
	LateNS      int64  // nanoseconds cut off windows before the watermark
	Clipped     uint64 // windows ending in the future or longer than MaxWindow, clipped
	ClippedNS   int64  // nanoseconds clipped off them
	Merged      uint64 // windows merged into their process's latest (over its share)
	Refused     uint64 // windows of a GPU or process beyond MaxGPUs / MaxProcs
	RefusedNS   int64  // nanoseconds of those windows
}

// CutNS is the window time never attributed: late parts, clipped parts
// and refused windows (merging covers the gaps it fills, so it loses
// nothing).
func (c Counters) CutNS() int64 { return c.LateNS + c.ClippedNS + c.RefusedNS }

// win is a buffered window (or a part of one, or several merged).
type win struct {
	start, end int64
	orig       int64  // length of the window it is a part of (learning needs whole ones)
	kernel     uint32 // 0: unknown or merged
}

// proc is one process on one GPU: its buffered windows, solo estimates
// and totals.
type proc struct {
	pend    []win
	est     map[uint32]float64 // kernel → solo duration (ns), exponential average
	ns      float64            // attributed, cumulative
	spanNS  float64            // attributed since the last Snapshot
	kernels map[uint32]float64 // kernel → attributed ns, cumulative (≤ MaxKernels, the rest under 0)
	gone    bool
}

// gpu is one physical GPU (or MIG instance): its processes and totals.
type gpu struct {
	settled   int64 // the watermark settled up to (0: none yet)
	spanFrom  int64 // start of the span since the last Snapshot (0: none yet)
	busyNS    float64
	spanBusy  float64
	procs     map[uint32]*proc
	nwin      int
	lastTaken int64
}

// Attributor attributes the windows of each GPU's processes. It is not
// safe for concurrent use.
type Attributor struct {
	o        Options
	gpus     map[string]*gpu
	counters Counters
	scratch  batch
}

// New returns an Attributor with options o.
func New(o Options) *Attributor {
	o.defaults()
	return &Attributor{o: o, gpus: map[string]*gpu{}}
}

// Counters returns the counters so far.
func (a *Attributor) Counters() Counters { return a.counters }

// Add buffers window w of GPU id, arrived at now (the collector's clock).
func (a *Attributor) Add(id string, w Window, now int64) {
	a.counters.Windows++
	if w.End > now {
		a.counters.ClippedNS += w.End - max(now, w.Start)
		w.End = now
		a.counters.Clipped++
	}
	if w.End-w.Start > int64(a.o.MaxWindow) {
		a.counters.ClippedNS += w.End - int64(a.o.MaxWindow) - w.Start
		w.Start = w.End - int64(a.o.MaxWindow)
		a.counters.Clipped++
	}
	if w.End <= w.Start {
		return
	}
	orig := w.End - w.Start
	g := a.gpus[id]
	if g == nil {
		if len(a.gpus) >= a.o.MaxGPUs {
			a.counters.Refused++
			a.counters.RefusedNS += orig
			return
		}
		g = &gpu{procs: map[uint32]*proc{}}
		a.gpus[id] = g
	}
	if w.Start < g.settled {
		if w.End <= g.settled {
			a.counters.LateWindows++
			a.counters.LateNS += w.End - w.Start
			return
		}
		a.counters.LateNS += g.settled - w.Start
		w.Start = g.settled
	}
	p := g.procs[w.Proc]
	if p == nil {
		if len(g.procs) >= a.o.MaxProcs {
			a.counters.Refused++
			a.counters.RefusedNS += w.End - w.Start
			return
		}
		p = &proc{est: map[uint32]float64{}, kernels: map[uint32]float64{}}
		g.procs[w.Proc] = p
	}
	p.gone = false
	nw := win{start: w.Start, end: w.End, orig: orig, kernel: w.Kernel}
	share := max(minShare, a.o.MaxWindows/len(g.procs))
	if len(p.pend) > 0 && (len(p.pend) >= share || g.nwin >= a.o.MaxWindows) {
		last := &p.pend[len(p.pend)-1]
		last.start, last.end = min(last.start, nw.start), max(last.end, nw.end)
		last.orig, last.kernel = 0, 0
		a.counters.Merged++
		return
	}
	p.pend = append(p.pend, nw)
	g.nwin++
}

// Forget marks process pid gone on every GPU: its totals go after the
// next Snapshot that finds no window of it buffered.
func (a *Attributor) Forget(pid uint32) {
	for _, g := range a.gpus {
		if p := g.procs[pid]; p != nil {
			p.gone = true
		}
	}
}

// Settle attributes every GPU's windows before the watermark now − Lag;
// a GPU whose processes are all gone (their windows all in) is settled to
// the end of their last window, so that it counts without waiting for the
// lag (a process that comes meanwhile has windows after that, but for
// one already running when it connected, whose early part is then late).
func (a *Attributor) Settle(now int64) {
	for _, g := range a.gpus {
		w := now - int64(a.o.Lag)
		if g.allGone() {
			w = max(w, g.lastEnd())
		}
		if w > g.settled {
			a.settle(g, w)
		}
	}
}

// Flush attributes every window buffered, as of now (windows are clipped
// to their arrival, so none lies after it): the collector's shutdown,
// whose last metrics point then has all the time of its processes.
// Windows that come later are cut as late and counted.
func (a *Attributor) Flush(now int64) {
	for _, g := range a.gpus {
		if now > g.settled {
			a.settle(g, now)
		}
	}
}

// lastEnd is the end of g's latest buffered window (0: none).
func (g *gpu) lastEnd() int64 {
	var e int64
	for _, p := range g.procs {
		for _, x := range p.pend {
			e = max(e, x.end)
		}
	}
	return e
}

// allGone reports whether g has processes and all are gone.
func (g *gpu) allGone() bool {
	for _, p := range g.procs {
		if !p.gone {
			return false
		}
	}
	return len(g.procs) > 0
}

// settle attributes g's buffered windows (parts) before w, and keeps
// their parts after it.
func (a *Attributor) settle(g *gpu, w int64) {
	b := &a.scratch
	b.reset()
	from := w
	for pid, p := range g.procs {
		keep := p.pend[:0]
		for _, x := range p.pend {
			if x.start >= w {
				keep = append(keep, x)
				continue
			}
			part := x
			if x.end > w {
				part.end = w
				rest := x
				rest.start = w
				keep = append(keep, rest)
			}
			from = min(from, part.start)
			b.add(pid, p, part)
		}
		g.nwin -= len(p.pend) - len(keep)
		p.pend = keep
	}
	if g.spanFrom == 0 {
		g.spanFrom = from
	}
	if g.settled == 0 || g.settled < g.spanFrom {
		g.settled = g.spanFrom
	}
	busy := b.attribute(a.o.Mode)
	g.busyNS += busy
	g.spanBusy += busy
	for i := range b.parts {
		pt := &b.parts[i]
		pt.p.ns += pt.att
		pt.p.spanNS += pt.att
		a.addKernel(pt.p, pt.w.kernel, pt.att)
		if pt.solo {
			a.learn(pt.p, pt.w.kernel, float64(pt.w.end-pt.w.start))
		}
	}
	g.settled = w
}

// addKernel adds ns of kernel k to p's per-kernel totals (≤ MaxKernels).
func (a *Attributor) addKernel(p *proc, k uint32, ns float64) {
	if _, ok := p.kernels[k]; !ok && len(p.kernels) >= a.o.MaxKernels {
		k = 0
	}
	p.kernels[k] += ns
}

// learn updates p's solo estimate of kernel k with a window of ns that
// nothing else overlapped (estimates are bounded with the totals). Only
// such windows: the shortest overlapped ones are no estimate of a kernel
// longer than a time slice, whose every window holds another's slice (on
// the simulated H200 mix, a 2.7 ms GEMM's low decile was 4.3 ms beside a
// 1.4 ms one with 2 ms slices: +11 points against +0.9 for the residual
// split its unknown demand gets).
func (a *Attributor) learn(p *proc, k uint32, ns float64) {
	if k == 0 {
		return
	}
	e, ok := p.est[k]
	if !ok {
		if len(p.est) >= a.o.MaxKernels {
			return
		}
		p.est[k] = ns
		return
	}
	p.est[k] = e + (ns-e)/8
}

// KernelTime is one kernel's attributed time in a process.
type KernelTime struct {
	Kernel  uint32 // 0: unknown, merged, or beyond MaxKernels
	Seconds float64
}

// ProcTime is one process's attributed time on one GPU.
type ProcTime struct {
	Proc    uint32
	Seconds float64      // cumulative
	Share   float64      // of the span's wall time since the previous Snapshot
	Top     []KernelTime // its kernels that took the most, cumulative, most first (≤ 3)
}

// GPUTime is one GPU's attributed time.
type GPUTime struct {
	ID          string
	BusySeconds float64 // the union of its windows, cumulative
	Busy        float64 // share of the span since the previous Snapshot that some kernel ran
	SpanSeconds float64 // that span's length (0: nothing settled since)
	Procs       []ProcTime
}

// TopKernels is how many kernels of a process Snapshot names.
const TopKernels = 3

// Snapshot returns every GPU's totals, sorted by id and process, and
// starts a new span for the shares; gone processes with nothing buffered
// are reported one last time and dropped.
func (a *Attributor) Snapshot() []GPUTime {
	ids := make([]string, 0, len(a.gpus))
	for id := range a.gpus {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]GPUTime, 0, len(ids))
	for _, id := range ids {
		g := a.gpus[id]
		span := float64(g.settled - g.spanFrom)
		gt := GPUTime{ID: id, BusySeconds: g.busyNS / 1e9, SpanSeconds: span / 1e9}
		if span > 0 {
			gt.Busy = g.spanBusy / span
		}
		pids := make([]uint32, 0, len(g.procs))
		for pid := range g.procs {
			pids = append(pids, pid)
		}
		slices.Sort(pids)
		for _, pid := range pids {
			p := g.procs[pid]
			pt := ProcTime{Proc: pid, Seconds: p.ns / 1e9, Top: top(p.kernels)}
			if span > 0 {
				pt.Share = p.spanNS / span
			}
			gt.Procs = append(gt.Procs, pt)
			p.spanNS = 0
			if p.gone && len(p.pend) == 0 {
				delete(g.procs, pid)
			}
		}
		g.spanBusy, g.spanFrom = 0, g.settled
		out = append(out, gt)
	}
	return out
}

// top returns the TopKernels kernels of ks with the most time.
func top(ks map[uint32]float64) []KernelTime {
	var t []KernelTime
	for k, ns := range ks {
		t = append(t, KernelTime{Kernel: k, Seconds: ns / 1e9})
	}
	slices.SortFunc(t, func(x, y KernelTime) int {
		switch {
		case x.Seconds > y.Seconds:
			return -1
		case x.Seconds < y.Seconds:
			return 1
		}
		return int(int64(x.Kernel) - int64(y.Kernel))
	})
	return t[:min(len(t), TopKernels)]
}
