package translate

// Recycling emitted launches. A pending launch is some 450 bytes with
// pointers, one allocation per launch; an emitted one is kept on the
// launch table's free list and reset for the next launch instead. What
// may still point at an emitted launch:
//
//   - the launch table's queues (queue, srcQueue.queue): their entries
//     carry the launch's generation when queued (launchRef), and a reused
//     launch has the next one, so the entry of an earlier life is stale
//     and skipped like a done one;
//   - its host thread (hostThread.launches): finish unregisters it;
//   - its graph launch call's node (groupNode.l): drop releases it;
//   - the runs of a graph node (runQueue): graph runs are never recycled.
//
// Launches dropped without being emitted (orphans, filtered, captured)
// are left to the collector: they are rare, and some of them lend their
// device records to a graph run (adoptCaptured).

// maxFreeLaunches bounds the free list: after a burst the launch table
// keeps at most this many emitted launches (about 1.8 MB) for new ones.
const maxFreeLaunches = 4096

// queued is a launch's life in the launch table: its generation, one
// more each time it is reused, and whether its source counts it (track).
type queued struct {
	gen     uint32
	tracked bool
}

// launchRef is a queue's entry: a launch and its generation when queued.
type launchRef struct {
	l   *launch
	gen uint32
}

// ref is the queue entry of l as it is now.
func (l *launch) ref() launchRef { return launchRef{l, l.q.gen} }

// current says whether r's launch is still in the life it was queued in.
func (r launchRef) current() bool { return r.l != nil && r.l.q.gen == r.gen }

// live says whether r's launch is pending: current and not done.
func (r launchRef) live() bool { return r.current() && !r.l.done }

// tracked says whether r's launch is current and counted by its source.
func (r launchRef) tracked() bool { return r.current() && r.l.q.tracked }

// freeList is the launch table's emitted launches, for new ones.
type freeList struct{ l []*launch }

// get returns a launch for a new pending one: zero but for its
// generation, taken from the list when it has one.
func (f *freeList) get() *launch {
	n := len(f.l)
	if n == 0 {
		return &launch{}
	}
	l := f.l[n-1]
	f.l[n-1] = nil
	f.l = f.l[:n-1]
	*l = launch{q: queued{gen: l.q.gen + 1}}
	return l
}

// put keeps emitted launch l (done, dropped, unregistered) for a new one,
// unless it is a graph run or the list is full.
func (f *freeList) put(l *launch) {
	if l.graph.chain != nil || len(f.l) >= maxFreeLaunches {
		return
	}
	f.l = append(f.l, l)
}
