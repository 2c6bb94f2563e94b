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

// WindowCounters count driver windows and their states.
type WindowCounters struct {
	WindowsRead      uint64 // window records handled
	WindowsMatched   uint64 // windows joined to their launch
	WindowsLate      uint64 // windows whose launch was emitted already
	WindowsUnmatched uint64 // windows of no known launch: NO_LAUNCH, unknown launch id or graph node, duplicates, before their launch call
	WindowsMissing   uint64 // launches emitted without a window while their client's windows were on
	WindowsDropped   uint64 // windows the shim lost (WindowState.Dropped)
	WindowStates     uint64 // changes of a client's windows state
}

// clientWindows is what a client said of its windows: its latest state
// (0: it never said), and its graph launch calls (graphgroups.go).
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
	launches *launchTable
	clients  *clientTable

	nOn     int         // clients whose windows are on
	onCache [8]onAnswer // on's answers by source (direct-mapped), while no state changes
	groups  groupTable
	recent  recentSet
	changes [record.WindowsStateMax + 1][record.WindowsReasonMax + 1]uint64 // by state and reason: every value Decode accepts
	offsets [2][2]exphist.Hist                                              // by edge (start, end) and direction (inside, outside)
	cover   coverage
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
		c := wt.clients.get(src)
		*a = onAnswer{src: src, on: c != nil && c.win.state == record.WindowsOn, ok: true}
	}
	return a.on
}

// setState records client c's windows state.
func (wt *windowTable) setState(c *client, st record.WindowsState, r record.WindowsReason) {
	if c.win.state == record.WindowsOn {
		wt.nOn--
	}
	if st == record.WindowsOn {
		wt.nOn++
	}
	c.win.state, c.win.reason = st, r
	wt.onCache = [len(wt.onCache)]onAnswer{}
}

// waits says whether launch l (its launch record in) still waits for its
// window: windows are on for its client, the shim did not flag the launch
// NO_WINDOW (windows paused by their rate cap, or no correlation id), the
// launch call succeeded, and it has waited less than Options.WindowWait.
func (wt *windowTable) waits(l *launch, now time.Time) bool {
	return !l.gpu.win.ok && l.rec.Flags&record.LaunchNoWindow == 0 && l.rec.Result == 0 &&
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

// onWindow joins window w of source src to its launch.
func (wt *windowTable) onWindow(src uint32, w *record.Window, now time.Time) {
	wt.counters.WindowsRead++
	var l *launch
	out := matchUnknown
	switch {
	case w.Flags&record.WindowNoLaunch != 0:
	case w.Flags&record.WindowGraph != 0:
		l, out = wt.groups.match(wt.clients.get(src), w)
	default:
		l = wt.launches.get(srcKey{src, w.LaunchID})
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
		return
	}
	wt.counters.WindowsMatched++
	l.gpu.win = monoWindow{start: w.StartNS, end: w.EndNS, ok: true}
	wt.launches.maybeFinish(l, now)
}

// onWindowState takes a client's windows state: a change is counted and
// reported (Options.OnWindowState), the windows it lost counted.
func (wt *windowTable) onWindowState(src uint32, s *record.WindowState) {
	c := wt.clients.clientOf(src)
	wt.counters.WindowsDropped += uint64(s.Dropped)
	if s.State == c.win.state && s.Reason == c.win.reason {
		return
	}
	wt.setState(c, s.State, s.Reason)
	wt.counters.WindowStates++
	wt.changes[s.State][s.Reason]++
	if wt.o.Windows.OnState != nil {
		wt.o.Windows.OnState(c.peer.PID, *s)
	}
}

// filtered remembers the key of a launch of an excluded kernel (not a
// graph node: graphgroups.go keeps those), so that its window is dropped
// as the launch was.
func (wt *windowTable) filtered(key srcKey, api record.LaunchAPI) {
	if c := wt.clients.get(key.src); c != nil && c.win.state != 0 && api != record.APIGraphLaunch {
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
	c := wt.clients.get(l.key.src)
	if c == nil {
		return
	}
	// A graph launch call is named by its first node's id alone.
	if c.win.state != 0 && (l.rec.API != record.APIGraphLaunch || (l.graph.call.g != nil && l.graph.call.g.first == l.key.id)) {
		wt.recent.add(l.key, false)
	}
	if l.rec.Result != 0 {
		return // nothing ran
	}
	if c.win.state == record.WindowsOn && !l.gpu.win.ok && l.rec.Flags&record.LaunchNoWindow == 0 {
		wt.counters.WindowsMissing++
	}
	rt := l.route()
	var secs float64
	if ns, ok := l.execNS(); ok && rt != routeNone {
		secs = float64(ns) / 1e9
	} else if n := s.exec.Count(); n > 0 {
		secs = s.exec.Sum() / float64(n) // estimated: the kernel's mean on this device
	}
	wt.cover.add(l.rec.PID, rt, secs)
	if (rt == routeInlinePTX || rt == routePatchedSASS) && l.gpu.win.ok {
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
		wt.groups.release(wt.clients.get(l.key.src), l)
	}
}

// forget drops the window state of source src (disconnected): its graph
// launch calls, and marks its process's coverage for removal after the
// next emission.
func (wt *windowTable) forget(src uint32) {
	c := wt.clients.get(src)
	if c == nil {
		return
	}
	wt.groups.forget(&c.win.groups)
	wt.setState(c, 0, 0)
	if c.peer.PID != 0 {
		wt.cover.gone(c.peer.PID)
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
