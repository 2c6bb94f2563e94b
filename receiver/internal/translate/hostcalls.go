package translate

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// HostProbeSource is the source id of the records of the built-in host
// probes (uprobes on libcudart and libcuda: HostCall and KernelName
// records of many processes). The receiver numbers its shim sources from 1
// up, one per agent connection, so this value never names one.
const HostProbeSource uint32 = math.MaxUint32

// DefaultHostCallGrace is how long a host call waits for the records it
// joins with when Options.Host.HostCallGrace is 0.
const DefaultHostCallGrace = 100 * time.Millisecond

// DefaultMaxHostCalls bounds each per-process structure of host calls when
// Options.Host.MaxHostCalls is 0.
const DefaultMaxHostCalls = 4096

// Bounds of the host-call state that have no option.
const (
	maxHostProcs     = 4096    // processes with host-call state
	maxHostThreads   = 4096    // threads remembered per process
	maxHostPerLaunch = 8       // host calls nested with one shim launch
	maxHostNames     = 1 << 16 // (pid, function handle) → name bindings of host probes
)

// hostCall is one host call waiting to be turned into spans.
type hostCall struct {
	rec      record.HostCall
	arrived  time.Time
	taken    bool        // consumed out of a queue (nested under another call, or matched)
	children []*hostCall // calls of the same thread made inside this one
}

// hostThread is what the translator knows of one application thread.
type hostThread struct {
	// lastExit is the latest exit_ns of a call of this thread that has
	// arrived. Host calls come from one kernel ring buffer, written when a
	// call returns, so the calls of one thread arrive in the order they
	// returned: once a call that returned after a shim launch's return_ns
	// has arrived, every host call enclosing or inside that launch has too.
	lastExit uint64
	launches []*launch // pending shim launches of this thread with their launch record
	held     int       // how many of them wait for host calls (holdSince set)
}

// hostTable owns the host-call state: per process, the calls waiting to
// nest with shim launches or, for processes without the shim, to close
// approximate kernel spans (approx.go); the kernel names of host probes;
// and the per-API call durations.
type hostTable struct {
	o        *Options
	counters *Counters
	start    pcommon.Timestamp
	spans    *spanOut
	series   *seriesStore

	procs    map[uint32]*hostProc // pid → host-call state
	names    map[pidHandle]hostName
	oldNames map[pidHandle]hostName
	dur      *nodeDurations // the Node's: host calls of every shard's processes
}

// hostProc is the host-call state of one process.
//
// Which processes run with the shim: a pid is "with the shim" from the
// first Launch record of it that arrives from a shim source (any source
// but HostProbeSource) on. Until then none of its host calls is committed
// to being shim-less: each waits Options.Host.HostCallGrace after its arrival
// in the deferred queue, so a fresh process whose first shim records are
// read after its first host calls still nests them. A call that has waited
// the grace is handled as a shim-less process's call (approximate kernel
// spans). When the first shim launch record arrives, the launch calls still
// deferred move to the unmatched list, where shim launches take them.
type hostProc struct {
	pid        uint32
	shim       bool // a shim launch record of pid arrived
	hostSeen   bool // a host call of pid arrived
	noHost     bool // a shim launch waited the grace without any host call of pid: stop holding its launches
	lastActive time.Time
	threads    map[uint32]*hostThread

	// Launch calls of a shim process that no pending shim launch took yet,
	// in arrival order; emitted alone after the grace.
	unmatched []*hostCall
	uhead     int

	// Other calls (and, before the shim is known, launch calls too), in
	// enter_ns order; handled after the grace, when the calls nested in
	// them (which return, so arrive, first) are in.
	deferred []*hostCall
	dhead    int

	shimless shimless // the approximation's state (approx.go)
}

// shimless is a process's state for approximate kernel spans (approx.go).
type shimless struct {
	// Shim-less launches waiting for the sync that closes them, per stream.
	streams map[streamKey][]*openLaunch
	nOpen   int

	// Streams with a capture open, the capture's own stream and those that
	// joined it by waiting on one of its events.
	capturing map[streamKey]capture
	// Where each event was last recorded.
	events map[uint64]eventRec
	// Per stream, the event waits a sync of it still has to follow.
	waits map[streamKey][]streamWait
	// Streams whose creation was seen: blocking (true) or not (legacy.go).
	blocking map[streamKey]bool
}

func (p *hostProc) thread(tid uint32) *hostThread {
	if th, ok := p.threads[tid]; ok {
		return th
	}
	if len(p.threads) >= maxHostThreads {
		for k, th := range p.threads {
			if len(th.launches) == 0 {
				delete(p.threads, k)
			}
		}
	}
	th := &hostThread{}
	p.threads[tid] = th
	return th
}

