package translate

import (
	"strconv"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Approximate kernel spans of processes without the shim.
//
// Without the shim nothing reports when a kernel ran, but the host calls
// bound it: it was enqueued by a launch call and had finished when a
// synchronisation that covers its stream returned. Per (process, stream)
// a FIFO holds the launch calls that returned successfully; a sync call
// that returned closes the launches that had returned before the sync was
// entered:
//
//   - cudaStreamSynchronize / cuStreamSynchronize (and _ptsz) on stream S
//     close the launches on S;
//   - cudaDeviceSynchronize / cuCtxSynchronize close every launch of the
//     process (one context per process is assumed: the records carry no
//     device or context);
//   - a synchronous copy (cudaMemcpy, cuMemcpy*_v2 without Async) closes the
//     launches on the legacy default stream (stream 0); cudaMemcpy_ptds
//     closes those on the calling thread's per-thread default stream;
//   - the legacy default stream's implicit synchronisation with blocking
//     streams (legacy.go): work enqueued on one waits for the other's
//     earlier work, so a sync that closes one follows into the other;
//   - cudaEventSynchronize / cuEventSynchronize on event E close the
//     launches on the stream E was last recorded on (cudaEventRecord,
//     cuEventRecord, WithFlags, _ptsz) that returned before that record
//     was entered; an event whose record was not seen closes nothing;
//   - a sync that closes stream S also closes, on every stream S2 that S
//     waited on (cudaStreamWaitEvent, cuStreamWaitEvent on an event last
//     recorded on S2, the wait entered before the sync), the launches that
//     returned before that record was entered, and so on through S2's own
//     waits (up to maxWaitDepth streams deep);
//
// Stream capture: a launch into a stream that is capturing does not run; it
// becomes a node of the graph being captured, which runs (if ever) at a
// graph launch. A stream captures from the return of a successful
// cudaStreamBeginCapture, cudaStreamBeginCaptureToGraph, cuStreamBeginCapture
// (v1, _v2, ToGraph; each with _ptsz) on it until cudaStreamEndCapture or
// cuStreamEndCapture is entered. Calls are handled in enter_ns order, so the
// begin of a capture is handled before the launches inside it and its end
// after them. A launch call inside a capture on its stream is emitted as a
// host call with cuda.graph.captured = true and no approximate kernel span
// (Counters.ApproxCaptured). A stream that waits (cudaStreamWaitEvent,
// cuStreamWaitEvent) on an event recorded in a capturing stream joins that
// capture until the capture ends.
//
// Streams: stream 0 is the legacy default stream, as is 0x1
// (CU_STREAM_LEGACY); 0x2 (CU_STREAM_PER_THREAD), and stream 0 passed to a
// _ptsz/_ptds entry point, name the calling thread's per-thread default
// stream.
//
// The approximate span goes from the launch call's enter_ns to the sync's
// exit_ns, is a child of the launch call's span (same trace), is named by
// the kernel and carries cuda.kernel.approximate = true and
// cuda.kernel.approximate.closed_by = the sync's API. A graph launch
// (cudaGraphLaunch, cuGraphLaunch) is closed the same way: its approximate
// span is named cuda.graph and carries cuda.graph.exec,
// cuda.graph.approximate = true and cuda.graph.approximate.closed_by
// (Counters.ApproxGraphs). A launch no sync
// closes within LaunchTimeout is emitted as a plain host call and counted
// (Counters.ApproxUnclosed).

// streamKey identifies a stream of one process: a handle, with the thread
// for a per-thread default stream.
type streamKey struct {
	stream uint64
	tid    uint32 // only for the per-thread default stream
}

// Special stream handles of the CUDA APIs.
const (
	streamLegacy    = 0x1 // CU_STREAM_LEGACY, cudaStreamLegacy
	streamPerThread = 0x2 // CU_STREAM_PER_THREAD, cudaStreamPerThread
)

// keyOf maps a stream argument of api called by thread tid to its key.
func keyOf(api record.HostAPI, stream uint64, tid uint32) streamKey {
	switch {
	case stream == streamLegacy:
		return streamKey{}
	case stream == streamPerThread, stream == 0 && apiInfo(api).perThread:
		return streamKey{stream: streamPerThread, tid: tid}
	}
	return streamKey{stream: stream}
}

// openLaunch is a shim-less launch waiting for the sync that closes it.
type openLaunch struct {
	call   *hostCall
	kernel hostName
	at     time.Time // when it was opened (for LaunchTimeout)
}

// deferCall queues c of p in enter_ns order until its grace has passed.
func (ht *hostTable) deferCall(p *hostProc, c *hostCall, now time.Time) {
	if len(p.deferred)-p.dhead >= ht.o.Host.MaxHostCalls {
		ht.counters.HostCallsEvicted++
		ht.releaseOne(p, now)
	}
	p.deferred = append(p.deferred, c)
	i := len(p.deferred) - 1
	for i > p.dhead && p.deferred[i-1].rec.EnterNS > c.rec.EnterNS {
		p.deferred[i] = p.deferred[i-1]
		i--
	}
	p.deferred[i] = c
}

// releaseDeferred handles the deferred calls of p whose grace has passed
// (all of them with force), in enter_ns order. A call waits until every
// call before it in that order is released.
func (ht *hostTable) releaseDeferred(p *hostProc, now time.Time, force bool) {
	for p.dhead < len(p.deferred) {
		c := p.deferred[p.dhead]
		if !c.taken && !force && now.Sub(c.arrived) < ht.grace() {
			break
		}
		ht.releaseOne(p, now)
	}
	p.deferred, p.dhead = compact(p.deferred, p.dhead)
}

// releaseOne handles the first deferred call of p.
func (ht *hostTable) releaseOne(p *hostProc, now time.Time) {
	c := p.deferred[p.dhead]
	p.deferred[p.dhead] = nil
	p.dhead++
	if c.taken {
		return
	}
	c.taken = true
	// The calls of the same thread inside c are its children.
	for _, d := range p.deferred[p.dhead:] {
		if d.rec.EnterNS > c.rec.ExitNS {
			break
		}
		if !d.taken && d.rec.TID == c.rec.TID && d.rec.ExitNS <= c.rec.ExitNS {
			d.taken = true
			c.children = append(c.children, d)
		}
	}
	ht.handleReleased(p, c, now)
}

// handleReleased turns a released call into spans or opens it as a
// shim-less launch, and applies its closing rule.
func (ht *hostTable) handleReleased(p *hostProc, c *hostCall, now time.Time) {
	r := &c.rec
	returned := r.Flags&record.HostCallReturned != 0
	switch r.API.Category() {
	case record.HostCatLaunch:
		if !p.shim && returned && r.Ret == 0 && !ht.o.Host.NoApproximateKernels {
			if cp, ok := p.shimless.capturing[keyOf(r.API, r.Args[5], r.TID)]; ok && r.EnterNS >= cp.since {
				ht.counters.ApproxCaptured++
				if sp, ok := ht.standalone(p, c); ok {
					sp.Attributes().PutBool("cuda.graph.captured", true)
				}
				return
			}
			p.legacyOrder(keyOf(r.API, r.Args[5], r.TID), r.EnterNS)
			ht.openLaunch(p, c, now)
			return
		}
		ht.standalone(p, c)
		return
	case record.HostCatGraphLaunch:
		if !p.shim && returned && r.Ret == 0 && !ht.o.Host.NoApproximateKernels {
			p.legacyOrder(keyOf(r.API, r.Args[5], r.TID), r.EnterNS)
			ht.openLaunch(p, c, now)
			return
		}
		ht.standalone(p, c)
	case record.HostCatCapture:
		ht.standalone(p, c)
		ht.captureCall(p, r)
	case record.HostCatEvent:
		ht.standalone(p, c)
		if returned && r.Ret == 0 {
			if !p.shim {
				p.legacyOrder(eventStream(r), r.EnterNS)
			}
			ht.eventCall(p, r)
		}
	case record.HostCatStream:
		ht.standalone(p, c)
		if returned && r.Ret == 0 {
			p.streamCall(r)
		}
	case record.HostCatSync:
		ht.standalone(p, c)
		if !returned {
			return
		}
		switch r.API {
		case record.HostCudaStreamSynchronize, record.HostCudaStreamSynchronizePts,
			record.HostCuStreamSynchronize, record.HostCuStreamSynchronizePtsz:
			ht.closeStream(p, keyOf(r.API, r.Args[0], r.TID), r)
		case record.HostCudaDeviceSynchronize, record.HostCuCtxSynchronize:
			for k := range p.shimless.streams {
				ht.closeStream(p, k, r)
			}
		case record.HostCudaEventSynchronize, record.HostCuEventSynchronize:
			if e, ok := p.shimless.events[r.Args[0]]; ok && !e.captured {
				// What the event covers: the work enqueued before its record.
				upTo := *r
				upTo.EnterNS = min(r.EnterNS, e.at)
				ht.closeStream(p, e.stream, &upTo)
			}
		}
	case record.HostCatMemcpy:
		ht.standalone(p, c)
		if !returned {
			return
		}
		async := apiInfo(r.API).async
		k := keyOf(r.API, 0, r.TID)
		if async {
			k = keyOf(r.API, r.Args[4], r.TID)
		}
		if !p.shim && r.Ret == 0 {
			p.legacyOrder(k, r.EnterNS)
		}
		if !async {
			ht.closeStream(p, k, r)
		}
	default:
		ht.standalone(p, c)
	}
}

// Bounds of the per-process capture and event state.
const (
	maxCapturing = 1024 // streams with a capture open
	maxEvents    = 4096 // events whose last record is kept
)

// capture is an open stream capture as a stream takes part in it.
type capture struct {
	since  uint64    // exit_ns of the call that began it, or of the wait that joined the stream to it
	origin streamKey // the stream the capture began on
}

// streamWait is a wait of one stream on an event recorded on another.
type streamWait struct {
	at   uint64    // enter_ns of the wait call
	src  streamKey // where the event was recorded
	upTo uint64    // enter_ns of that record: the src launches the wait covers returned before it
}

// Bounds of the wait state: waits kept per stream (the oldest go), streams
// with waits, and how many streams deep a sync follows them.
const (
	maxWaitsPerStream = 64
	maxWaitStreams    = 1024
	maxWaitDepth      = 8
)

// eventRec is where an event was last recorded.
type eventRec struct {
	stream   streamKey
	at       uint64 // enter_ns of the record call
	captured bool   // recorded into a capture (of origin)
	origin   streamKey
}

// captureCall applies a capture's begin or end to its stream. A begin that
// failed or did not return opens nothing; an end ends the capture whether
// it succeeded or not (a capture that fails as invalidated is over too),
// for its stream and every stream that joined it.
func (ht *hostTable) captureCall(p *hostProc, r *record.HostCall) {
	k := keyOf(r.API, r.Args[0], r.TID)
	if r.API.CaptureEnds() {
		origin := k
		if c, ok := p.shimless.capturing[k]; ok {
			origin = c.origin
		}
		for s, c := range p.shimless.capturing {
			if c.origin == origin {
				delete(p.shimless.capturing, s)
			}
		}
		return
	}
	if r.Flags&record.HostCallReturned == 0 || r.Ret != 0 {
		return
	}
	p.joinCapture(k, capture{since: r.ExitNS, origin: k})
}

// joinCapture makes stream k part of capture c.
func (p *hostProc) joinCapture(k streamKey, c capture) {
	if _, ok := p.shimless.capturing[k]; !ok && len(p.shimless.capturing) >= maxCapturing {
		return // a process that never ends its captures: its launches stay approximate
	}
	p.shimless.capturing[k] = c
}

// eventCall applies a successful event record or stream wait: a record
// notes where the event is (and whether in a capture), a wait on an event
// recorded in a capture that is still open joins the waiting stream to it.
func (ht *hostTable) eventCall(p *hostProc, r *record.HostCall) {
	if r.API.WaitsEvent() {
		e, ok := p.shimless.events[r.Args[1]]
		if !ok {
			return
		}
		k := eventStream(r)
		if !e.captured {
			p.addWait(k, streamWait{at: r.EnterNS, src: e.stream, upTo: e.at})
			return
		}
		if c, open := p.shimless.capturing[e.origin]; open && c.origin == e.origin && c.since <= e.at {
			p.joinCapture(k, capture{since: r.ExitNS, origin: e.origin})
		}
		return
	}
	k := eventStream(r)
	e := eventRec{stream: k, at: r.EnterNS}
	if c, ok := p.shimless.capturing[k]; ok && c.since <= r.EnterNS {
		e.captured, e.origin = true, c.origin
	}
	if _, ok := p.shimless.events[r.Args[0]]; !ok && len(p.shimless.events) >= maxEvents {
		clear(p.shimless.events) // forget them all rather than track which is oldest: event syncs close nothing until recorded again
	}
	p.shimless.events[r.Args[0]] = e
}

// eventStream is the stream an event call works on: the waiting stream
// of a wait (args: stream, event), the recording one of a record (args:
// event, stream).
func eventStream(r *record.HostCall) streamKey {
	if r.API.WaitsEvent() {
		return keyOf(r.API, r.Args[0], r.TID)
	}
	return keyOf(r.API, r.Args[1], r.TID)
}

// openLaunch adds a shim-less launch to its stream's FIFO.
func (ht *hostTable) openLaunch(p *hostProc, c *hostCall, now time.Time) {
	if p.shimless.nOpen >= ht.o.Host.MaxHostCalls {
		ht.evictOpen(p)
	}
	k := keyOf(c.rec.API, c.rec.Args[5], c.rec.TID)
	var kernel hostName
	if c.rec.API.Category() == record.HostCatLaunch {
		kernel = ht.launchKernel(c)
	}
	p.shimless.streams[k] = append(p.shimless.streams[k], &openLaunch{call: c, kernel: kernel, at: now})
	p.shimless.nOpen++
}

// evictOpen emits the oldest open launch of p as a plain host call.
func (ht *hostTable) evictOpen(p *hostProc) {
	var oldest streamKey
	var at time.Time
	found := false
	for k, q := range p.shimless.streams {
		if !found || q[0].at.Before(at) {
			oldest, at, found = k, q[0].at, true
		}
	}
	if !found {
		return
	}
	q := p.shimless.streams[oldest]
	ht.counters.HostCallsEvicted++
	ht.standalone(p, q[0].call)
	p.dropOpen(oldest, q[1:])
}

// dropOpen stores the rest q of a stream's FIFO.
func (p *hostProc) dropOpen(k streamKey, q []*openLaunch) {
	p.shimless.nOpen -= len(p.shimless.streams[k]) - len(q)
	if len(q) == 0 {
		delete(p.shimless.streams, k)
	} else {
		p.shimless.streams[k] = q
	}
}

// addWait notes that stream k waits (from w.at on) for the work of w.src
// enqueued before w.upTo.
func (p *hostProc) addWait(k streamKey, w streamWait) {
	if k == w.src {
		return // a stream waiting on itself adds nothing
	}
	ws, ok := p.shimless.waits[k]
	if !ok && len(p.shimless.waits) >= maxWaitStreams {
		return
	}
	// A later wait on the same stream covering as much or more replaces an
	// earlier one: calls are handled in enter_ns order, so every sync still
	// to come follows both or neither.
	for i := range ws {
		if ws[i].src == w.src && ws[i].upTo <= w.upTo {
			ws[i] = w
			return
		}
	}
	if len(ws) >= maxWaitsPerStream {
		ws = append(ws[:0], ws[1:]...)
	}
	p.shimless.waits[k] = append(ws, w)
}

// closeStream closes the launches on stream k of p that returned before
// sync was entered, and through k's waits entered before it, those of the
// streams it waited on.
func (ht *hostTable) closeStream(p *hostProc, k streamKey, sync *record.HostCall) {
	ht.closeStreamDepth(p, k, sync, 0)
}

func (ht *hostTable) closeStreamDepth(p *hostProc, k streamKey, sync *record.HostCall, depth int) {
	if q := p.shimless.streams[k]; len(q) > 0 {
		kept := make([]*openLaunch, 0, 1)
		for _, ol := range q {
			if ol.call.rec.ExitNS <= sync.EnterNS {
				ht.spans.emitApprox(p.pid, ol, sync)
			} else {
				kept = append(kept, ol)
			}
		}
		p.dropOpen(k, kept)
	}
	ws := p.shimless.waits[k]
	if len(ws) == 0 {
		return
	}
	var follow []streamWait
	kept := ws[:0]
	for _, w := range ws {
		if w.at <= sync.EnterNS {
			follow = append(follow, w)
		} else {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		delete(p.shimless.waits, k)
	} else {
		p.shimless.waits[k] = kept
	}
	if depth >= maxWaitDepth {
		return
	}
	for _, w := range follow {
		upTo := *sync
		upTo.EnterNS = min(sync.EnterNS, w.upTo)
		ht.closeStreamDepth(p, w.src, &upTo, depth+1)
	}
}

// expireOpen emits the launches of p no sync closed within LaunchTimeout.
func (ht *hostTable) expireOpen(p *hostProc, now time.Time) {
	for k, q := range p.shimless.streams {
		n := 0
		for n < len(q) && now.Sub(q[n].at) >= ht.o.LaunchTimeout {
			ht.counters.ApproxUnclosed++
			ht.standalone(p, q[n].call)
			n++
		}
		if n > 0 {
			p.dropOpen(k, q[n:])
		}
	}
}

// launchKernel names the kernel of a launch call: by the handle of the
// call, or for a runtime call by that of a driver launch call nested in it
// (the runtime's argument is the host stub), from the host probes'
// KernelName records; else "kernel 0x<handle>".
func (ht *hostTable) launchKernel(c *hostCall) hostName {
	h := c.rec.Args[0]
	if !apiInfo(c.rec.API).driver {
		for _, d := range c.children {
			if d.rec.API.Category() == record.HostCatLaunch && apiInfo(d.rec.API).driver {
				h = d.rec.Args[0]
				break
			}
		}
	}
	if n, ok := ht.kernelName(c.rec.PID, h); ok {
		return n
	}
	return hostName{name: "kernel 0x" + strconv.FormatUint(h, 16)}
}

// standalone emits host call c of p and its children as a trace of their
// own, a launch call named by its kernel (spanOut.emitStandalone).
func (ht *hostTable) standalone(p *hostProc, c *hostCall) (ptrace.Span, bool) {
	kernel := ""
	if c.rec.API.Category() == record.HostCatLaunch {
		if n := ht.launchKernel(c); n.mangled != "" {
			kernel = n.name
		}
	}
	return ht.spans.emitStandalone(p.pid, c, kernel)
}
