package translate

// Graph launch calls, for driver windows. The shim writes one launch
// record per kernel node of a cuGraphLaunch, one after the other on the
// calling thread, all with the call's times and stream. The driver times
// each node's kernel under the call's one correlation id, so the shim
// names a node's window by the launch id of the call's first node record
// (GRAPH flag) and the node by its kernel name's hash. Here the records
// of one call are grouped (same thread, times and stream, in the order
// read) and a window goes to the first node of that call, in node order,
// with its name hash and no window yet. A first node of a CUDA graph may
// keep its launch id in every replay (graph.go), so calls are queued per
// first id, oldest first; a window that began before a node's launch call
// belongs to an earlier call (late).

import (
	"slices"

	"github.com/gpuprobe/gpuprobe/record"
)

// Bounds of the graph launch calls.
const (
	maxGroupNodes   = 1 << 14 // nodes of one call that can take windows
	maxOpenGroups   = 1024    // threads of one client with a call being read
	minGroupEntries = 1 << 14 // node entries of all calls, all clients: at least this, else 2 × max_pending_launches
)

// graphGroup is one cuGraphLaunch call: its first node record's launch
// id, what identifies its records, and its nodes in order.
type graphGroup struct {
	first         uint64
	tid           uint32
	enq, ret, str uint64
	nodes         []groupNode
	from          int  // nodes before it have a window (or will take none)
	live          int  // nodes whose launch is pending
	listed        bool // queued in its client's byFirst
	whole         bool // its whole window came (record.WindowGraphExec)
}

// groupNode is one kernel node of a call: its pending launch (nil once
// emitted, or for a kernel filtered out), its kernel's name hash.
type groupNode struct {
	l        *launch
	hash     uint32
	won      bool // a window went to it
	done     bool // its launch was emitted
	filtered bool
}

// groupRef links a launch to its node.
type groupRef struct {
	g *graphGroup
	i int
}

// clientGroups are the graph launch calls of one client: the call each
// thread is writing, and the calls with pending nodes by first launch id.
type clientGroups struct {
	open    map[uint32]*graphGroup
	byFirst map[uint64][]*graphGroup
}

// groupTable bounds the node entries of every client's calls together.
type groupTable struct {
	o       *Options
	entries int
}

func (gt *groupTable) maxEntries() int { return max(minGroupEntries, 2*gt.o.MaxPendingLaunches) }

// call returns the call that graph launch record r of a client with
// calls cg belongs to: its thread's open call when r has the same times
// and stream, else a new one that r opens. nil when the bound of node
// entries is reached.
func (gt *groupTable) call(cg *clientGroups, r *record.Launch) *graphGroup {
	if g := cg.open[r.TID]; g != nil && g.enq == r.EnqueueNS && g.ret == r.ReturnNS && g.str == r.Stream {
		return g
	}
	if gt.entries >= gt.maxEntries() {
		return nil
	}
	if cg.open == nil {
		cg.open, cg.byFirst = map[uint32]*graphGroup{}, map[uint64][]*graphGroup{}
	}
	if old := cg.open[r.TID]; old != nil {
		gt.close(old)
	}
	if len(cg.open) >= maxOpenGroups {
		for _, old := range cg.open {
			gt.close(old)
		}
		clear(cg.open)
	}
	g := &graphGroup{first: r.LaunchID, tid: r.TID, enq: r.EnqueueNS, ret: r.ReturnNS, str: r.Stream}
	cg.open[r.TID] = g
	return g
}

// close ends the reading of call g: one with no pending node (all its
// kernels filtered out) is forgotten.
func (gt *groupTable) close(g *graphGroup) {
	if !g.listed {
		gt.entries -= len(g.nodes)
		g.nodes = nil
	}
}

// add appends a node of kernel k to call g of a client with calls cg: l
// is its launch, nil when the kernel is filtered out.
func (gt *groupTable) add(cg *clientGroups, g *graphGroup, l *launch, k *kernel) {
	if g == nil || len(g.nodes) >= maxGroupNodes || gt.entries >= gt.maxEntries() {
		return
	}
	gt.entries++
	g.nodes = append(g.nodes, groupNode{l: l, hash: k.hash, filtered: l == nil})
	if l == nil {
		return
	}
	l.graph.call = groupRef{g, len(g.nodes) - 1}
	g.live++
	if !g.listed {
		g.listed = true
		cg.byFirst[g.first] = append(cg.byFirst[g.first], g)
	}
}

// match finds the node that graph window w of a client with calls cg
// (nil: none) belongs to.
func (gt *groupTable) match(cg *clientGroups, w *record.Window) (*launch, matchOutcome) {
	if cg == nil {
		return nil, matchUnknown
	}
	calls := cg.byFirst[w.LaunchID]
	for _, g := range calls {
		for g.from < len(g.nodes) && g.nodes[g.from].won {
			g.from++
		}
		for i := g.from; i < len(g.nodes); i++ {
			n := &g.nodes[i]
			if n.won || n.hash != w.NameHash {
				continue
			}
			switch {
			case n.l != nil && w.StartNS < n.l.rec.EnqueueNS:
				return nil, matchLate // began before this call: an earlier call's
			case n.l != nil:
				n.won = true
				return n.l, matchUnknown
			}
			n.won = true
			if n.filtered {
				return nil, matchFiltered
			}
			return nil, matchLate // emitted without it
		}
	}
	if len(calls) > 0 {
		return nil, matchNoNode
	}
	return nil, matchUnknown
}

// release marks launch l's node emitted (l keeps its link); a call with
// no pending node left is forgotten from its client's calls cg (nil: its
// client left).
func (gt *groupTable) release(cg *clientGroups, l *launch) {
	g, i := l.graph.call.g, l.graph.call.i
	if g.nodes == nil || g.nodes[i].done {
		return // its client's calls were forgotten, or released already
	}
	g.nodes[i].l, g.nodes[i].done = nil, true
	if g.live--; g.live > 0 || cg == nil {
		return
	}
	gt.entries -= len(g.nodes)
	g.nodes = nil
	if cg.open[g.tid] == g {
		delete(cg.open, g.tid)
	}
	list := cg.byFirst[g.first]
	if j := slices.Index(list, g); j >= 0 {
		list = slices.Delete(list, j, j+1)
	}
	if len(list) == 0 {
		delete(cg.byFirst, g.first)
	} else {
		cg.byFirst[g.first] = list
	}
}

// forget drops the calls of a client that left.
func (gt *groupTable) forget(cg *clientGroups) {
	seen := map[*graphGroup]bool{}
	for _, list := range cg.byFirst {
		for _, g := range list {
			seen[g] = true
		}
	}
	for _, g := range cg.open {
		seen[g] = true
	}
	for g := range seen {
		gt.entries -= len(g.nodes)
		g.nodes = nil
	}
	cg.open, cg.byFirst = nil, nil
}
