package translate

// Replays of CUDA graphs. The launch id of a kernel node of an executable
// graph is fixed (baked into the patched kernel's parameters): the shim
// numbers explicit kernel nodes with GraphIDBit set, and a node captured
// from a stream keeps the id of the launch it was captured from, so every
// cuGraphLaunch of that graph writes a launch record with the same id for
// the node, and the device probes write one Exec (or one set of Warp)
// records with that id per run of the node. CUDA serialises the launches
// of one executable graph, so the k-th launch record of an id goes with
// the k-th device window of that id: each record kind is paired in FIFO
// order with the oldest run of the id that still lacks a record of that
// kind, whatever the order in which the kinds arrive.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// GraphIDBit marks the launch ids of kernel nodes of CUDA graphs
// (GP_GRAPH_ID_BIT in shim/src/gp.h): one id for every replay of the node.
const GraphIDBit = uint64(1) << 63

// maxGraphNodes bounds the graph nodes whose replays are counted; beyond
// it, nodes with nothing pending are forgotten (their replay ordinals start
// over).
const maxGraphNodes = 1 << 16

// replayClockSlack is how far, once mapped to realtime, a device window may
// end before a launch call began and still be paired with it (clock
// calibration error). A window that ended earlier than that belongs to an
// earlier replay whose launch record was lost or already gone.
const replayClockSlack = time.Millisecond

// graphTable owns the runs of CUDA graph nodes: they are not in the
// launch table's pending map but queued per node here. It is a part of
// launchTable, which makes, queues and drops the runs it hands out.
type graphTable struct {
	o        *Options
	counters *Counters

	chains map[srcKey]*replayChain // graph node (id with GraphIDBit, or adopted from a capture) → its runs
	n      int                     // pending runs of graph nodes
	sweep  uint32                  // sweeps of chains (replayChain.touch)
}

// forget drops the nodes of source src (disconnected).
func (gt *graphTable) forget(src uint32) {
	for key := range gt.chains {
		if key.src == src {
			delete(gt.chains, key)
		}
	}
}

// runs is the number of pending runs of graph nodes.
func (gt *graphTable) runs() int { return gt.n }

// node returns the replay chain of graph node key, nil if none.
func (gt *graphTable) node(key srcKey) *replayChain { return gt.chains[key] }

// replayChain is the state of one graph node (source, launch id): its
// runs (launches) still pending, queued by what they wait for, and the
// replay count.
type replayChain struct {
	live  int    // runs pending
	next  uint64 // replay ordinal of the next launch record
	touch uint32 // graphTable.sweep when last used

	wantLaunch runQueue // runs with device records and no launch record
	wantExec   runQueue // runs with no Exec window (that will run on the device)
	wantWarps  runQueue // runs with a launch record and fewer warps than its grid has
	wantDone   runQueue // runs with a launch record and no completion record
	collect    *launch  // the run without launch record that Warp records go to

	// From the latest launch record: the node's kernel, device, threads
	// and warps (the same for every replay).
	k       *kernel
	dev     uint32
	threads uint64
	warps   uint64
}

// runQueue is a FIFO of the runs of one node that wait for one kind of
// record. Runs that no longer wait are dropped lazily from the front, and
// done ones from anywhere when they make up most of it.
type runQueue struct {
	q    []*launch
	head int
}

func (r *runQueue) push(l *launch, live int) {
	if n := len(r.q) - r.head; n >= 16 && n > 2*live {
		w := 0
		for _, x := range r.q[r.head:] {
			if !x.done {
				r.q[w] = x
				w++
			}
		}
		clear(r.q[w:])
		r.q, r.head = r.q[:w], 0
	}
	r.q = append(r.q, l)
}

// front returns the oldest run that wants is true of (nil if none),
// dropping the runs before it.
func (r *runQueue) front(wants func(*launch) bool) *launch {
	for r.head < len(r.q) {
		if l := r.q[r.head]; wants(l) {
			return l
		}
		r.q[r.head] = nil
		r.head++
	}
	r.q, r.head = r.q[:0], 0
	return nil
}

