package translate

// Driver windows (record.Window): a kernel's device window as the driver
// timed it (CUPTI kernel activity), for any kernel, SASS-only ones too,
// written by the shim's activity thread some time after the launch record
// (it flushes its activity buffers about every poll interval: typically
// 10–500 ms later, a few seconds at worst). Its times are the client's
// CLOCK_MONOTONIC, like the launch record's, so they need no calibration.
//
// A window joins the launch its launch id names, or with the GRAPH flag a
// node of a cuGraphLaunch call (graphgroups.go). A launch whose own probes
// timed it (kernel_phases' Exec, every warp) keeps the probes' window in its
// span and figures; the two are compared in
// gpuprobe.receiver.windows.probe_offset. While its client's latest
// WindowState says windows are on, a launch waits for its window at most
// Options.WindowWait (windows::wait) before it is emitted without one.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"github.com/gpuprobe/gpuprobe/record"
)

// DefaultWindowWait is how long a launch waits for its driver window when
// Options.WindowWait is 0.
const DefaultWindowWait = 2 * time.Second

// maxRecent is how many emitted launches are remembered to tell a late
// window (its launch was emitted already) from one of an unknown launch.
const maxRecent = 1 << 14

// nLaunchAPIs is the number of launch entry points (record.LaunchAPI).
const nLaunchAPIs = int(record.APIGraphLaunch) + 1

// WindowCounters count driver windows and their states.
type WindowCounters struct {
	WindowsRead      uint64 // window records handled
	WindowsMatched   uint64 // windows joined to their launch
	WindowsLate      uint64 // windows whose launch was emitted already
	WindowsUnmatched uint64 // windows of no known launch: NO_LAUNCH, unknown launch id or graph node, duplicates, before their launch call
	WindowsMissing   uint64 // launches emitted without a window while their client's windows were on
	WindowsUntimed   uint64 // launches the driver ran without timestamps (an UNTIMED window)
	// UntimedByAPI splits WindowsUntimed by the launch's entry point
	// (record.LaunchAPI): which kind of launch the driver left untimed.
	UntimedByAPI   [nLaunchAPIs]uint64
	WindowsDevice  uint64 // windows of kernels launched by kernels (dynamic parallelism)
	WindowsWhole   uint64 // windows of whole graph launches joined to their nodes (record.WindowGraphExec)
	WindowsDropped uint64 // windows the shim lost (WindowState.Dropped)
	WindowStates   uint64 // changes of a client's windows state
}

// clientWindows is what a client (source) said of its windows: its latest
// state (0: it never said), and its graph launch calls (graphgroups.go).
type clientWindows struct {
	state  record.WindowsState
	reason record.WindowsReason
	groups clientGroups
}

// windowTable owns what driver windows need beyond the launch: the graph
// launch calls (groups), the recently emitted launches, the state changes,
// the probe-vs-driver offsets and the coverage by route.
type windowTable struct {
	o        *Options
	counters *Counters
	bySrc    map[uint32]*clientWindows // source → its windows' state and graph launch calls

	nOn     int         // clients whose windows are on
	onCache [8]onAnswer // on's answers by source (direct-mapped), while no state changes
	groups  groupTable
	recent  recentSet
	changes [record.WindowsStateMax + 1][record.WindowsReasonMax + 1]uint64 // by state and reason: every value Decode accepts
	offsets [2][2]exphist.Hist                                              // by edge (start, end) and direction (inside, outside)
	cover   coverage

	wholeScratch []*launch // onWholeGraph's nodes of one call
}

// onAnswer is a cached answer of on.
type onAnswer struct {
	src    uint32
	on, ok bool
}

