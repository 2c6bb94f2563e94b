package translate

import "github.com/gpuprobe/gpuprobe/receiver/internal/exphist"

// Stream idle time before a launch, and how much of it the host caused.
//
// "Is this kernel slow because of the GPU or because of the host?" A
// stream runs its kernels one after another. When kernel k−1 ends on the
// device at E and kernel k starts at S, the stream sat idle for S − E.
// Either the host had launched k in time and the device took S − E to
// start it (launch latency, a dependency on other work), or the host had
// not launched it yet: its launch call returned at R > E, and the stream
// waited for the host for R − E of the gap. Per launch:
//
//	stream_idle = S − E                  (the previous kernel on the same stream ended at E)
//	host_wait   = clamp(R − E, 0, S − E) (the part of it before the launch call returned)
//
// The launch span carries both (cuda.launch.stream_idle and
// cuda.launch.host_wait, in ns) and gpu.cuda.kernel.host_wait.duration
// records host_wait (zeros included: the share of launches that found
// their stream idle tells how host-bound a workload is, the sum how long
// the GPU waited for the host).
//
// Only launches adjacent on their stream are compared: every launch
// record and memory copy of a stream advances its count as it is read,
// and launch k is compared with the launch counted just before it, k−1,
// which must have a device window (its end E is needed): its probes' or
// the driver's (record.Window), whichever its span shows. A copy, a graph
// launch or a launch without window in between leaves k without figures:
// never a wrong figure, sometimes none. When k has no device window
// (sampling, an unpatched kernel, no driver windows), S is unknown: k gets
// host_wait = max(R − E, 0) without the clamp (at most the launch call's
// own duration more) and no stream_idle, so that sampled streams still
// report host waits, for the launches right after probed ones. E and S
// from one clock (both %globaltimer, or both the host's CLOCK_MONOTONIC)
// are compared as they are; across clocks, through their realtime
// mappings. When k finishes before k−1 (an
// unprobed launch is emitted a grace after its record, a probed one when
// its device records are in), its span is out already: k−1's finish
// records k's host_wait in the metric only. Streams: stream 0 and 0x1 are
// the legacy default stream; 0x2 (the per-thread default stream) is one
// stream per thread; other handles are per device.

// maxStreamSlots bounds the stream state of one client (it is cleared
// when full).
const maxStreamSlots = 4096

// streamSlot is one stream of one source and device.
type streamSlot struct {
	src    uint32
	device uint32
	stream uint64
	tid    uint32 // the per-thread default stream only
}

// streamState is what a stream's next launch compares against.
type streamState struct {
	seq     uint64  // launches and copies counted on the stream
	doneSeq uint64  // count of the latest finished launch (0: none)
	end     devTime // its last block end (or driver window end), ns 0 when it has no device window
	endReal uint64  // end mapped to realtime at its finish (endOK: mapped)
	endOK   bool
	early   earlyLaunch // a launch that finished before the one counted before it
}

// earlyLaunch is a launch that finished before its predecessor on the
// stream: what that predecessor's finish needs to record its host wait.
type earlyLaunch struct {
	seq       uint64
	retReal   uint64 // its launch call's return (real ns)
	startReal uint64 // its first block start (real ns), 0 when it has no device window
	hostWait  *exphist.Hist
}

// slotOf returns the slot of a stream argument of a shim record.
func slotOf(src, device uint32, stream uint64, tid uint32) streamSlot {
	switch stream {
	case streamLegacy:
		stream = 0
	case streamPerThread:
		return streamSlot{src: src, device: device, stream: stream, tid: tid}
	}
	return streamSlot{src: src, device: device, stream: stream}
}

// streamTable owns the launch order of each source's streams.
type streamTable struct {
	bySrc map[uint32]map[streamSlot]*streamState // source → its streams, ≤ maxStreamSlots each
	// The stream looked up last (nil: none): a client's launches go to
	// few streams, and are counted and finished in runs.
	lastKey streamSlot
	last    *streamState
}

