package translate

// Coverage: per process, how many launches, and how much GPU time, had an
// exact device window, and from where (route). A launch counts once, when
// it is emitted (sampled-out spans too; failed launch calls not at all).
// The GPU time of a launch without an exact window is not known: it is
// estimated as the mean execution time of its kernel on its device so far
// (0 before any launch of the kernel was timed).

import (
	"slices"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// route is where a launch's exact device window came from.
type route uint8

const (
	routeNone        route = iota // none: no exact window (or only some of its warps)
	routeInlinePTX                // its own probes, patched into its PTX (kernel_phases' Exec, every warp)
	routeWindows                  // the driver's window alone (record.Window)
	routePatchedSASS              // its own probes, patched into its SASS (the shim's Exec, Compute Sanitizer)
	routeGraph                    // only its graph launch's whole window (record.WindowGraphExec): not its own
	nRoutes
)

var routeNames = [nRoutes]string{"none", "inline_ptx", "windows", "patched_sass", "graph"}

// String is the route's gpuprobe.windows.route value.
func (r route) String() string { return routeNames[r] }

// route says where l's exact device window came from.
func (l *launch) route() route {
	switch {
	case l.probed() && l.rec.Flags&record.LaunchSASS != 0:
		return routePatchedSASS
	case l.probed():
		return routeInlinePTX
	case l.gpu.win.ok && l.gpu.win.whole:
		return routeGraph
	case l.gpu.win.ok:
		return routeWindows
	}
	return routeNone
}

// Bounds of the coverage series.
const (
	maxCoverageProcs = 1024 // processes with their own series; later ones fold into pid -1
	otherPID         = ^uint32(0)
)

// procCoverage is one process's launches and GPU seconds by route.
type procCoverage struct {
	launches [nRoutes]uint64
	seconds  [nRoutes]float64
	start    pcommon.Timestamp
	gone     bool         // its client left: emitted once more, then forgotten
	patch    procPatching // its cold-start cost (patchcost.go)
}

// coverage is the coverage of every process.
type coverage struct {
	start pcommon.Timestamp
	now   pcommon.Timestamp // the latest emission (start of series created after it)
	byPID map[uint32]*procCoverage
}

// proc is pid's coverage, created (or the overflow's, past
// maxCoverageProcs) at its first use.
func (cv *coverage) proc(pid uint32) *procCoverage {
	p := cv.byPID[pid]
	if p == nil {
		if len(cv.byPID) >= maxCoverageProcs {
			pid = otherPID
			p = cv.byPID[pid]
		}
		if p == nil {
			p = &procCoverage{start: max(cv.start, cv.now)}
			cv.byPID[pid] = p
		}
	}
	p.gone = false
	return p
}

// add counts one emitted launch of pid by route rt, secs of GPU time;
// preswap: it ran before its kernel's patched image was ready.
func (cv *coverage) add(pid uint32, rt route, secs float64, preswap bool) {
	p := cv.proc(pid)
	p.launches[rt]++
	p.seconds[rt] += secs
	if preswap {
		p.patch.preswap++
	}
}

// gone marks pid's coverage for removal after its next emission.
func (cv *coverage) gone(pid uint32) {
	if p := cv.byPID[pid]; p != nil {
		p.gone = true
	}
}

// Names of the driver-window self-metrics.
const (
	MetricCoverageLaunches = "gpuprobe.receiver.coverage.launches"
	MetricCoverageGPUTime  = "gpuprobe.receiver.coverage.gpu_time"
	MetricProbeOffset      = "gpuprobe.receiver.windows.probe_offset"
	MetricWindowStates     = "gpuprobe.receiver.windows.state_changes"
)

// appendMetrics writes the windows' counters (once a client reported
// windows), state changes and probe offsets, and the coverage.
func (wt *windowTable) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	c := &wt.counters.WindowCounters
	if c.WindowsRead+c.WindowStates > 0 {
		for _, m := range []struct {
			name, unit, desc string
			v                uint64
		}{
			{"gpuprobe.receiver.windows.matched", "{window}", "Driver windows joined to their launch.", c.WindowsMatched},
			{"gpuprobe.receiver.windows.late", "{window}", "Driver windows whose launch was emitted before they came.", c.WindowsLate},
			{"gpuprobe.receiver.windows.unmatched", "{window}", "Driver windows of no known launch (the shim found none, unknown launch id or graph node, duplicate, or began before the launch call).", c.WindowsUnmatched},
			{"gpuprobe.receiver.windows.missing", "{launch}", "Launches emitted without a driver window while their client's windows were on.", c.WindowsMissing},
			{"gpuprobe.receiver.windows.dropped", "{window}", "Driver windows the shim lost (CUPTI's dropped count, full ring).", c.WindowsDropped},
			{"gpuprobe.receiver.windows.device_launched", "{window}", "Driver windows of kernels launched by kernels (dynamic parallelism), apart from their host launch's own.", c.WindowsDevice},
			{"gpuprobe.receiver.windows.whole_graphs", "{window}", "Driver windows of whole graph launches joined to their nodes (graph launches timed whole, not node by node).", c.WindowsWhole},
		} {
			dp := newSum(sm, m.name, m.unit, m.desc).AppendEmpty()
			dp.SetStartTimestamp(wt.cover.start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(m.v))
		}
		// Untimed launches by entry point: which launch kinds the
		// driver ran without timestamps (every entry point, 0s too).
		untimed := newSum(sm, "gpuprobe.receiver.windows.untimed", "{launch}", "Launches the driver ran without timestamps (CUPTI gave its kernel record none): no window, for that reason; by cuda.launch.api.")
		for api, n := range c.UntimedByAPI {
			dp := untimed.AppendEmpty()
			dp.SetStartTimestamp(wt.cover.start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(n))
			dp.Attributes().PutStr("cuda.launch.api", record.LaunchAPI(api).String())
		}
	}
	changes := newSum(sm, MetricWindowStates, "{change}", "Changes of a client's driver windows state, by the state and reason it changed to.")
	for st := range wt.changes {
		for rs, n := range wt.changes[st] {
			if n == 0 {
				continue
			}
			dp := changes.AppendEmpty()
			dp.SetStartTimestamp(wt.cover.start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(n))
			dp.Attributes().PutStr("gpuprobe.windows.state", record.WindowsState(st).String())
			dp.Attributes().PutStr("gpuprobe.windows.reason", record.WindowsReason(rs).String())
		}
	}
	offs := newExpHist(sm, MetricProbeOffset, "s", "How far a launch's probe window lies from the driver's window of it, per edge, inside or outside the driver's.")
	for edge, name := range EdgeNames {
		for dir, dname := range DirectionNames {
			h := &wt.offsets[edge][dir]
			if h.Count() == 0 {
				continue
			}
			dp := offs.AppendEmpty()
			dp.SetStartTimestamp(wt.cover.start)
			dp.SetTimestamp(ts)
			h.CopyTo(dp)
			dp.Attributes().PutStr("gpuprobe.windows.edge", name)
			dp.Attributes().PutStr("gpuprobe.windows.direction", dname)
		}
	}
	wt.cover.appendMetrics(sm, ts)
}

