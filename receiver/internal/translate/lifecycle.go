package translate

// A launch's end of life: when it is complete enough to emit, and turning
// it into metrics and spans.

import (
	"time"
)

// maybeFinish emits a launch as soon as every record it waits for is in.
func (lt *launchTable) maybeFinish(l *launch, now time.Time) {
	if !l.have || !l.completed {
		return
	}
	if (!lt.o.ExpectWarps || l.deviceDone()) && !lt.held(l, now) {
		lt.finish(l, now)
	}
}

// held says whether l, whose records are in, waits for more: the host
// calls of its thread (host probes), or its driver window (windows.go).
func (lt *launchTable) held(l *launch, now time.Time) bool {
	return lt.windows.waits(l, now) || lt.hosts.hold(l, now)
}

// kernelOver says whether l's kernel is known to be over without a
// completion record: its driver window came, or the device records it
// waits for are in; or, with driver windows on and no device probes, at
// once (held then waits for the window, at most windows::wait).
func (lt *launchTable) kernelOver(l *launch) bool {
	if l.gpu.win.ok {
		return true
	}
	if lt.o.ExpectWarps {
		return l.deviceDone()
	}
	return lt.windows.on(l.key.src)
}

// Expire emits launches that waited long enough: completed ones after the
// completion grace, any after LaunchTimeout, and drops the series of
// processes gone for Process.Retention. Call it once per poll.
func (t *Translator) Expire(now time.Time) {
	t.launches.expire(now)
	t.hosts.expire(now)
	t.series.sweep(now)
}

// FlushPending emits every pending launch with what it has, as
// LaunchTimeout would (counted in LaunchesExpired; a launch without its
// launch record is dropped, in LaunchesOrphan), and the host calls still
// waiting for records: the receiver's shutdown, after its last read.
// Unlike Expire it keeps the series of gone processes for a last metrics
// point.
func (t *Translator) FlushPending(now time.Time) {
	far := now.Add(t.o.LaunchTimeout + t.o.Host.HostCallGrace + time.Hour)
	t.launches.expire(far)
	t.hosts.expire(far)
}

// expire emits or drops the launches whose wait is over.
func (lt *launchTable) expire(now time.Time) {
	for i := lt.qhead; i < len(lt.queue); i++ {
		l := lt.queue[i]
		if l.done {
			continue
		}
		switch {
		case l.have && l.completed && now.Sub(l.completeAt) >= lt.o.CompletionGrace && !lt.held(l, now):
			lt.finish(l, now)
		case l.have && !l.completed && lt.kernelOver(l) && now.Sub(l.created) < lt.o.LaunchTimeout:
			// Every device record is in: the kernel is over. The shim
			// writes no completion records, so after a grace for one
			// (a producer that does write them) the launch is done.
			if l.warpsAt.IsZero() {
				l.warpsAt = now
			} else if now.Sub(l.warpsAt) >= lt.o.CompletionGrace && !lt.held(l, now) {
				lt.finish(l, now)
			}
		case now.Sub(l.created) >= lt.o.LaunchTimeout:
			if l.have {
				lt.counters.LaunchesExpired++
				lt.finish(l, now)
			} else {
				lt.counters.LaunchesOrphan++
				l.done = true
				lt.drop(l)
			}
		}
	}
	for lt.qhead < len(lt.queue) && lt.queue[lt.qhead].done {
		lt.queue[lt.qhead] = nil
		lt.qhead++
	}
	lt.compactQueue()
}

// finish turns a launch into metrics and (sampled) spans and forgets it.
func (lt *launchTable) finish(l *launch, now time.Time) {
	l.done = true
	lt.drop(l)
	l.unregister()
	if !l.have {
		lt.counters.LaunchesOrphan++
		return
	}
	lt.counters.LaunchesEmitted++
	s := l.k.series.dev(l.rec.Device)
	s.launches++
	lt.windows.finished(l, s)
	execNS, haveExec := l.execNS()
	if haveExec {
		s.exec.Record(float64(execNS) / 1e9)
	}
	if q, ok := lt.queueNS(l); ok {
		s.queue.Record(float64(q) / 1e9)
	}
	if lt.clients.streamGap(l, &s.hostWait); l.gap.known {
		s.hostWait.Record(float64(l.gap.hostWaitNS) / 1e9)
	}
	if !sampled(l.sampleKey(), lt.o.Sampling.OneIn) {
		lt.counters.SpansSampledOut++
		return
	}
	if haveExec && time.Duration(execNS) < lt.o.Sampling.MinDuration {
		lt.counters.SpansSampledOut++
		return
	}
	if !haveExec && l.completed && time.Duration(l.completeNS-l.rec.EnqueueNS) < lt.o.Sampling.MinDuration {
		lt.counters.SpansSampledOut++
		return
	}
	lt.spans.launchSpans(l)
}

// execNS is the device execution time: first block (warp) start → last
// block (warp) end, or the driver's window.
func (l *launch) execNS() (uint64, bool) {
	start, end, ok := l.devWindow()
	if !ok {
		return 0, false
	}
	return end.ns - start.ns, true
}

// queueNS is host enqueue → first block start: through the clock mapping,
// or at once for a driver window (the host's clock).
func (lt *launchTable) queueNS(l *launch) (uint64, bool) {
	start, _, ok := lt.o.window(l)
	if !ok {
		return 0, false
	}
	if start.mono {
		return start.ns - min(start.ns, l.rec.EnqueueNS), true
	}
	startReal, ok1 := lt.o.Clock.GPUToReal(l.key.src, l.rec.Device, start.ns)
	enqReal, ok2 := lt.o.Clock.ClientMonoToReal(l.key.src, l.rec.EnqueueNS)
	if !ok1 || !ok2 || startReal < enqReal {
		return 0, ok1 && ok2 // clocks disagree by less than their uncertainty: 0
	}
	return startReal - enqReal, true
}

// sampleKey is what sampling keeps or drops a launch on: its (source,
// launch id), or for a run of a graph node (source, replay ordinal), so
// that the kernel nodes of one graph launch are kept or dropped together
// (their replay counts agree) and the replays of one node are sampled.
func (l *launch) sampleKey() srcKey {
	if l.graph.chain != nil {
		return srcKey{l.key.src, GraphIDBit | l.graph.replay}
	}
	return l.key
}

// sampled keeps one launch in n, deterministically on (source, launch id).
func sampled(k srcKey, n uint32) bool {
	if n <= 1 {
		return true
	}
	x := k.id ^ uint64(k.src)<<48
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x%uint64(n) == 0
}
