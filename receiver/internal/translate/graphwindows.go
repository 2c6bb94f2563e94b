package translate

// Graph launches timed whole (the shim's GPUPROBE_GRAPH_WINDOWS=graph).
// CUPTI's graph trace gives one window per cuGraphLaunch call instead of
// one per kernel node, named by the launch id of the call's first node
// record (record.WindowGraphExec). The oldest call of that id without one
// takes it, and each of its pending nodes gets it marked whole: the
// kernel ran inside that window, but its own device time is not known,
// so it gives its kernel no duration (devWindow), its route is graph,
// and its GPU time in the coverage is its kernel's mean when one is
// known, else its share of the call's window.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// matchWhole finds the call that whole-graph window w of a client with
// calls cg (nil: none) belongs to: the oldest of its first id that has
// no whole window yet and began no later than the window.
func (gt *groupTable) matchWhole(cg *clientGroups, w *record.Window) (*graphGroup, matchOutcome) {
	if cg == nil {
		return nil, matchUnknown
	}
	calls := cg.byFirst[w.LaunchID]
	for _, g := range calls {
		if g.whole {
			continue
		}
		if w.Flags&record.WindowUntimed == 0 && w.StartNS < g.enq {
			return nil, matchLate // began before this call: an earlier call's
		}
		g.whole = true
		return g, matchUnknown
	}
	if len(calls) > 0 {
		return nil, matchNoNode
	}
	return nil, matchUnknown
}

// onWholeGraph joins whole-graph window w of source src to the nodes of
// its call, which may then be complete.
func (lt *launchTable) onWholeGraph(src uint32, w *record.Window, now time.Time) {
	wt := lt.windows
	wt.counters.WindowsRead++
	var g *graphGroup
	out := matchUnknown
	if w.Flags&record.WindowNoLaunch == 0 {
		var cg *clientGroups
		if c := wt.bySrc[src]; c != nil {
			cg = &c.groups
		}
		g, out = wt.groups.matchWhole(cg, w)
		if g == nil && out == matchUnknown {
			out = wt.recent.outcome(srcKey{src, w.LaunchID})
		}
	}
	if g == nil {
		if out == matchLate {
			wt.counters.WindowsLate++
		} else {
			wt.counters.WindowsUnmatched++
		}
		return
	}
	wt.counters.WindowsMatched++
	wt.counters.WindowsWhole++
	// Finishing a node may release the call (and its nodes): take the
	// launches first.
	ls := wt.wholeScratch[:0]
	for i := range g.nodes {
		n := &g.nodes[i]
		if n.l != nil && !n.won && !n.l.gpu.win.ok {
			n.won = true
			ls = append(ls, n.l)
		}
	}
	for _, l := range ls {
		if w.Flags&record.WindowUntimed != 0 {
			l.gpu.win.untimed = true
		} else {
			l.gpu.win = monoWindow{start: w.StartNS, end: w.EndNS, ok: true, whole: true, nodes: uint32(len(g.nodes))}
		}
	}
	for _, l := range ls {
		lt.maybeFinish(l, now)
	}
	clear(ls)
	wt.wholeScratch = ls[:0]
}

// wholeShare is l's share, in seconds, of its graph launch's whole
// window: the window over the call's nodes.
func (l *launch) wholeShare() float64 {
	w := l.gpu.win
	if !w.whole || w.nodes == 0 {
		return 0
	}
	return float64(w.end-w.start) / float64(w.nodes) / 1e9
}
