package translate

// Hardware counters: a trusted sampler's samples of one GPU (record.
// CounterSet, record.CounterSample) are held per GPU, keyed by UUID as the
// GPU shares are (gpushares.go), beside the driver windows of every
// process on that GPU. At each emission the time before now − lag
// (gpu_time::lag, the watermark the GPU shares settle at) is joined
// (receiver/internal/counters) and added to each (process, kernel)'s
// series: clipped to the settled span, so that a window across it is
// joined part by part and no sample time counts twice. Samples and
// windows before the watermark are then dropped: a GPU holds at most lag
// of them, and at most MaxSamples and MaxWindows.

import (
	"sort"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/counters"
	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"github.com/gpuprobe/gpuprobe/record"
)

// CounterOptions configure hardware counters (counters::*).
type CounterOptions struct {
	Enabled bool
	// Trusted says whether a client of peer uid may publish counter
	// records (config.CountersConfig.Trusted); nil: none may.
	Trusted    func(uid uint32) bool
	MaxSamples int // per GPU (default config.DefaultCounterSamples)
	MaxWindows int // per GPU (default config.DefaultCounterWindows)
	MaxSeries  int // (process, kernel, GPU) series, all together (default 4096)
}

// CounterCounters count the counter records and windows not applied.
type CounterCounters struct {
	Refused        uint64 // counter records of untrusted clients
	Dropped        uint64 // samples not applied: counters off, invalid, of no set, a second sampler of a GPU, late, over a bound
	WindowsDropped uint64 // windows over a GPU's bound or after its settled time
	Joined         uint64 // samples joined
}

const defaultMaxCounterSeries = 4096

// hwCounters is the Node's: every Translator's windows and the samplers'
// samples meet here. Every method locks.
type hwCounters struct {
	mu      sync.Mutex
	o       CounterOptions
	lag     time.Duration
	trusted map[uint32]bool   // source → may publish counters
	sets    map[srcDev]*hwSet // a trusted source's sets by its device ordinal
	gpus    map[string]*hwGPU
	series  map[hwKey]*hwSeries
	byPID   map[uint32][]*hwSeries
	gone    map[uint32]uint64 // pid → settled time its series go at
	c       CounterCounters
}

type srcDev struct{ src, dev uint32 }

// hwSet is a set as its sampler announced it.
type hwSet struct {
	gpu  string // "" without a UUID: its samples join no window
	hash uint32
	n    int
}

// hwGPU is one GPU's samples and windows waiting to be joined.
type hwGPU struct {
	owner   uint32   // the source whose samples it takes (0: none now)
	names   []string // its set's metric names
	hash    uint32
	samples []counters.Sample // in order, none overlapping, after settled
	windows []hwWindow
	settled uint64 // CLOCK_MONOTONIC: joined up to here
}

// hwWindow is a window with the device ordinal its process knows the GPU
// by.
type hwWindow struct {
	counters.Window
	index uint32
}

// hwKey names one kernel of one process on one GPU.
type hwKey struct {
	pid    uint32
	kernel string
	gpu    string
}

// hwSeries is the cumulative join of one hwKey.
type hwSeries struct {
	key        hwKey
	index      uint32
	names      []string
	weighted   []float64 // Σ value × attributed s, per name
	time       []float64 // attributed s during which the name had a value
	overlapped float64   // s
	// at the last emission, for the gauge of the interval since
	lastWeighted, lastTime []float64
}

func newHWCounters(o CounterOptions, lag time.Duration) *hwCounters {
	if o.MaxSamples < 1 {
		o.MaxSamples = 1 << 16
	}
	if o.MaxWindows < 1 {
		o.MaxWindows = 1 << 16
	}
	if o.MaxSeries < 1 {
		o.MaxSeries = defaultMaxCounterSeries
	}
	if lag <= 0 {
		lag = gputime.DefaultLag
	}
	return &hwCounters{o: o, lag: lag, trusted: map[uint32]bool{}, sets: map[srcDev]*hwSet{},
		gpus: map[string]*hwGPU{}, series: map[hwKey]*hwSeries{}, byPID: map[uint32][]*hwSeries{}, gone: map[uint32]uint64{}}
}

// connect notes whether source src, of peer uid, may publish counters.
func (h *hwCounters) connect(src, uid uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.o.Trusted != nil && h.o.Trusted(uid) {
		h.trusted[src] = true
	} else {
		delete(h.trusted, src)
	}
}

