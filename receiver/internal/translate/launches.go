package translate

// The launch table's record path: each device, launch and completion
// record finds its pending launch here, or a run of a CUDA graph node
// (graph.go), making room for a new one when none waits; lifecycle.go
// finishes them.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// track counts pending launch l in its source's queue.
func (lt *launchTable) track(l *launch) {
	q := lt.pending.of(l.key.src)
	q.trim()
	q.pending++
	q.queue = append(q.queue, l.ref())
	l.q.tracked = true
}

// trim drops the finished launches at the head of q and compacts it, as
// compactQueue does the launch table's.
func (q *srcQueue) trim() {
	for q.qhead < len(q.queue) && !q.queue[q.qhead].tracked() {
		q.queue[q.qhead] = launchRef{}
		q.qhead++
	}
	if q.qhead > 1024 && q.qhead*2 > len(q.queue) {
		n := copy(q.queue, q.queue[q.qhead:])
		clear(q.queue[n:])
		q.queue, q.qhead = q.queue[:n], 0
	}
}

// untrack uncounts launch l (done) from its source, once, and releases
// its kernel.
func (lt *launchTable) untrack(l *launch) {
	if !l.q.tracked {
		return
	}
	l.q.tracked = false
	if l.k != nil {
		l.k.live--
	}
	if q := lt.pending.find(l.key.src); q != nil {
		q.pending--
	}
}

// bind gives launch l (tracked) its kernel, which it keeps in use until
// it is done.
func (l *launch) bind(k *kernel) {
	if l.k != nil && l.q.tracked {
		l.k.live--
	}
	l.k = k
	if l.q.tracked {
		k.live++
	}
}

// evictOldestOf emits the oldest pending launch of source queue q early;
// false when it has none.
func (lt *launchTable) evictOldestOf(q *srcQueue, now time.Time) bool {
	defer q.trim()
	for q.qhead < len(q.queue) {
		r := q.queue[q.qhead]
		q.queue[q.qhead] = launchRef{}
		q.qhead++
		if r.tracked() && !r.l.done {
			lt.counters.LaunchesEvicted++
			lt.finish(r.l, now)
			return true
		}
	}
	return false
}

// onLaunch takes launch record r of source src, of kernel k (the client
// table's binding of its function handle), made under application span
// app (its thread's span context; none: its trace is its own).
func (lt *launchTable) onLaunch(src uint32, r *record.Launch, k *kernel, app appSpan, now time.Time) {
	key := srcKey{src, r.LaunchID}
	var call *graphGroup // the cuGraphLaunch call of a node's record; its first record names it
	if r.API == record.APIGraphLaunch && src != HostProbeSource {
		call = lt.windows.call(src, r)
	}
	var seq uint64
	if src != HostProbeSource && r.Result == 0 {
		seq = lt.streams.count(slotOf(src, r.Device, r.Stream, r.TID))
	}
	if !k.include {
		if src != HostProbeSource {
			lt.hosts.onShimLaunch(r.PID, nil, now) // the process runs with the shim all the same
		}
		lt.counters.LaunchesFilter++
		var l *launch
		if lt.graphs.isGraph(key) {
			l = lt.graphs.filteredRun(key)
		} else {
			l = lt.pending.get(key)
		}
		if l != nil {
			l.done = true
			lt.drop(l)
		}
		lt.windows.filtered(key, r.API)
		lt.windows.addNode(src, call, nil, k)
		return
	}
	if r.API == record.APIGraphLaunch && !lt.graphs.isGraph(key) {
		lt.adoptCaptured(key, now)
	}
	var l *launch
	if lt.graphs.isGraph(key) {
		l = lt.launchRun(key, r, now) // a replay of a graph node: its own run
	} else {
		if l = lt.pending.get(key); l == nil {
			l = lt.newPending(key, now)
		} else if l.have {
			return // duplicate launch id: keep the first
		}
		l.gap.seq = seq
	}
	l.have, l.rec, l.host.app = true, *r, app
	l.bind(k)
	for _, w := range l.gpu.buffered {
		lt.recordWarp(l, w)
	}
	l.gpu.buffered = nil
	if l.graph.chain != nil {
		lt.graphs.launched(l)
	}
	if call != nil && l.graph.call.g == nil {
		lt.windows.addNode(src, call, l, k)
	}
	if src != HostProbeSource {
		lt.hosts.onShimLaunch(r.PID, l, now)
	}
	lt.maybeFinish(l, now)
}