// idle reports whether p holds nothing that still has to be emitted.
func (p *hostProc) idle() bool {
	if p.uhead < len(p.unmatched) || p.dhead < len(p.deferred) || p.shimless.nOpen > 0 {
		return false
	}
	for _, th := range p.threads {
		if len(th.launches) > 0 {
			return false
		}
	}
	return true
}

func (ht *hostTable) grace() time.Duration {
	return ht.o.Host.HostCallGrace
}

// procOf returns the host-call state of pid, creating it.
func (ht *hostTable) procOf(pid uint32, now time.Time) *hostProc {
	if p, ok := ht.procs[pid]; ok {
		p.lastActive = now
		return p
	}
	if len(ht.procs) >= maxHostProcs {
		ht.evictProcs(now)
	}
	p := &hostProc{pid: pid, lastActive: now, threads: map[uint32]*hostThread{}, shimless: shimless{
		streams: map[streamKey][]*openLaunch{}, capturing: map[streamKey]capture{},
		events: map[uint64]eventRec{}, waits: map[streamKey][]streamWait{}, blocking: map[streamKey]bool{}}}
	ht.procs[pid] = p
	return p
}

// evictProcs forgets the processes with nothing pending; if all have
// something, it flushes the least recently active one.
func (ht *hostTable) evictProcs(now time.Time) {
	var oldest *hostProc
	for pid, p := range ht.procs {
		if p.idle() {
			delete(ht.procs, pid)
			continue
		}
		if oldest == nil || p.lastActive.Before(oldest.lastActive) {
			oldest = p
		}
	}
	if len(ht.procs) < maxHostProcs || oldest == nil {
		return
	}
	ht.counters.HostProcsEvicted++
	ht.flushProc(oldest, now)
	for _, th := range oldest.threads {
		for _, l := range th.launches {
			l.host.th = nil
		}
	}
	delete(ht.procs, oldest.pid)
}

// flushProc emits everything p holds, as if its grace and timeouts
// had passed.
func (ht *hostTable) flushProc(p *hostProc, now time.Time) {
	ht.releaseDeferred(p, now, true)
	for ; p.uhead < len(p.unmatched); p.uhead++ {
		if c := p.unmatched[p.uhead]; !c.taken {
			ht.counters.HostCallsUnmatched++
			ht.standalone(p, c)
		}
	}
	p.unmatched, p.uhead = p.unmatched[:0], 0
	for k, q := range p.shimless.streams {
		for _, ol := range q {
			ht.counters.ApproxUnclosed++
			ht.standalone(p, ol.call)
		}
		delete(p.shimless.streams, k)
	}
	p.shimless.nOpen = 0
}

// onHostCall takes host call c and returns the held shim launches it
// settled (finishSettled): launchTable finishes them.
func (ht *hostTable) onHostCall(c *record.HostCall, now time.Time) []*launch {
	ht.counters.HostCalls++
	if c.Flags&record.HostCallReturned != 0 && int(c.API) < len(ht.dur.d) {
		ht.dur.record(c.API, ht.o.Metrics.DurationBounds, float64(c.ExitNS-c.EnterNS)/1e9)
	}
	p := ht.procOf(c.PID, now)
	p.hostSeen = true
	th := p.thread(c.TID)
	th.lastExit = max(th.lastExit, c.ExitNS)
	hc := &hostCall{rec: *c, arrived: now}
	if p.shim && c.API.Category() == record.HostCatLaunch {
		ht.matchOrWait(p, hc)
	} else {
		ht.deferCall(p, hc, now)
	}
	ht.releaseDeferred(p, now, false)
	return settled(th)
}

// onKernelName binds a (pid, handle) of the host probes to its name.
func (ht *hostTable) onKernelName(k *record.KernelName) {
	key := pidHandle{k.PID, k.Function}
	if _, ok := ht.names[key]; ok {
		return
	}
	n := hostName{mangled: k.Name}
	if k.Truncated {
		ht.counters.NamesTruncated++
		n.mangled += TruncatedMarker
		n.name = n.mangled
	} else {
		n.name = ht.series.demangle(k.Name)
	}
	if len(ht.names) >= maxHostNames {
		// Two generations: the names used since the last turn survive it.
		ht.oldNames, ht.names = ht.names, map[pidHandle]hostName{}
	}
	ht.names[key] = n
}

type pidHandle struct {
	pid    uint32
	handle uint64
}