// forgetSource ends source src: its sets go, and its GPUs may take
// another sampler's samples.
func (h *hwCounters) forgetSource(src uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.trusted, src)
	for k := range h.sets {
		if k.src == src {
			delete(h.sets, k)
		}
	}
	for _, g := range h.gpus {
		if g.owner == src {
			g.owner = 0
		}
	}
}

// forgetPID marks process pid gone: its series go once what it ran is
// settled and emitted.
func (h *hwCounters) forgetPID(pid uint32, nowMono uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.byPID[pid]) > 0 {
		h.gone[pid] = nowMono + 2*uint64(h.lag)
	}
}

// onRecord applies a counter record of source src.
func (h *hwCounters) onRecord(src uint32, typ record.Type, rec []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.trusted[src] {
		h.c.Refused++
		return nil
	}
	if !h.o.Enabled {
		h.c.Dropped++
		return nil
	}
	if typ == record.TypeCounterSet {
		var s record.CounterSet
		if err := s.Decode(rec); err != nil {
			return err
		}
		h.onSet(src, &s)
		return nil
	}
	var s record.CounterSample
	if err := s.Decode(rec); err != nil {
		h.c.Dropped++
		return err
	}
	h.onSample(src, &s)
	return nil
}

// onSet takes a sampler's set and, when the GPU has no other sampler,
// gives it the GPU.
func (h *hwCounters) onSet(src uint32, s *record.CounterSet) {
	k := srcDev{src, s.Device}
	if _, ok := h.sets[k]; !ok && len(h.sets) >= gputime.DefaultMaxGPUs {
		return
	}
	set := &hwSet{hash: s.Hash(), n: len(s.Names)}
	h.sets[k] = set
	if !s.HasUUID() {
		return
	}
	id := s.UUIDString()
	g := h.gpus[id]
	if g == nil {
		if len(h.gpus) >= gputime.DefaultMaxGPUs {
			return
		}
		g = &hwGPU{}
		h.gpus[id] = g
	}
	if g.owner != 0 && g.owner != src {
		return // PM sampling is one session per device: a second is not believed
	}
	set.gpu, g.owner = id, src
	if g.hash != set.hash {
		g.names, g.hash, g.samples = s.Names, set.hash, nil
	}
}

// onSample holds a sample for its GPU.
func (h *hwCounters) onSample(src uint32, s *record.CounterSample) {
	set := h.sets[srcDev{src, s.Device}]
	var g *hwGPU
	if set != nil && set.gpu != "" {
		g = h.gpus[set.gpu]
	}
	switch {
	case g == nil || g.owner != src || set.hash != s.SetHash || g.hash != s.SetHash || len(s.Values) != set.n:
		h.c.Dropped++
		return
	case s.EndNS <= g.settled || (len(g.samples) > 0 && s.StartNS < g.samples[len(g.samples)-1].End):
		h.c.Dropped++ // late, or out of order
		return
	}
	if len(g.samples) >= h.o.MaxSamples {
		h.c.Dropped++
		g.samples = append(g.samples[:0], g.samples[1:]...)
	}
	g.samples = append(g.samples, counters.Sample{Start: s.StartNS, End: s.EndNS, Values: append([]float64(nil), s.Values...)})
}

// kernelName is the series name of a window's kernel k ("other" when
// the window joined no launch).
func kernelName(k *kernel) string {
	if k == nil || k.series == nil {
		return OtherKernel
	}
	return k.series.name
}

