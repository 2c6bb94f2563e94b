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
	graphs   *graphTable
	clients  *clientTable
	hosts    *hostTable
	spans    *spanOut
	windows  *windowTable

	pending map[srcKey]*launch // launches but graph runs, also queued per client (client.go)
	queue   []*launch          // FIFO of pending launches (done ones are skipped)
	qhead   int
}

func (lt *launchTable) onLaunch(src uint32, r *record.Launch, now time.Time) {
	lt.clients.processName(r.PID) // while the process is alive: spans are built later
	lt.clients.clientOf(src).lastDev = r.Device
	k := lt.clients.kernelOf(src, r.Function)
	key := srcKey{src, r.LaunchID}
	var call *graphGroup // the cuGraphLaunch call of a node's record; its first record names it
	if r.API == record.APIGraphLaunch && src != HostProbeSource {
		call = lt.windows.groups.call(lt.clients.clientOf(src), r)
	}
	var seq uint64
	if src != HostProbeSource && r.Result == 0 {
		seq = lt.clients.streamCount(slotOf(src, r.Device, r.Stream, r.TID))
	}
	if !k.include {
		if src != HostProbeSource {
			lt.hosts.onShimLaunch(r.PID, nil, now) // the process runs with the shim all the same
		}
		lt.counters.LaunchesFilter++
		if lt.graphs.isGraph(key) {
			lt.graphs.filtered(key)
		} else if l := lt.pending[key]; l != nil {
			l.done = true
			lt.drop(l)
		}
		lt.windows.filtered(key, r.API)
		lt.windows.groups.add(lt.clients.clientOf(src), call, nil, k)
		return
	}
	if r.API == record.APIGraphLaunch && !lt.graphs.isGraph(key) {
		lt.graphs.adoptCaptured(key, now)
	}
	var l *launch
	if lt.graphs.isGraph(key) {
		l = lt.graphs.launchRun(key, r, now) // a replay of a graph node: its own run
	} else {
		if l = lt.pending[key]; l == nil {
			l = lt.newPending(key, now)
		} else if l.have {
			return // duplicate launch id: keep the first
		}
		l.gap.seq = seq
	}
	l.have, l.rec, l.k = true, *r, k
	for _, w := range l.gpu.buffered {
		lt.recordWarp(l, w)
	}
	l.gpu.buffered = nil
	if l.graph.chain != nil {
		lt.graphs.launched(l)
	}
	if call != nil && l.graph.call.g == nil {
		lt.windows.groups.add(lt.clients.clientOf(src), call, l, k)
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
	lt.clients.track(l)
	return l
}

// get returns the pending launch key (not a graph run), nil if none.
func (lt *launchTable) get(key srcKey) *launch { return lt.pending[key] }

// size is the number of pending launches (not graph runs).
func (lt *launchTable) size() int { return len(lt.pending) }

// enqueue queues a graph run for eviction and expiry (graph.go keys it).
func (lt *launchTable) enqueue(l *launch) { lt.queue = append(lt.queue, l) }

// kernelsInUse marks the kernels of the launches not done.
func (lt *launchTable) kernelsInUse(used map[*kernel]bool) {
	for _, l := range lt.queue[lt.qhead:] {
		if !l.done && l.k != nil {
			used[l.k] = true
		}
	}
}

// forget emits the pending launches of source src (disconnected) now:
// those without launch record count as orphans.
func (lt *launchTable) forget(src uint32, now time.Time) {
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
}

// makeRoom evicts launches while MaxPendingLaunches are pending: the oldest
// of source src when it holds half of them or more (so that one client
// cannot evict another's launches), else the oldest of all.
func (lt *launchTable) makeRoom(src uint32, now time.Time) {
	for len(lt.pending)+lt.graphs.runs() >= lt.o.MaxPendingLaunches {
		if c := lt.clients.get(src); c != nil && 2*c.pending >= lt.o.MaxPendingLaunches && lt.clients.evictOldestOf(c, now) {
			continue
		}
		lt.evictOldest(now)
	}
}

// drop forgets launch l (done).
func (lt *launchTable) drop(l *launch) {
	lt.clients.untrack(l)
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

func (lt *launchTable) onWarp(src uint32, w *record.Warp, now time.Time) {
	key := srcKey{src, w.LaunchID}
	var l *launch
	if lt.graphs.isGraph(key) {
		l = lt.graphs.warpRun(key, now)
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
		if l = lt.graphs.execRun(key, e, now); l == nil {
			return
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

// deviceDone says whether every device record the launch waits for is in:
// its Exec window, or one Warp record per warp; at once for a launch the
// shim marked unprobed (no device record of it will come).
func (l *launch) deviceDone() bool {
	return l.rec.Flags&record.LaunchUnprobed != 0 || l.gpu.exec != nil || l.gpu.warps >= expectedWarps(&l.rec)
}

// probed says whether the launch's own probes timed all of it: its Exec
// window, or every warp.
func (l *launch) probed() bool {
	return l.gpu.exec != nil || (l.have && l.gpu.warps > 0 && l.gpu.warps >= expectedWarps(&l.rec))
}

// devTime is a device timestamp of a launch: %globaltimer of its device
// (its probes'), or its client's CLOCK_MONOTONIC (mono: a driver window).
type devTime struct {
	ns   uint64
	mono bool
}

// devWindow is the device window the launch's spans and figures use: its
// probes' when they timed all of it (kernel_phases' Exec, every warp),
// else the driver's (record.Window), else the warps that came; ok is
// false when it has none.
func (l *launch) devWindow() (start, end devTime, ok bool) {
	switch {
	case l.probed():
	case l.gpu.win.ok:
		return devTime{l.gpu.win.start, true}, devTime{l.gpu.win.end, true}, true
	case l.gpu.warps == 0:
		return devTime{}, devTime{}, false
	}
	return devTime{l.gpu.firstStart, false}, devTime{l.gpu.lastEnd, false}, true
}

// window is the device window l's spans and figures use: devWindow's, or
// the driver's when devWindow's is the probes' and their device has no
// clock mapping (its calibration failed), so that a launch the driver
// timed always shows its window.
func (o *Options) window(l *launch) (start, end devTime, ok bool) {
	start, end, ok = l.devWindow()
	if ok && !start.mono && l.gpu.win.ok {
		if _, mapped := o.Clock.GPUToReal(l.key.src, l.rec.Device, start.ns); !mapped {
			return devTime{l.gpu.win.start, true}, devTime{l.gpu.win.end, true}, true
		}
	}
	return start, end, ok
}

// toReal maps device time t of source src and device dev to realtime ns.
func (o *Options) toReal(src, dev uint32, t devTime) (uint64, bool) {
	if t.mono {
		return o.Clock.ClientMonoToReal(src, t.ns)
	}
	return o.Clock.GPUToReal(src, dev, t.ns)
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

func (lt *launchTable) onThreadCount(src uint32, tc *record.ThreadCount) {
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
	s := lt.clients.procOf(src).of(k)
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