// appendMetrics writes the coverage of every process, every route (zeros
// included), and forgets the processes that are gone.
func (cv *coverage) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	launches := newSum(sm, MetricCoverageLaunches, "{launch}", "Launches by the route of their exact device window (none: no exact window), per process.")
	gpuTime := newSum(sm, MetricCoverageGPUTime, "s", "GPU time of launches by the route of their exact device window, per process (route none: estimated from the kernel's mean).")
	pids := make([]uint32, 0, len(cv.byPID))
	for pid := range cv.byPID {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	pm := newPatchMetrics(sm)
	for _, pid := range pids {
		p := cv.byPID[pid]
		for rt := range nRoutes {
			dp := launches.AppendEmpty()
			dp.SetStartTimestamp(p.start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(p.launches[rt]))
			coverageAttrs(dp.Attributes(), pid, rt)
			dp = gpuTime.AppendEmpty()
			dp.SetStartTimestamp(p.start)
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(p.seconds[rt])
			coverageAttrs(dp.Attributes(), pid, rt)
		}
		p.patch.appendMetrics(&pm, pid, p.start, ts)
		if p.gone {
			delete(cv.byPID, pid)
		}
	}
	cv.now = ts
}

func coverageAttrs(a pcommon.Map, pid uint32, rt route) {
	putPID(a, pid)
	a.PutStr("gpuprobe.windows.route", rt.String())
}

// putPID puts pid's process.pid (-1: the overflow's).
func putPID(a pcommon.Map, pid uint32) {
	if pid == otherPID {
		a.PutInt("process.pid", -1)
	} else {
		a.PutInt("process.pid", int64(pid))
	}
}