// addWindow holds driver window w of process pid (its device ordinal
// index on GPU gpu) for the join; kernel is its series' name.
func (h *hwCounters) addWindow(gpu string, pid, index uint32, kernel string, w *record.Window) {
	// Enabled is fixed at construction: with counters off, a window
	// record takes no lock the shards share.
	if !h.o.Enabled || w.Flags&record.WindowUntimed != 0 || w.EndNS <= w.StartNS {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gpus[gpu]
	if g == nil {
		return // no sampler on that GPU
	}
	if w.EndNS <= g.settled || len(g.windows) >= h.o.MaxWindows {
		h.c.WindowsDropped++
		return
	}
	g.windows = append(g.windows, hwWindow{Window: counters.Window{PID: pid, Kernel: kernel, LaunchID: w.LaunchID,
		Start: w.StartNS, End: w.EndNS}, index: index})
}

// Counters returns the counts so far.
func (h *hwCounters) counters() CounterCounters {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

// settle joins every GPU's time before nowMono − lag.
func (h *hwCounters) settle(nowMono uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if nowMono > uint64(h.lag) {
		h.settleTo(nowMono - uint64(h.lag))
	}
}

// flush joins every GPU's time up to nowMono: the shutdown's last point.
func (h *hwCounters) flush(nowMono uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settleTo(nowMono)
}

// settleTo joins every GPU's time before w (lock held).
func (h *hwCounters) settleTo(w uint64) {
	for id, g := range h.gpus {
		if w > g.settled {
			h.settleGPU(id, g, w)
		}
	}
	for pid, at := range h.gone {
		if w >= at {
			for _, s := range h.byPID[pid] {
				delete(h.series, s.key)
			}
			delete(h.byPID, pid)
			delete(h.gone, pid)
		}
	}
}

// settleGPU joins g's samples and windows clipped to [g.settled, w), adds
// the result to the series, and drops what ends before w.
func (h *hwCounters) settleGPU(id string, g *hwGPU, w uint64) {
	from := g.settled
	var ss []counters.Sample
	for _, s := range g.samples {
		if s.Start < w && s.End > from {
			ss = append(ss, counters.Sample{Start: max(s.Start, from), End: min(s.End, w), Values: s.Values})
		}
	}
	var ws []counters.Window
	index := map[uint32]uint32{}
	for _, x := range g.windows {
		if x.Start < w && x.End > from {
			c := x.Window
			c.Start, c.End = max(c.Start, from), min(c.End, w)
			ws = append(ws, c)
			index[x.PID] = x.index
		}
	}
	if len(ss) > 0 && len(ws) > 0 {
		if r, err := counters.Join(ss, ws, len(g.names)); err == nil {
			h.c.Joined += uint64(len(ss))
			h.add(id, g.names, r, index)
		} else {
			h.c.Dropped += uint64(len(ss))
		}
	}
	g.samples = keepAfter(g.samples, w, func(s counters.Sample) uint64 { return s.End })
	g.windows = keepAfter(g.windows, w, func(x hwWindow) uint64 { return x.End })
	g.settled = w
}

// keepAfter keeps the elements of v that end after w, in place.
func keepAfter[T any](v []T, w uint64, end func(T) uint64) []T {
	kept := v[:0]
	for _, x := range v {
		if end(x) > w {
			kept = append(kept, x)
		}
	}
	clear(v[len(kept):])
	return kept
}

// add folds one join of GPU id into the series.
func (h *hwCounters) add(id string, names []string, r *counters.Result, index map[uint32]uint32) {
	keys := make([]counters.Key, 0, len(r.Kernels))
	for k := range r.Kernels {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].PID < keys[j].PID || keys[i].PID == keys[j].PID && keys[i].Kernel < keys[j].Kernel
	})
	for _, k := range keys {
		kr := r.Kernels[k]
		if kr.Attributed == 0 {
			continue
		}
		s := h.seriesOf(hwKey{k.PID, k.Kernel, id}, index[k.PID])
		if s == nil {
			h.c.Dropped++
			continue
		}
		for i, v := range kr.Values {
			if w := kr.Weights[i]; w > 0 {
				c := s.col(names[i])
				s.weighted[c] += v * w / 1e9
				s.time[c] += w / 1e9
			}
		}
		s.overlapped += float64(kr.Overlapped) / 1e9
	}
}

// seriesOf returns k's series, made if the bound allows (nil if not).
func (h *hwCounters) seriesOf(k hwKey, index uint32) *hwSeries {
	if s := h.series[k]; s != nil {
		return s
	}
	if len(h.series) >= h.o.MaxSeries {
		return nil
	}
	s := &hwSeries{key: k, index: index}
	h.series[k] = s
	h.byPID[k.pid] = append(h.byPID[k.pid], s)
	return s
}

// col is the column of metric name in s, added if new.
func (s *hwSeries) col(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	s.names = append(s.names, name)
	s.weighted, s.time = append(s.weighted, 0), append(s.time, 0)
	s.lastWeighted, s.lastTime = append(s.lastWeighted, 0), append(s.lastTime, 0)
	return len(s.names) - 1
}

// has reports whether process pid has counter series.
func (h *hwCounters) has(pid uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byPID[pid]) > 0
}