// count counts one launch or copy on a stream and returns its count.
func (sg *streamTable) count(k streamSlot) uint64 {
	if sg.last != nil && sg.lastKey == k {
		sg.last.seq++
		return sg.last.seq
	}
	streams := sg.bySrc[k.src]
	if streams == nil {
		streams = map[streamSlot]*streamState{}
		sg.bySrc[k.src] = streams
	}
	st := streams[k]
	if st == nil {
		if len(streams) >= maxStreamSlots {
			clear(streams)
		}
		st = &streamState{}
		streams[k] = st
	}
	sg.lastKey, sg.last = k, st
	st.seq++
	return st.seq
}

// state returns the state of stream k, nil if it has none.
func (sg *streamTable) state(k streamSlot) *streamState {
	if sg.last != nil && sg.lastKey == k {
		return sg.last
	}
	st := sg.bySrc[k.src][k]
	if st != nil {
		sg.lastKey, sg.last = k, st
	}
	return st
}

// gap runs at l's finish, with tm its mapped times and hw its kernel's
// host-wait histogram: it sets l's stream idle time and host wait when the
// launch counted just before it on its stream has finished and has a
// device window, records the host wait of a launch that finished early
// when l is its predecessor, and makes l the stream's latest finished
// launch (its window's end kept as mapped at its finish).
func (sg *streamTable) gap(l *launch, tm *launchTimes, hw *exphist.Hist) {
	if l.gap.seq == 0 {
		return
	}
	r := &l.rec
	st := sg.state(slotOf(l.key.src, r.Device, r.Stream, r.TID))
	if st == nil {
		return // forgotten, or its source gone
	}
	retReal, okRet := tm.retReal, tm.retOK
	start, dev, startReal := tm.start, tm.dev, tm.startReal // startReal 0 without a window
	s := l.gap.seq
	switch {
	case s == st.doneSeq+1 && st.end.ns != 0 && okRet:
		if st.endOK {
			l.gap.hostWaitNS, l.gap.known = gapWait(retReal, st.endReal, startReal), true
			if idle, ok := idleNS(st.end, start, st.endReal, startReal); dev && ok {
				l.gap.idleNS, l.gap.idleKnown = idle, true
			}
		}
	case s > st.doneSeq+1 && okRet:
		st.early = earlyLaunch{seq: s, retReal: retReal, startReal: startReal, hostWait: hw}
	}
	if s+1 == st.early.seq && dev {
		if tm.endOK {
			st.early.hostWait.Record(float64(gapWait(st.early.retReal, tm.endReal, st.early.startReal)) / 1e9)
		}
		st.early = earlyLaunch{}
	}
	if s > st.doneSeq {
		st.doneSeq, st.end, st.endReal, st.endOK = s, devTime{}, 0, false
		if dev {
			st.end, st.endReal, st.endOK = tm.end, tm.endReal, tm.endOK
		}
	}
}

// forget drops the streams of source src (disconnected).
func (sg *streamTable) forget(src uint32) {
	delete(sg.bySrc, src)
	sg.last = nil
}

// idleNS is the stream's idle time from the previous kernel's end to this
// one's start: in their own clock when both are in the same one (exact),
// else through their realtime mappings (endReal, startReal; 0: unknown).
// ok is false when the start is not after the end.
func idleNS(end, start devTime, endReal, startReal uint64) (uint64, bool) {
	switch {
	case end.mono == start.mono && start.ns >= end.ns:
		return start.ns - end.ns, true
	case end.mono != start.mono && startReal != 0 && startReal >= endReal:
		return startReal - endReal, true
	}
	return 0, false
}

// gapWait is the host wait of a launch whose call returned at ret after
// the previous kernel ended at end: 0 when it was queued in time or
// started before that end (overlapping kernels, as programmatic dependent
// launch allows: the stream never sat idle), else up to its own first
// block start when known (start 0: not known).
func gapWait(ret, end, start uint64) uint64 {
	switch {
	case ret <= end:
		return 0
	case start == 0:
		return ret - end
	case start <= end:
		return 0
	}
	return min(ret-end, start-end)
}
