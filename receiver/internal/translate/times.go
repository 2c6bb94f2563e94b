package translate

// A finishing launch's times on CLOCK_REALTIME. Its device window and
// host timestamps are mapped here once (timesOf), in the clock package,
// and the stream gap, the series and the spans read the mapped values.

// devTime is a device timestamp of a launch: %globaltimer of its device
// (its probes'), or its client's CLOCK_MONOTONIC (mono: a driver window).
type devTime struct {
	ns   uint64
	mono bool
}

// launchTimes are a finishing launch's figures and times, each mapped
// time as the clock maps it (its ok false while its clock has no mapping).
type launchTimes struct {
	execNS, queueNS     uint64
	haveExec, haveQueue bool

	// start, end: the window its spans and figures use (window below);
	// dev is false when it has none.
	start, end         devTime
	dev                bool
	startReal, endReal uint64
	startOK, endOK     bool

	enqReal, retReal, doneReal uint64 // its launch call, and its completion record (if any)
	retOK                      bool
}

// timesOf maps launch l's times. Its window is devWindow's, or the
// driver's when devWindow's is the probes' and their device has no clock
// mapping (its calibration failed), so that a launch the driver timed
// always shows its window.
func (o *Options) timesOf(l *launch) launchTimes {
	var t launchTimes
	src, dev := l.key.src, l.rec.Device
	t.execNS, t.haveExec = l.execNS()
	t.start, t.end, t.dev = l.devWindow()
	if t.dev && !t.start.mono {
		t.startReal, t.startOK = o.Clock.GPUToReal(src, dev, t.start.ns)
		t.endReal, t.endOK = o.Clock.GPUToReal(src, dev, t.end.ns)
		if !t.startOK && l.gpu.win.ok && !l.gpu.win.whole {
			t.start, t.end = devTime{l.gpu.win.start, true}, devTime{l.gpu.win.end, true}
		}
	}
	if t.dev && t.start.mono {
		t.startReal, t.startOK = o.Clock.ClientMonoToReal(src, t.start.ns)
		t.endReal, t.endOK = o.Clock.ClientMonoToReal(src, t.end.ns)
	}
	var enqOK bool
	t.enqReal, enqOK = o.Clock.ClientMonoToReal(src, l.rec.EnqueueNS)
	t.retReal, t.retOK = o.Clock.ClientMonoToReal(src, l.rec.ReturnNS)
	if l.completed {
		t.doneReal, _ = o.Clock.ClientMonoToReal(src, l.completeNS)
	}
	// Queued: host enqueue → first block start, at once for a driver
	// window (the host's clock), else through the clock mapping.
	switch {
	case !t.dev:
	case t.start.mono:
		t.queueNS, t.haveQueue = t.start.ns-min(t.start.ns, l.rec.EnqueueNS), true
	case !t.startOK || !enqOK || t.startReal < t.enqReal:
		t.haveQueue = t.startOK && enqOK // clocks disagree by less than their uncertainty: 0
	default:
		t.queueNS, t.haveQueue = t.startReal-t.enqReal, true
	}
	return t
}

// devWindow is the device window the launch's spans and figures use: its
// probes' when they timed all of it (kernel_phases' Exec, every warp),
// else the driver's (record.Window; not its graph launch's whole one),
// else the warps that came; ok is false when it has none.
func (l *launch) devWindow() (start, end devTime, ok bool) {
	switch {
	case l.probed():
	case l.gpu.win.ok && !l.gpu.win.whole:
		return devTime{l.gpu.win.start, true}, devTime{l.gpu.win.end, true}, true
	case l.gpu.warps == 0:
		return devTime{}, devTime{}, false
	}
	return devTime{l.gpu.firstStart, false}, devTime{l.gpu.lastEnd, false}, true
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

// probed says whether the launch's own probes timed all of it: its Exec
// window, or every warp.
func (l *launch) probed() bool {
	return l.gpu.exec != nil || (l.have && l.gpu.warps > 0 && l.gpu.warps >= expectedWarps(&l.rec))
}
