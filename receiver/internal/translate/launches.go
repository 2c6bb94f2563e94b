package translate

// The launch table: launches wait here, keyed by (source, launch id),
// until their launch, device and completion records are in (or a timeout,
// eviction or disconnect ends the wait); lifecycle.go finishes them.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// maxBufferedWarps bounds the warp durations a launch holds while its launch
// record has not been read yet (so its kernel name is unknown).
const maxBufferedWarps = 256

// launch is one pending launch.
type launch struct {
	key        srcKey
	have       bool // launch record seen
	rec        record.Launch
	k          *kernel
	created    time.Time
	done       bool
	completed  bool
	completeAt time.Time
	warpsAt    time.Time // when Expire first saw every warp in (no completion record yet)
	tracked    bool      // counted in its client's pending (client.go)
	completeNS uint64
	gpu        gpuTimes  // from its device records
	host       hostLink  // its host calls (host probes)
	graph      graphRun  // its node, if a run of a CUDA graph node
	gap        streamGap // its place on its stream
}

// gpuTimes are a launch's device records, folded.
type gpuTimes struct {
	warps      uint64
	exec       *record.Exec // the launch's device window from kernel_phases (nil until it comes)
	firstStart uint64
	lastEnd    uint64
	maxSkew    uint64
	buffered   []warpTimes // warp durations seen before the launch record
	win        monoWindow  // its device window as the driver timed it (windows.go)
}

// monoWindow is a launch's device window from a record.Window, in the
// client's CLOCK_MONOTONIC; ok is false until it comes.
type monoWindow struct {
	start, end uint64
	ok         bool
}

// hostLink ties a launch to its host calls (host probes).
type hostLink struct {
	calls []*hostCall // host launch calls nested with it
	th    *hostThread // the host state of its thread, while registered there
	since time.Time   // when it first waited for host calls of its thread
}

// graphRun places a run of a CUDA graph node (see graph.go, isGraph): its
// node and replay ordinal (how many launch records of its id came before
// its own); chain is nil for other launches. call is its node of a
// cuGraphLaunch call, for driver windows (graphgroups.go).
type graphRun struct {
	chain  *replayChain
	replay uint64
	call   groupRef
}

// streamGap is a launch's place on its stream (streamgap.go): its count
// there (0: not counted), and once finished, the stream's idle time
// before it and the host's part of it.
type streamGap struct {
	seq                uint64
	idleNS, hostWaitNS uint64
	known, idleKnown   bool
}

type warpTimes struct{ exec, skew uint64 }

// launchTable owns the pending launches (graph runs are in graphTable):
// by key, and in creation order for eviction and expiry.
type launchTable struct {
	o        *Options
	counters *Counters
	graphs   *graphTable  // runs of CUDA graph nodes (graph.go)
	windows  *windowTable // driver windows, graph launch calls, coverage (windows.go, graphgroups.go, coverage.go)
	hosts    *hostTable   // host calls and the shim-less approximation (hostcalls.go, approx.go)
	spans    *spanOut

	pending map[srcKey]*launch // launches but graph runs, also queued per source (bySrc)
	queue   []*launch          // FIFO of pending launches (done ones are skipped)
	qhead   int
	bySrc   map[uint32]*srcQueue // each source's pending launches and graph runs, for makeRoom
	streams streamTable          // launch order per stream (streamgap.go)
}

// srcQueue is one source's pending launches and graph runs: how many, and
// in creation order (done ones are skipped).
type srcQueue struct {
	pending int
	queue   []*launch
	qhead   int
}

// track counts pending launch l in its source's queue.
func (lt *launchTable) track(l *launch) {
	q := lt.bySrc[l.key.src]
	if q == nil {
		q = &srcQueue{}
		lt.bySrc[l.key.src] = q
	}
	q.trim()
	q.pending++
	q.queue = append(q.queue, l)
	l.tracked = true
}

// trim drops the finished launches at the head of q and compacts it, as
// compactQueue does the launch table's.
func (q *srcQueue) trim() {
	for q.qhead < len(q.queue) && !q.queue[q.qhead].tracked {
		q.queue[q.qhead] = nil
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
	if !l.tracked {
		return
	}
	l.tracked = false
	if l.k != nil {
		l.k.live--
	}
	if q := lt.bySrc[l.key.src]; q != nil {
		q.pending--
	}
}

// bind gives launch l (tracked) its kernel, which it keeps in use until
// it is done.
func (l *launch) bind(k *kernel) {
	if l.k != nil && l.tracked {
		l.k.live--
	}
	l.k = k
	if l.tracked {
		k.live++
	}
}

// evictOldestOf emits the oldest pending launch of source queue q early;
// false when it has none.
func (lt *launchTable) evictOldestOf(q *srcQueue, now time.Time) bool {
	defer q.trim()
	for q.qhead < len(q.queue) {
		l := q.queue[q.qhead]
		q.queue[q.qhead] = nil
		q.qhead++
		if l.tracked && !l.done {
			lt.counters.LaunchesEvicted++
			lt.finish(l, now)
			return true
		}
	}
	return false
}

// onLaunch takes launch record r of source src, of kernel k (the client
// table's binding of its function handle).
func (lt *launchTable) onLaunch(src uint32, r *record.Launch, k *kernel, now time.Time) {
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
			l = lt.graphs.filtered(key)
		} else {
			l = lt.pending[key]
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
		if l = lt.pending[key]; l == nil {
			l = lt.newPending(key, now)
		} else if l.have {
			return // duplicate launch id: keep the first
		}
		l.gap.seq = seq
	}
	l.have, l.rec = true, *r
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
	l := &launch{key: key, created: now}
	lt.pending[key] = l
	lt.queue = append(lt.queue, l)
	lt.track(l)
	return l
}