func (lt *launchTable) newPending(key srcKey, now time.Time) *launch {
	lt.makeRoom(key.src, now)
	l := lt.free.get()
	l.key, l.created = key, now
	lt.pending.put(key, l)
	lt.queue = append(lt.queue, l.ref())
	lt.track(l)
	return l
}

// newRun adds a pending run of graph node key (graphTable.openRun).
func (lt *launchTable) newRun(key srcKey, now time.Time) *launch {
	lt.makeRoom(key.src, now)
	l := lt.graphs.openRun(key, now)
	lt.queue = append(lt.queue, l.ref())
	lt.track(l)
	return l
}

// launchRun returns the run that launch record r of graph node key goes
// with: the oldest run with device records and no launch record, else a
// new one. A failed launch (nothing ran) gets a run of its own. Runs whose
// device window ended before the launch call began are orphans (their
// launch record is lost): they are emitted on the way.
func (lt *launchTable) launchRun(key srcKey, r *record.Launch, now time.Time) *launch {
	for r.Result == 0 {
		l, orphan := lt.graphs.runForLaunch(key, r)
		if l == nil {
			break
		}
		if !orphan {
			return l
		}
		lt.finish(l, now) // counted as an orphan
	}
	return lt.newRun(key, now)
}

// adoptCaptured makes key a graph node at the first cuGraphLaunch record
// that carries it. Shims before capture.c wrote a launch record with that
// id when the launch was captured, and it never ran: it is dropped
// (counted in LaunchesCaptured). Device records that reached the key
// meanwhile (a replay's window read before its launch record) become the
// node's first run.
func (lt *launchTable) adoptCaptured(key srcKey, now time.Time) {
	lt.graphs.chain(key) // a graph node from now on
	p := lt.pending.get(key)
	if p == nil {
		return
	}
	p.done = true
	lt.drop(p)
	if p.have {
		lt.counters.LaunchesCaptured++
	}
	if p.gpu.exec == nil && p.gpu.warps == 0 {
		return
	}
	lt.graphs.adopt(lt.newRun(key, now), p)
}

// makeRoom evicts launches while MaxPendingLaunches are pending: the
// oldest of the source that holds the most (src on a tie), so that a
// source holding its fair share or less loses none to another's flood.
func (lt *launchTable) makeRoom(src uint32, now time.Time) {
	for lt.size() >= lt.o.MaxPendingLaunches {
		if q := lt.largest(src); q != nil && lt.evictOldestOf(q, now) {
			continue
		}
		lt.evictOldest(now)
	}
}

// largest returns the queue of the source with the most pending
// launches, src's if it holds as many; nil if none has one.
func (lt *launchTable) largest(src uint32) *srcQueue {
	best := lt.pending.find(src)
	for _, q := range lt.pending.bySrc {
		if q.pending > 0 && (best == nil || q.pending > best.pending) {
			best = q
		}
	}
	return best
}

// drop forgets launch l (done).
func (lt *launchTable) drop(l *launch) {
	lt.untrack(l)
	if l.graph.chain != nil {
		lt.graphs.dropRun(l)
	} else {
		lt.pending.del(l.key)
	}
	lt.windows.released(l)
}

// onWindow joins driver window w of source src to its launch, which may
// then be complete.
func (lt *launchTable) onWindow(src uint32, w *record.Window, now time.Time) *kernel {
	if w.Flags&record.WindowGraphExec != 0 {
		lt.onWholeGraph(src, w, now)
		return nil
	}
	l := lt.windows.match(src, w, lt.pending.get(srcKey{src, w.LaunchID}))
	if l == nil {
		return nil
	}
	k := l.k
	lt.maybeFinish(l, now)
	return k
}

func (lt *launchTable) onWarp(src uint32, w *record.Warp, now time.Time) {
	key := srcKey{src, w.LaunchID}
	var l *launch
	if lt.graphs.isGraph(key) {
		if l = lt.graphs.warpRun(key); l == nil {
			l = lt.newRun(key, now)
			lt.graphs.collecting(l)
		}
	} else if l = lt.pending.get(key); l == nil {
		l = lt.newPending(key, now)
	}
	exec := w.EndNS - w.StartNS
	skew := w.ExitSkewNS()
	if l.gpu.warps == 0 || w.StartNS < l.gpu.firstStart {
		l.gpu.firstStart = w.StartNS
	}
	l.gpu.lastEnd = max(l.gpu.lastEnd, w.EndNS)
	l.gpu.maxSkew = max(l.gpu.maxSkew, skew)
	l.gpu.warps++
	if l.have {
		lt.recordWarp(l, warpTimes{exec, skew})
	} else if len(l.gpu.buffered) < maxBufferedWarps {
		l.gpu.buffered = append(l.gpu.buffered, warpTimes{exec, skew})
	}
	lt.maybeFinish(l, now)
}

