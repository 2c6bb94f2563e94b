package translate

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
// They are only given when the two launches are adjacent on the stream and
// both were seen on the device: every launch record and memory copy of a
// stream advances its count when it is read, and a launch gets the figures
// only when the launch finished before it on the stream is the one counted
// just before it. An unprobed launch (sampling::device_one_in, an unpatched
// kernel), a copy or a graph launch in between, a failed launch, or
// launches finishing out of order leave the next launch without them:
// never a wrong figure, sometimes none. Streams: stream 0 and 0x1 are the
// legacy default stream; 0x2 (the per-thread default stream) is one stream
// per thread; other handles are per device.

// maxStreamSlots bounds the stream state (it is cleared when full).
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
	seq  uint64 // launches and copies counted on the stream
	done uint64 // count of the last launch that finished (0: none)
	end  uint64 // its last block end (%globaltimer), 0 when it ran no probe
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

// streamCount counts one launch or copy on a stream and returns its count.
func (t *Translator) streamCount(k streamSlot) uint64 {
	st := t.streams[k]
	if st == nil {
		if len(t.streams) >= maxStreamSlots {
			clear(t.streams)
		}
		st = &streamState{}
		t.streams[k] = st
	}
	st.seq++
	return st.seq
}

// streamGap sets l's stream idle time and host wait when the launch that
// finished before it on its stream is the one just before it, and makes l
// the stream's last finished launch.
func (t *Translator) streamGap(l *launch) {
	if l.streamSeq == 0 {
		return
	}
	r := &l.rec
	st := t.streams[slotOf(l.key.src, r.Device, r.Stream, r.TID)]
	if st == nil || l.streamSeq <= st.done {
		return // forgotten, or a later launch finished first
	}
	prevEnd := st.end
	adjacent := st.done != 0 && st.done+1 == l.streamSeq
	st.done, st.end = l.streamSeq, 0
	if !l.hasDevice() {
		return
	}
	st.end = l.lastEnd
	if !adjacent || prevEnd == 0 || l.firstStart < prevEnd {
		return
	}
	idle := l.firstStart - prevEnd
	var wait uint64
	endReal, ok1 := t.o.Clock.GPUToReal(r.Device, prevEnd)
	retReal, ok2 := t.o.Clock.MonoToReal(r.ReturnNS)
	if !ok1 || !ok2 {
		return
	}
	if retReal > endReal {
		wait = min(retReal-endReal, idle)
	}
	l.idleNS, l.hostWaitNS, l.gapKnown = idle, wait, true
}