// on says whether the latest WindowState of source src said windows on.
// It runs for every pending launch at every poll: no map lookup while no
// client has windows on, and answers are cached per source otherwise.
func (wt *windowTable) on(src uint32) bool {
	if wt.nOn == 0 {
		return false
	}
	a := &wt.onCache[src%uint32(len(wt.onCache))]
	if !a.ok || a.src != src {
		c := wt.bySrc[src]
		*a = onAnswer{src: src, on: c != nil && c.state == record.WindowsOn, ok: true}
	}
	return a.on
}

// of returns the windows of source src, made on first use.
func (wt *windowTable) of(src uint32) *clientWindows {
	c := wt.bySrc[src]
	if c == nil {
		c = &clientWindows{}
		wt.bySrc[src] = c
	}
	return c
}

// stateOf is the latest windows state of source src (0: it never said).
func (wt *windowTable) stateOf(src uint32) record.WindowsState {
	if c := wt.bySrc[src]; c != nil {
		return c.state
	}
	return 0
}

// setState records a client's windows state.
func (wt *windowTable) setState(c *clientWindows, st record.WindowsState, r record.WindowsReason) {
	if c.state == record.WindowsOn {
		wt.nOn--
	}
	if st == record.WindowsOn {
		wt.nOn++
	}
	c.state, c.reason = st, r
	wt.onCache = [len(wt.onCache)]onAnswer{}
}

// call returns the graph launch call that graph launch record r of
// source src belongs to (groupTable.call).
func (wt *windowTable) call(src uint32, r *record.Launch) *graphGroup {
	return wt.groups.call(&wt.of(src).groups, r)
}

// addNode appends a node of kernel k, launch l (nil: filtered out), to
// call g of source src (groupTable.add).
func (wt *windowTable) addNode(src uint32, g *graphGroup, l *launch, k *kernel) {
	wt.groups.add(&wt.of(src).groups, g, l, k)
}

// waits says whether launch l (its launch record in) still waits for its
// window: windows are on for its client, the shim did not flag the launch
// NO_WINDOW (windows paused by their rate cap, or no correlation id), the
// launch call succeeded, and it has waited less than Options.WindowWait.
func (wt *windowTable) waits(l *launch, now time.Time) bool {
	return !l.gpu.win.ok && !l.gpu.win.untimed && l.rec.Flags&record.LaunchNoWindow == 0 && l.rec.Result == 0 &&
		now.Sub(l.created) < wt.o.Windows.Wait && wt.on(l.key.src)
}

// matchOutcome is what became of a window.
type matchOutcome uint8

const (
	matchUnknown  matchOutcome = iota // no pending launch of it: late or unmatched, as recentSet knows
	matchNoNode                       // its graph launch call is pending but has no node of its kernel: unmatched
	matchLate                         // its launch was emitted already
	matchFiltered                     // its kernel is excluded (kernels::include/exclude): dropped as its launch was
)

// match joins window w of source src to its launch: pending, the pending
// launch (not a graph run) of its launch id, or a node of a graph launch
// call. It returns the launch that got it, nil if none.
func (wt *windowTable) match(src uint32, w *record.Window, pending *launch) *launch {
	wt.counters.WindowsRead++
	var l *launch
	out := matchUnknown
	switch {
	case w.Flags&record.WindowDeviceLaunched != 0:
		// A child of a dynamic-parallelism launch: never its parent's
		// own window.
		wt.counters.WindowsDevice++
		return nil
	case w.Flags&record.WindowUntimed != 0:
		// The driver ran the kernel untimed: its launch stops waiting
		// and is counted untimed, not missing.
		if pending != nil && !pending.gpu.win.ok && w.Flags&record.WindowNoLaunch == 0 {
			pending.gpu.win.untimed = true
			return pending
		}
		wt.counters.WindowsUnmatched++
		return nil
	case w.Flags&record.WindowNoLaunch != 0:
	case w.Flags&record.WindowGraph != 0:
		var cg *clientGroups
		if c := wt.bySrc[src]; c != nil {
			cg = &c.groups
		}
		l, out = wt.groups.match(cg, w)
	default:
		l = pending
		if l != nil && (l.gpu.win.ok || (l.have && w.StartNS < l.rec.EnqueueNS)) {
			l = nil // a duplicate, or a window that began before its launch call
		}
	}
	if l == nil {
		if out == matchUnknown && w.Flags&record.WindowNoLaunch == 0 {
			out = wt.recent.outcome(srcKey{src, w.LaunchID})
		}
		switch out {
		case matchLate:
			wt.counters.WindowsLate++
		case matchUnknown, matchNoNode:
			wt.counters.WindowsUnmatched++
		}
		return nil
	}
	wt.counters.WindowsMatched++
	l.gpu.win = monoWindow{start: w.StartNS, end: w.EndNS, ok: true}
	return l
}

