package translate

// A pending launch and the launch table's state: launches wait here,
// keyed by (source, launch id), until their launch, device and completion
// records are in (or a timeout, eviction or disconnect ends the wait).
// launches.go pairs the records with them, graph runs included;
// lifecycle.go finishes them.

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
	q          queued    // its life and place in the launch table (recycle.go)
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
	untimed    bool   // the driver ran it but gave it no timestamps (record.WindowUntimed)
	whole      bool   // the window is its graph launch's whole one (record.WindowGraphExec), not its kernel's
	nodes      uint32 // with whole: the kernel nodes of that launch call
}

// hostLink ties a launch to what ran over it on its host thread: its host
// calls (host probes) and the application's span (spancontext.go).
type hostLink struct {
	app   appSpan     // the application span it ran under (none: its trace is its own)
	calls []*hostCall // host launch calls nested with it
	th    *hostThread // the host state of its thread, while registered there
	since time.Time   // when it first waited for host calls of its thread
}

// graphRun places a run of a CUDA graph node (see graph.go,
// graphTable.isGraph): its node and replay ordinal (how many launch
// records of its id came before its own); chain is nil for other
// launches. call is its node of a
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

	pending pendingSet  // launches but graph runs by key, and each source's queue (pendingset.go)
	queue   []launchRef // FIFO of pending launches (done and stale ones are skipped)
	qhead   int
	streams streamTable // launch order per stream (streamgap.go)
	free    freeList    // emitted launches for new ones (recycle.go)
}

// srcQueue is one source's pending launches and graph runs: how many, and
// in creation order (done and stale ones are skipped), for makeRoom; its
// pending launches but graph runs by id; and whether the source sends
// completion records.
type srcQueue struct {
	src       uint32
	pending   int
	queue     []launchRef
	qhead     int
	ids       idTable
	completes bool // a completion record of it came: its launches wait a grace for theirs
}

// endsWithRecords says whether a launch of source src is over once its
// device records are in, with no grace for a completion record: the
// source reports driver windows (the shim, which writes no completion
// records) and has sent no completion record.
func (lt *launchTable) endsWithRecords(src uint32) bool {
	if q := lt.pending.find(src); q != nil && q.completes {
		return false
	}
	return lt.windows.on(src)
}

// size is the number of pending launches and graph runs.
func (lt *launchTable) size() int { return lt.pending.n + lt.graphs.runs() }

// forget emits the pending launches of source src (disconnected) now:
// those without launch record count as orphans. Then it drops the
// source's state: its queue, streams, graph nodes, and windows (pid: its
// process, 0: unknown).
func (lt *launchTable) forget(src, pid uint32, now time.Time) {
	for _, r := range lt.queue[lt.qhead:] {
		if l := r.l; r.live() && l.key.src == src {
			if l.have {
				lt.finish(l, now)
			} else {
				lt.counters.LaunchesOrphan++
				l.done = true
				lt.drop(l)
			}
		}
	}
	lt.pending.forget(src)
	lt.streams.forget(src)
	lt.windows.forget(src, pid)
	lt.graphs.forget(src)
}

func (lt *launchTable) evictOldest(now time.Time) {
	for lt.qhead < len(lt.queue) {
		r := lt.queue[lt.qhead]
		lt.queue[lt.qhead] = launchRef{}
		lt.qhead++
		if r.live() {
			lt.counters.LaunchesEvicted++
			lt.finish(r.l, now)
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