type hostName struct{ mangled, name string }

// kernelName returns the name of a function handle of pid from the
// host probes' KernelName records.
func (ht *hostTable) kernelName(pid uint32, handle uint64) (hostName, bool) {
	key := pidHandle{pid, handle}
	if n, ok := ht.names[key]; ok {
		return n, true
	}
	if n, ok := ht.oldNames[key]; ok {
		if len(ht.names) < maxHostNames {
			ht.names[key] = n
		}
		return n, true
	}
	return hostName{}, false
}

// matches reports whether host launch call c belongs with shim launch r: a
// runtime call of the same thread encloses the shim's [enqueue, return]
// interval; a driver call of the same thread overlaps it (the shim wraps the
// driver entry point, so the driver call normally lies inside it).
func matches(c *record.HostCall, r *record.Launch) bool {
	if c.TID != r.TID {
		return false
	}
	if apiInfo(c.API).driver {
		return c.EnterNS <= r.ReturnNS && c.ExitNS >= r.EnqueueNS
	}
	return c.Flags&record.HostCallReturned != 0 && c.EnterNS <= r.EnqueueNS && c.ExitNS >= r.ReturnNS
}

// matchOrWait nests launch call c of a shim process under a pending shim
// launch of its thread, or keeps it in the unmatched list for the grace.
func (ht *hostTable) matchOrWait(p *hostProc, c *hostCall) {
	if th := p.threads[c.rec.TID]; th != nil {
		for i := len(th.launches) - 1; i >= 0; i-- {
			l := th.launches[i]
			if l.rec.ReturnNS < c.rec.EnterNS {
				break // this and older launches of the thread returned before c began
			}
			if len(l.host.calls) < maxHostPerLaunch && matches(&c.rec, &l.rec) {
				l.host.calls = append(l.host.calls, c)
				ht.counters.HostCallsMatched++
				return
			}
		}
	}
	if len(p.unmatched)-p.uhead >= ht.o.Host.MaxHostCalls {
		// Full: the oldest goes out alone now.
		for p.uhead < len(p.unmatched) {
			old := p.unmatched[p.uhead]
			p.unmatched[p.uhead] = nil
			p.uhead++
			if !old.taken {
				ht.counters.HostCallsEvicted++
				ht.standalone(p, old)
				break
			}
		}
	}
	p.unmatched = append(p.unmatched, c)
	p.unmatched, p.uhead = compact(p.unmatched, p.uhead)
}

// compact moves the live part of a queue to its front when the consumed
// part is large.
func compact[T any](q []T, head int) ([]T, int) {
	if head > 64 && head*2 > len(q) {
		n := copy(q, q[head:])
		clear(q[n:])
		return q[:n], 0
	}
	return q, head
}

// onShimLaunch registers the launch record of a shim source with the host
// state of its process: the process is with the shim from now on, and the
// launch takes the unmatched host launch calls that belong with it.
//
// Every shim process is remembered (so that host calls arriving later are
// not taken for a shim-less process's), but its launches register with
// their thread (to nest host calls and wait for them) only when host probes
// are on or the process has sent host calls, and never when the probes
// skip the launch entry points of shim processes (NoShimLaunchCalls).
func (ht *hostTable) onShimLaunch(pid uint32, l *launch, now time.Time) {
	p := ht.procOf(pid, now)
	if !p.shim {
		p.shim = true
		ht.moveDeferredLaunches(p)
	}
	if l == nil || ht.o.Host.NoShimLaunchCalls || (!ht.o.Host.HostProbes && !p.hostSeen) {
		return
	}
	th := p.thread(l.rec.TID)
	th.launches = append(th.launches, l)
	l.host.th = th
	for i := p.uhead; i < len(p.unmatched) && len(l.host.calls) < maxHostPerLaunch; i++ {
		c := p.unmatched[i]
		if c.taken || c.rec.TID != l.rec.TID {
			continue
		}
		if c.rec.EnterNS > l.rec.ReturnNS {
			// The calls of one thread arrive in the order they returned:
			// every later one of this thread began after the launch too.
			break
		}
		if matches(&c.rec, &l.rec) {
			c.taken = true
			l.host.calls = append(l.host.calls, c)
			ht.counters.HostCallsMatched++
		}
	}
}