// pop drops the front run (the one front returned).
func (r *runQueue) pop() {
	r.q[r.head] = nil
	r.head++
	r.q, r.head = compact(r.q, r.head)
}

func (r *runQueue) reset() { r.q, r.head = nil, 0 }

func wantsLaunch(l *launch) bool { return !l.done && !l.have }
func wantsExec(l *launch) bool   { return !l.done && l.gpu.exec == nil }
func wantsWarps(l *launch) bool  { return !l.done && l.gpu.warps < expectedWarps(&l.rec) }
func wantsDone(l *launch) bool   { return !l.done && !l.completed }

// isGraph reports whether key is a graph node: an id with GraphIDBit (a
// node the shim numbered: explicit kernel nodes), or one that a
// cuGraphLaunch record carried (a node captured from a stream keeps the id
// of the launch it was captured from; see adoptCaptured).
func (gt *graphTable) isGraph(key srcKey) bool {
	if key.id&GraphIDBit != 0 {
		return true
	}
	_, ok := gt.chains[key]
	return ok
}

// adopt makes run l of a node captured from a stream take over the device
// records that reached its key before it was known to be a graph node
// (pending launch p, dropped), and queues it for the launch record.
func (gt *graphTable) adopt(l, p *launch) {
	c := l.graph.chain
	l.gpu.exec, l.gpu.warps, l.gpu.buffered = p.gpu.exec, p.gpu.warps, p.gpu.buffered
	l.gpu.firstStart, l.gpu.lastEnd, l.gpu.maxSkew = p.gpu.firstStart, p.gpu.lastEnd, p.gpu.maxSkew
	l.gpu.win = p.gpu.win
	c.wantLaunch.push(l, c.live)
	if l.gpu.exec == nil {
		c.wantExec.push(l, c.live)
		c.collect = l
	}
}

// chain returns the state of graph node key, creating it.
func (gt *graphTable) chain(key srcKey) *replayChain {
	c := gt.chains[key]
	if c == nil {
		if len(gt.chains) >= maxGraphNodes {
			gt.sweepChains()
		}
		c = &replayChain{}
		gt.chains[key] = c
	}
	c.touch = gt.sweep
	return c
}

// sweepChains forgets the nodes with nothing pending that were not used
// since the last sweep, or, if that frees nothing, all with nothing pending.
func (gt *graphTable) sweepChains() {
	for _, stale := range [2]bool{true, false} {
		for key, c := range gt.chains {
			if c.live == 0 && (!stale || c.touch != gt.sweep) {
				delete(gt.chains, key)
			}
		}
		if len(gt.chains) < maxGraphNodes {
			break
		}
	}
	gt.sweep++
}

// newRun makes a pending run of graph node key (launchTable.newRun queues
// it).
func (gt *graphTable) newRun(key srcKey, now time.Time) *launch {
	c := gt.chain(key)
	l := &launch{key: key, created: now, graph: graphRun{chain: c}}
	c.live++
	gt.n++
	return l
}

// dropRun forgets run l (done) of its node.
func (gt *graphTable) dropRun(l *launch) {
	c := l.graph.chain
	gt.n--
	if c.live--; c.live == 0 {
		c.wantLaunch.reset()
		c.wantExec.reset()
		c.wantWarps.reset()
		c.wantDone.reset()
	}
	if c.collect == l {
		c.collect = nil
	}
}

// endedBefore reports whether device time gpuEnd of dev lies more than
// replayClockSlack before host time monoStart, both mapped to realtime
// (false while either mapping is unknown).
func (gt *graphTable) endedBefore(src, dev uint32, gpuEnd, monoStart uint64) bool {
	e, ok1 := gt.o.Clock.GPUToReal(src, dev, gpuEnd)
	s, ok2 := gt.o.Clock.ClientMonoToReal(src, monoStart)
	return ok1 && ok2 && e+uint64(replayClockSlack) < s
}