// onWindowState takes the windows state of source src, whose peer pid is
// pid (0: unknown): a change is counted and reported
// (Options.Windows.OnState), the windows it lost counted.
func (wt *windowTable) onWindowState(src, pid uint32, s *record.WindowState) {
	c := wt.of(src)
	wt.counters.WindowsDropped += uint64(s.Dropped)
	if s.State == c.state && s.Reason == c.reason {
		return
	}
	wt.setState(c, s.State, s.Reason)
	wt.counters.WindowStates++
	wt.changes[s.State][s.Reason]++
	if wt.o.Windows.OnState != nil {
		wt.o.Windows.OnState(pid, *s)
	}
}

// filtered remembers the key of a launch of an excluded kernel (not a
// graph node: graphgroups.go keeps those), so that its window is dropped
// as the launch was.
func (wt *windowTable) filtered(key srcKey, api record.LaunchAPI) {
	if wt.stateOf(key.src) != 0 && api != record.APIGraphLaunch {
		wt.recent.add(key, true)
	}
}

// finished accounts for launch l, emitted with kernel series s: its
// coverage, a missing window, the offsets of the probes' window from the
// driver's, and remembers it for late windows.
func (wt *windowTable) finished(l *launch, s *devSeries) {
	if l.key.src == HostProbeSource {
		return
	}
	state := wt.stateOf(l.key.src)
	// A graph launch call is named by its first node's id alone. A launch
	// that has its window waits for no other: a second one is a
	// duplicate, unmatched, and the launch need not be remembered; nor
	// need one the shim flagged NO_WINDOW (windows paused by their rate
	// cap): no window comes for it, and one that did is unmatched.
	if state != 0 && l.rec.Flags&record.LaunchNoWindow == 0 && (l.rec.API != record.APIGraphLaunch && !l.gpu.win.ok && !l.gpu.win.untimed ||
		l.rec.API == record.APIGraphLaunch && l.graph.call.g != nil && l.graph.call.g.first == l.key.id) {
		wt.recent.add(l.key, false)
	}
	if l.rec.Result != 0 {
		return // nothing ran
	}
	switch {
	case l.gpu.win.untimed && !l.gpu.win.ok:
		wt.counters.WindowsUntimed++
		if int(l.rec.API) < nLaunchAPIs {
			wt.counters.UntimedByAPI[l.rec.API]++
		}
	case state == record.WindowsOn && !l.gpu.win.ok && l.rec.Flags&record.LaunchNoWindow == 0:
		wt.counters.WindowsMissing++
	}
	rt := l.route()
	var secs float64
	if ns, ok := l.execNS(); ok && rt != routeNone && rt != routeGraph {
		secs = float64(ns) / 1e9
	} else if n := s.exec.Count(); n > 0 {
		secs = s.exec.Sum() / float64(n) // estimated: the kernel's mean on this device
	} else if rt == routeGraph {
		secs = l.wholeShare() // estimated: its share of its graph launch's window
	}
	wt.cover.add(l.rec.PID, rt, secs, l.rec.Flags&record.LaunchPreswap != 0)
	if (rt == routeInlinePTX || rt == routePatchedSASS) && l.gpu.win.ok && !l.gpu.win.whole {
		wt.compare(l)
	}
}