// size is the number of pending launches and graph runs.
func (lt *launchTable) size() int { return len(lt.pending) + lt.graphs.runs() }

// newRun adds a pending run of graph node key (graph.go keys it).
func (lt *launchTable) newRun(key srcKey, now time.Time) *launch {
	lt.makeRoom(key.src, now)
	l := lt.graphs.newRun(key, now)
	lt.queue = append(lt.queue, l)
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
		l, orphan := lt.graphs.launchRun(key, r)
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
	p := lt.pending[key]
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

// forget emits the pending launches of source src (disconnected) now:
// those without launch record count as orphans. Then it drops the
// source's state: its queue, streams, graph nodes, and windows (pid: its
// process, 0: unknown).
func (lt *launchTable) forget(src, pid uint32, now time.Time) {
	for _, l := range lt.queue[lt.qhead:] {
		if l != nil && !l.done && l.key.src == src {
			if l.have {
				lt.finish(l, now)
			} else {
				lt.counters.LaunchesOrphan++
				l.done = true
				lt.drop(l)
			}
		}
	}
	delete(lt.bySrc, src)
	lt.streams.forget(src)
	lt.windows.forget(src, pid)
	lt.graphs.forget(src)
}

// makeRoom evicts launches while MaxPendingLaunches are pending: the oldest
// of source src when it holds half of them or more (so that one client
// cannot evict another's launches), else the oldest of all.
func (lt *launchTable) makeRoom(src uint32, now time.Time) {
	for len(lt.pending)+lt.graphs.runs() >= lt.o.MaxPendingLaunches {
		if q := lt.bySrc[src]; q != nil && 2*q.pending >= lt.o.MaxPendingLaunches && lt.evictOldestOf(q, now) {
			continue
		}
		lt.evictOldest(now)
	}
}

// drop forgets launch l (done).
func (lt *launchTable) drop(l *launch) {
	lt.untrack(l)
	lt.windows.released(l)
	if l.graph.chain != nil {
		lt.graphs.dropRun(l)
		return
	}
	delete(lt.pending, l.key)
}

func (lt *launchTable) evictOldest(now time.Time) {
	for lt.qhead < len(lt.queue) {
		l := lt.queue[lt.qhead]
		lt.queue[lt.qhead] = nil
		lt.qhead++
		if !l.done {
			lt.counters.LaunchesEvicted++
			lt.finish(l, now)
			break
		}
	}
	lt.compactQueue()
}

func (lt *launchTable) compactQueue() {
	if lt.qhead > 1024 && lt.qhead*2 > len(lt.queue) {
		n := copy(lt.queue, lt.queue[lt.qhead:])
		clear(lt.queue[n:])
		lt.queue, lt.qhead = lt.queue[:n], 0
	}
}

// onWindow joins driver window w of source src to its launch, which may
// then be complete.
func (lt *launchTable) onWindow(src uint32, w *record.Window, now time.Time) {
	if l := lt.windows.match(src, w, lt.pending[srcKey{src, w.LaunchID}]); l != nil {
		lt.maybeFinish(l, now)
	}
}

// onHostCall takes host call c (host probes) and finishes the held shim
// launches it settled.
func (lt *launchTable) onHostCall(c *record.HostCall, now time.Time) {
	for _, l := range lt.hosts.onHostCall(c, now) {
		if !l.done {
			lt.finish(l, now)
		}
	}
}

func (lt *launchTable) onWarp(src uint32, w *record.Warp, now time.Time) {
	key := srcKey{src, w.LaunchID}
	var l *launch
	if lt.graphs.isGraph(key) {
		if l = lt.graphs.warpRun(key); l == nil {
			l = lt.newRun(key, now)
			lt.graphs.collecting(l)
		}
	} else if l = lt.pending[key]; l == nil {
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
// launch id is the same for every replay) go to its runs in order (see
// graph.go); a second window for any other launch id keeps the first.
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
	} else if l = lt.pending[key]; l == nil {
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
		l = lt.pending[key]
	}
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
	} else if l := lt.pending[key]; l != nil && l.have {
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
