package translate

// The graph table's runs: which run of a CUDA graph node each launch,
// device and completion record goes with (graph.go describes the
// pairing), and the queues of runs that wait for a record kind.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

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

// openRun makes a pending run of graph node key, for newRun to queue.
func (gt *graphTable) openRun(key srcKey, now time.Time) *launch {
	c := gt.chain(key)
	l := &launch{key: key, created: now, graph: graphRun{chain: c}}
	c.live++
	gt.n++
	return l
}

// runForLaunch takes the run that launch record r of graph node key goes
// with: the oldest run with device records and no launch record (nil if
// none). orphan says that run's device window ended before the launch call
// began: its own launch record is lost, and launchTable.launchRun emits it
// and asks again.
func (gt *graphTable) runForLaunch(key srcKey, r *record.Launch) (l *launch, orphan bool) {
	c := gt.chain(key)
	if l = c.wantLaunch.front(wantsLaunch); l == nil {
		return nil, false
	}
	c.wantLaunch.pop()
	return l, gt.endedBefore(key.src, r.Device, l.gpu.lastEnd, r.EnqueueNS)
}

// endedBefore reports whether device time gpuEnd of dev lies more than
// replayClockSlack before host time monoStart, both mapped to realtime
// (false while either mapping is unknown).
func (gt *graphTable) endedBefore(src, dev uint32, gpuEnd, monoStart uint64) bool {
	e, ok1 := gt.o.Clock.GPUToReal(src, dev, gpuEnd)
	s, ok2 := gt.o.Clock.ClientMonoToReal(src, monoStart)
	return ok1 && ok2 && e+uint64(replayClockSlack) < s
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

// filteredRun takes the oldest run of graph node key that waits for its
// launch record, whose launch record came for a kernel filtered out (nil
// if none): launchTable drops it.
func (gt *graphTable) filteredRun(key srcKey) *launch {
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