// onExec takes a launch's device window, aggregated on the GPU: it stands
// for all of the launch's warps. The windows of a CUDA graph node (whose
// launch id is the same for every replay) go to its runs in order
// (graphTable.execRun); another launch id keeps its first window.
func (lt *launchTable) onExec(src uint32, e *record.Exec, now time.Time) {
	key := srcKey{src, e.LaunchID}
	var l *launch
	if lt.graphs.isGraph(key) {
		var orphan bool
		if l, orphan = lt.graphs.execRun(key, e); orphan {
			return
		} else if l == nil {
			l = lt.newRun(key, now)
			lt.graphs.wantsLaunch(l)
		}
	} else if l = lt.pending.get(key); l == nil {
		l = lt.newPending(key, now)
	} else if l.gpu.exec != nil {
		lt.counters.ExecDuplicate++
		return
	}
	x := *e
	l.gpu.exec = &x
	if l.gpu.warps == 0 || e.StartNS < l.gpu.firstStart {
		l.gpu.firstStart = e.StartNS
	}
	l.gpu.lastEnd = max(l.gpu.lastEnd, e.EndNS)
	lt.maybeFinish(l, now)
}

func (lt *launchTable) recordWarp(l *launch, w warpTimes) {
	s := l.k.series.dev(l.rec.Device)
	s.warpExec.Record(float64(w.exec) / 1e9)
	s.warpSkew.Record(float64(w.skew) / 1e9)
}

func (lt *launchTable) onCompletion(src uint32, c *record.Completion, now time.Time) {
	key := srcKey{src, c.LaunchID}
	var l *launch
	if lt.graphs.isGraph(key) {
		l = lt.graphs.completionRun(key)
	} else {
		l = lt.pending.get(key)
	}
	lt.pending.of(src).completes = true
	if l == nil {
		return // already emitted (timeout) or filtered out
	}
	l.completed, l.completeNS, l.completeAt = true, c.CompleteNS, now
	lt.maybeFinish(l, now)
}

// onThreadCount folds thread counts tc of source src into the series of
// its launch's kernel in proc, the series of src's process.
func (lt *launchTable) onThreadCount(src uint32, tc *record.ThreadCount, proc *procSeries) {
	key := srcKey{src, tc.LaunchID}
	var k *kernel // nil: launch unknown
	var dev uint32
	var threads uint64
	if lt.graphs.isGraph(key) {
		// Every replay of a graph node is the same kernel on the same grid.
		if c := lt.graphs.node(key); c != nil && c.k != nil {
			k, dev, threads = c.k, c.dev, c.threads
		}
	} else if l := lt.pending.get(key); l != nil && l.have {
		k, dev, threads = l.k, l.rec.Device, launchThreads(&l.rec)
	}
	s := proc.of(k)
	ds := s.dev(dev)
	h := &ds.threadExec
	for _, c := range tc.Counts {
		h.Record(float64(c))
	}
	if !lt.o.Metrics.PerThreadSeries || k == nil || threads > uint64(lt.o.Metrics.MaxThreadSeries) {
		return
	}
	if ds.perThread == nil {
		ds.perThread = map[uint32]uint64{}
	}
	for i, c := range tc.Counts {
		idx := tc.FirstThread + uint32(i)
		if _, ok := ds.perThread[idx]; ok || len(ds.perThread) < lt.o.Metrics.MaxThreadSeries {
			ds.perThread[idx] += c
		}
	}
}

// launchThreads is the number of threads of the launch.
func launchThreads(r *record.Launch) uint64 {
	return uint64(r.Grid[0]) * uint64(r.Grid[1]) * uint64(r.Grid[2]) *
		uint64(r.Block[0]) * uint64(r.Block[1]) * uint64(r.Block[2])
}

// expectedWarps is the number of warps of the launch.
func expectedWarps(r *record.Launch) uint64 {
	return uint64(r.Grid[0]) * uint64(r.Grid[1]) * uint64(r.Grid[2]) * r.WarpsPerBlock()
}