// Edges and directions of gpuprobe.receiver.windows.probe_offset.
const (
	edgeStart = iota
	edgeEnd
)

const (
	probeInside  = iota // the probes' window lies inside the driver's at this edge
	probeOutside        // it extends beyond it (clock mapping error, or the driver's window is short)
)

// Values of gpuprobe.windows.edge and gpuprobe.windows.direction, by
// edge and direction.
var (
	EdgeNames      = [2]string{"start", "end"}
	DirectionNames = [2]string{"inside", "outside"}
)

// compare records how far launch l's probe window (%globaltimer, mapped)
// lies from its driver window (CLOCK_MONOTONIC, mapped) at each edge.
func (wt *windowTable) compare(l *launch) {
	src, dev := l.key.src, l.rec.Device
	ps, ok1 := wt.o.Clock.GPUToReal(src, dev, l.gpu.firstStart)
	pe, ok2 := wt.o.Clock.GPUToReal(src, dev, l.gpu.lastEnd)
	ws, ok3 := wt.o.Clock.ClientMonoToReal(src, l.gpu.win.start)
	we, ok4 := wt.o.Clock.ClientMonoToReal(src, l.gpu.win.end)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return
	}
	wt.offset(edgeStart, ps, ws) // inside: the probes start after the driver's start
	wt.offset(edgeEnd, we, pe)   // inside: the probes end before the driver's end
}

// offset records |later − earlier| at edge, inside when later ≥ earlier.
func (wt *windowTable) offset(edge int, later, earlier uint64) {
	dir, secs := probeInside, float64(later-earlier)/1e9
	if later < earlier {
		dir, secs = probeOutside, float64(earlier-later)/1e9
	}
	wt.offsets[edge][dir].Record(secs)
	if wt.o.Windows.OnProbeOffset != nil {
		wt.o.Windows.OnProbeOffset(edge, dir, secs)
	}
}

// released marks launch l (done) emitted in its graph launch call.
func (wt *windowTable) released(l *launch) {
	if l.graph.call.g != nil {
		var cg *clientGroups
		if c := wt.bySrc[l.key.src]; c != nil {
			cg = &c.groups
		}
		wt.groups.release(cg, l)
	}
}

// forget drops the window state of source src (disconnected): its graph
// launch calls, and marks the coverage of its process, pid (0: unknown),
// for removal after the next emission.
func (wt *windowTable) forget(src, pid uint32) {
	if c := wt.bySrc[src]; c != nil {
		wt.groups.forget(&c.groups)
		wt.setState(c, 0, 0)
		delete(wt.bySrc, src)
	}
	if pid != 0 {
		wt.cover.gone(pid)
	}
}

// recentSet remembers the keys of the last maxRecent launches emitted by
// clients that report windows (and of launches filtered out), to tell a
// late window from one of a launch never seen. A key added again (a graph
// node's id, one per replay) keeps its latest slot.
type recentSet struct {
	ring []srcKey
	next int
	seen map[srcKey]recentSlot
}

type recentSlot struct {
	slot     int32
	filtered bool
}

func (r *recentSet) add(k srcKey, filtered bool) {
	if r.ring == nil {
		r.ring, r.seen = make([]srcKey, maxRecent), make(map[srcKey]recentSlot, maxRecent)
	}
	if old, ok := r.seen[r.ring[r.next]]; ok && int(old.slot) == r.next {
		delete(r.seen, r.ring[r.next])
	}
	r.ring[r.next] = k
	r.seen[k] = recentSlot{int32(r.next), filtered}
	r.next = (r.next + 1) % maxRecent
}

// outcome says what a window of launch k that found no pending launch is.
func (r *recentSet) outcome(k srcKey) matchOutcome {
	s, ok := r.seen[k]
	switch {
	case !ok:
		return matchUnknown
	case s.filtered:
		return matchFiltered
	}
	return matchLate
}