// launchRun takes the run that launch record r of graph node key goes
// with: the oldest run with device records and no launch record (nil if
// none). orphan says that run's device window ended before the launch call
// began: its own launch record is lost, and launchTable.launchRun emits it
// and asks again.
func (gt *graphTable) launchRun(key srcKey, r *record.Launch) (l *launch, orphan bool) {
	c := gt.chain(key)
	if l = c.wantLaunch.front(wantsLaunch); l == nil {
		return nil, false
	}
	c.wantLaunch.pop()
	return l, gt.endedBefore(key.src, r.Device, l.gpu.lastEnd, r.EnqueueNS)
}

// launched queues run l, which just got its launch record, for the
// records it still lacks and numbers it.
func (gt *graphTable) launched(l *launch) {
	c := l.graph.chain
	r := &l.rec
	l.graph.replay = c.next
	c.next++
	c.k, c.dev, c.threads, c.warps = l.k, r.Device, launchThreads(r), expectedWarps(r)
	if r.Result != 0 {
		return
	}
	if l.gpu.exec == nil {
		c.wantExec.push(l, c.live)
	}
	if l.gpu.warps < c.warps {
		c.wantWarps.push(l, c.live)
	}
	if !l.completed {
		c.wantDone.push(l, c.live)
	}
}

// execRun returns the run that device window e of graph node key goes
// with: the oldest run that has none (nil if none: the window opens a new
// run, wantsLaunch); orphan when the window ended before that run's launch
// call began (its own launch record is lost or gone).
func (gt *graphTable) execRun(key srcKey, e *record.Exec) (l *launch, orphan bool) {
	c := gt.chain(key)
	if l = c.wantExec.front(wantsExec); l != nil {
		if l.have && gt.endedBefore(key.src, l.rec.Device, e.EndNS, l.rec.EnqueueNS) {
			gt.counters.LaunchesOrphan++
			return nil, true
		}
		c.wantExec.pop()
	}
	return l, false
}

// wantsLaunch queues new run l, opened by a device window, for its launch
// record.
func (gt *graphTable) wantsLaunch(l *launch) {
	c := l.graph.chain
	c.wantLaunch.push(l, c.live)
}

// warpRun returns the run that a Warp record of graph node key goes
// with: the oldest run with a launch record and fewer warps than its grid,
// else the run without launch record that collects warps (until its Exec
// window or as many warps as the node's grid has came); nil if none (the
// record opens a new run, collecting).
func (gt *graphTable) warpRun(key srcKey) *launch {
	c := gt.chain(key)
	if l := c.wantWarps.front(wantsWarps); l != nil {
		return l
	}
	if l := c.collect; l != nil && !l.have && l.gpu.exec == nil && (c.warps == 0 || l.gpu.warps < c.warps) {
		return l
	}
	return nil
}

// collecting makes new run l, opened by a Warp record, the run that
// collects its node's warps, waiting for its launch record and window.
func (gt *graphTable) collecting(l *launch) {
	c := l.graph.chain
	c.wantLaunch.push(l, c.live)
	c.wantExec.push(l, c.live)
	c.collect = l
}

// completionRun returns the oldest run of graph node key with a
// launch record and no completion record (nil if none).
func (gt *graphTable) completionRun(key srcKey) *launch {
	c := gt.chains[key]
	if c == nil {
		return nil
	}
	l := c.wantDone.front(wantsDone)
	if l != nil {
		c.wantDone.pop()
	}
	return l
}

// filtered takes the oldest run of graph node key that waits for its
// launch record, whose launch record came for a kernel filtered out (nil
// if none): launchTable drops it.
func (gt *graphTable) filtered(key srcKey) *launch {
	c := gt.chains[key]
	if c == nil {
		return nil
	}
	l := c.wantLaunch.front(wantsLaunch)
	if l != nil {
		c.wantLaunch.pop()
	}
	return l
}
