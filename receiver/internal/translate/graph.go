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

import "time"

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

func (r *runQueue) reset() { r.q, r.head = nil, 0 }

func wantsLaunch(l *launch) bool { return !l.done && !l.have }
func wantsExec(l *launch) bool   { return !l.done && l.gpu.exec == nil }
func wantsWarps(l *launch) bool  { return !l.done && l.gpu.warps < expectedWarps(&l.rec) }
func wantsDone(l *launch) bool   { return !l.done && !l.completed }

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