// moveDeferredLaunches moves the launch calls still deferred into the
// unmatched list (the process turned out to run with the shim).
func (ht *hostTable) moveDeferredLaunches(p *hostProc) {
	n := len(p.unmatched)
	for _, c := range p.deferred[p.dhead:] {
		if !c.taken && c.rec.API.Category() == record.HostCatLaunch {
			c.taken = true
			p.unmatched = append(p.unmatched, &hostCall{rec: c.rec, arrived: c.arrived})
		}
	}
	if len(p.unmatched) > n {
		slices.SortStableFunc(p.unmatched[p.uhead:], func(a, b *hostCall) int { return a.arrived.Compare(b.arrived) })
	}
}

// hold reports whether finished launch l must still wait for host
// calls of its thread: its process sends host calls (or host probes are
// on and it has not shown that it sends none), and no call of the thread
// that returned after the launch has arrived yet. It waits at most
// HostCallGrace from the first time it was held.
func (ht *hostTable) hold(l *launch, now time.Time) bool {
	th := l.host.th
	if th == nil || th.lastExit > l.rec.ReturnNS {
		return false
	}
	p := ht.procs[l.rec.PID]
	if p == nil || (!p.hostSeen && (!ht.o.Host.HostProbes || p.noHost)) {
		return false
	}
	if l.host.since.IsZero() {
		l.host.since = now
		th.held++
	}
	if now.Sub(l.host.since) < ht.grace() {
		return true
	}
	if !p.hostSeen {
		p.noHost = true
	}
	return false
}

// settled returns the held launches of th that the latest host call of
// the thread settled.
func settled(th *hostThread) []*launch {
	if th.held == 0 {
		return nil
	}
	var done []*launch
	for _, l := range th.launches {
		if !l.host.since.IsZero() && th.lastExit > l.rec.ReturnNS {
			done = append(done, l)
		}
	}
	return done
}

// unregister removes l from its thread's pending launches.
func (l *launch) unregister() {
	th := l.host.th
	if th == nil {
		return
	}
	l.host.th = nil
	if !l.host.since.IsZero() {
		th.held--
	}
	if i := slices.Index(th.launches, l); i >= 0 {
		th.launches = slices.Delete(th.launches, i, i+1)
	}
}

// expire emits the host calls that waited long enough: unmatched
// launch calls after the grace, deferred calls after the grace, shim-less
// launches never closed after LaunchTimeout.
func (ht *hostTable) expire(now time.Time) {
	for _, p := range ht.procs {
		for p.uhead < len(p.unmatched) {
			c := p.unmatched[p.uhead]
			if !c.taken {
				if now.Sub(c.arrived) < ht.grace() {
					break
				}
				ht.counters.HostCallsUnmatched++
				ht.standalone(p, c)
			}
			p.unmatched[p.uhead] = nil
			p.uhead++
		}
		p.unmatched, p.uhead = compact(p.unmatched, p.uhead)
		ht.releaseDeferred(p, now, false)
		ht.expireOpen(p, now)
	}
}

// appendMetrics writes the host call duration histograms (per API) and
// the count of approximate kernel spans.
func (ht *hostTable) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp, node bool) {
	if node {
		ht.appendDurations(sm, ts)
	}
	if ht.counters.ApproxSpans > 0 {
		dp := newSum(sm, MetricApproxKernels, "{span}",
			"Approximate kernel spans (launch call to the sync that covered it) of processes without the shim.").AppendEmpty()
		dp.SetStartTimestamp(ht.start)
		dp.SetTimestamp(ts)
		dp.SetIntValue(int64(ht.counters.ApproxSpans))
	}
}

// appendDurations writes the Node's host call duration histograms.
func (ht *hostTable) appendDurations(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	ht.dur.mu.Lock()
	defer ht.dur.mu.Unlock()
	dur := newHistOut(sm, MetricHostCallDuration, "s", "Duration of CUDA runtime and driver API calls seen by the host probes, per API.",
		ht.o.Metrics.DurationBounds != nil)
	for _, a := range record.HostAPIs() {
		h := &ht.dur.d[a]
		if h.Count() == 0 {
			continue
		}
		attrs := dur.add(h, ht.start, ts)
		attrs.PutStr("cuda.api.name", apiInfo(a).name)
		attrs.PutStr("cuda.api.category", apiInfo(a).category)
	}
}

// nodeDurations are a Node's host call durations, every shard's.
type nodeDurations struct {
	mu sync.Mutex
	d  hostDurations
}

// record adds a host call of api that took secs.
func (nd *nodeDurations) record(api record.HostAPI, bounds []float64, secs float64) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	h := &nd.d[api]
	h.SetBounds(bounds) // a no-op once it has values
	h.Record(secs)
}

// hostDurations holds one histogram per HostAPI number.
type hostDurations [hostAPISlots]exphist.Hist
