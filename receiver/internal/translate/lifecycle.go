package translate

// A launch's end of life: when it is over (maybeFinish on the record
// path, expire once a pass), and turning it into metrics and spans.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

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
	t.spans.policy.now = now
	t.launches.expire(now)
	t.series.sweep(now)
}

// FlushPending emits every pending launch with what it has, as
// LaunchTimeout would (counted in LaunchesExpired; a launch without its
// launch record is dropped, in LaunchesOrphan), and the host calls still
// waiting for records: the receiver's shutdown, after its last read.
// Unlike Expire it keeps the series of gone processes for a last metrics
// point, and it settles the GPU time of every window buffered (not only
// those Options.Windows.GPUTime.Lag behind now).
func (t *Translator) FlushPending(now time.Time) {
	t.spans.policy.now = now // not the later time below, which only ends every wait
	t.launches.expire(now.Add(t.o.LaunchTimeout + t.o.Host.HostCallGrace + time.Hour))
	t.shares.flush(now) // the last metrics point has every window's time
	if mono, ok := t.monoNow(now); ok {
		t.hw.flush(mono)
	}
}

// expire emits or drops the launches whose wait is over, then the host
// calls whose wait is.
func (lt *launchTable) expire(now time.Time) {
	defer lt.hosts.expire(now)
	for i := lt.qhead; i < len(lt.queue); i++ {
		if !lt.queue[i].live() {
			continue
		}
		l := lt.queue[i].l
		switch {
		case l.have && l.completed && now.Sub(l.completeAt) >= lt.o.CompletionGrace && !lt.held(l, now):
			lt.finish(l, now)
		case l.have && !l.completed && lt.kernelOver(l) && now.Sub(l.created) < lt.o.LaunchTimeout:
			// Every device record is in: the kernel is over. The shim
			// writes no completion records, so its launch is done; a
			// producer that does write them gets a grace for one.
			if l.warpsAt.IsZero() {
				l.warpsAt = now
			}
			if (lt.endsWithRecords(l.key.src) && lt.recordsIn(l) || now.Sub(l.warpsAt) >= lt.o.CompletionGrace) && !lt.held(l, now) {
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
	for lt.qhead < len(lt.queue) && !lt.queue[lt.qhead].live() {
		lt.queue[lt.qhead] = launchRef{}
		lt.qhead++
	}
	lt.compactQueue()
}

// maybeFinish emits a launch as soon as every record it waits for is in:
// its completion record, or for a source that sends none
// (endsWithRecords), the records that say its kernel is over.
func (lt *launchTable) maybeFinish(l *launch, now time.Time) {
	switch {
	case !l.have:
		return
	case l.completed:
		if lt.o.ExpectWarps && !l.deviceDone() {
			return
		}
	case !lt.endsWithRecords(l.key.src) || !lt.recordsIn(l):
		return
	}
	if !lt.held(l, now) {
		lt.finish(l, now)
	}
}

// recordsIn says whether every record of l but a completion is in: its
// kernel is over, and with device probes their records came.
func (lt *launchTable) recordsIn(l *launch) bool {
	return lt.kernelOver(l) && (!lt.o.ExpectWarps || l.deviceDone())
}

// held says whether l, whose records are in, waits for more: the host
// calls of its thread (host probes), or its driver window (windows.go).
func (lt *launchTable) held(l *launch, now time.Time) bool {
	return lt.windows.waits(l, now) || lt.hosts.hold(l, now)
}

// finish turns a launch into metrics and (sampled) spans, forgets it,
// and recycles it: the caller must not use l after.
func (lt *launchTable) finish(l *launch, now time.Time) {
	defer lt.free.put(l) // nothing points at it once dropped and unregistered (recycle.go)
	l.done = true
	lt.drop(l)
	l.unregister()
	if !l.have {
		lt.counters.LaunchesOrphan++
		return
	}
	lt.counters.LaunchesEmitted++
	s := l.k.series.dev(l.rec.Device)
	lt.windows.finished(l, s) // before s counts l: its estimate is the kernel's mean so far
	tm := lt.o.timesOf(l)
	lt.streams.gap(l, &tm, &s.hostWait)
	s.record(launchFigures{tm.execNS, tm.queueNS, l.gap.hostWaitNS, tm.haveExec, tm.haveQueue, l.gap.known})
	lt.spans.countFrame(l)
	// The metrics have l: what follows decides its trace, before any
	// span is built. Every launch moves its kernel's running median.
	why := lt.spans.policy.anomaly(l, &tm)
	if out := sampledOut(l, &tm, &lt.o.Sampling); out >= 0 {
		lt.counters.SpansSampledOut++
		lt.spans.policy.out[out]++
		return
	}
	if !lt.spans.policy.launch(l, why) {
		lt.counters.SpansSampledOut++
		return
	}
	lt.spans.launchSpans(l, &tm, why, s)
}

// sampledOut says why sampling::one_in or min_duration leaves launch l's
// trace out (an out reason of tracepolicy.go), or -1 when they keep it.
// one_in leaves a launch under a sampled application span in: the
// application's sampler already chose its request.
func sampledOut(l *launch, tm *launchTimes, o *SamplingOptions) int {
	switch {
	case !l.host.app.sampled() && !sampled(l.sampleKey(), o.OneIn):
		return outOneIn
	case tm.haveExec && time.Duration(tm.execNS) < o.MinDuration,
		!tm.haveExec && l.completed && time.Duration(l.completeNS-l.rec.EnqueueNS) < o.MinDuration:
		return outMinDuration
	}
	return -1
}

// deviceDone says whether every device record the launch waits for is in:
// its Exec window, or one Warp record per warp; at once for a launch the
// shim marked unprobed (no device record of it will come).
func (l *launch) deviceDone() bool {
	return l.rec.Flags&record.LaunchUnprobed != 0 || l.gpu.exec != nil || l.gpu.warps >= expectedWarps(&l.rec)
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

// onHostCall takes host call c (host probes) and finishes the held shim
// launches it settled.
func (lt *launchTable) onHostCall(c *record.HostCall, now time.Time) {
	for _, l := range lt.hosts.onHostCall(c, now) {
		if !l.done {
			lt.finish(l, now)
		}
	}
}
