package translate

// Trace policy (sampling::traces_per_second_*, anomalies_per_second_*,
// slow_factor, host_wait_threshold): which traces are built, decided
// before any span is, so that a trace left out costs a few comparisons
// and a token bucket or two. An ordinary launch passes three buckets
// (head sampling): its kernel's (per client), its process's, refilled at
// the process's share of the node's rate, and the node's; one made under
// a sampled application span (spancontext.go) skips its kernel's and
// sampling::one_in, so a kept request keeps its kernels; one that
// carries its thread's stack (stacks.go) skips its kernel's. An anomalous
// one (failed, slow against its kernel's running median, a large host
// wait) passes buckets of its own per process and node, and the head
// ones when those are empty (without its kernel's under a sampled span
// or with a stack). A host-call trace passes the process's and
// the node's head buckets. Whatever is decided, the metrics count every
// launch (the launch table records it before it asks).
//
// The buckets refill by the wall clock the Translator is handed (Handle,
// Expire, FlushPending): one reading per poll pass, not one per trace.

import (
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Self-metrics of the trace policy, by AttrSamplingReason.
const (
	MetricTracesKept       = "gpuprobe.receiver.traces.kept"
	MetricTracesSampledOut = "gpuprobe.receiver.traces.sampled_out"
)

// AttrSamplingReason says why a trace was kept (on its root span and on
// MetricTracesKept) or left out (on MetricTracesSampledOut).
const AttrSamplingReason = "gpuprobe.sampling.reason"

// Why a trace was kept: an index of keepReasons.
const (
	keepHead     = iota // within the head bounds
	keepFailed          // its launch failed (non-zero CUresult)
	keepSlow            // executed over slow_factor × its kernel's running median
	keepHostWait        // its stream sat idle host_wait_threshold or more for it
	keepParent          // an ordinary launch under a sampled application span, within the process's and node's head bounds
	keepStack           // an ordinary launch that carries its thread's stack (stacks.go), within the process's and node's head bounds
	nKeepReasons
)

// keepReasons are the values of AttrSamplingReason of a kept trace.
var keepReasons = [nKeepReasons]string{"head", "failed", "slow", "host_wait", "parent", "stack"}

// anomalous says whether keep reason why is an anomaly's.
func anomalous(why int) bool { return why != keepHead && why != keepParent && why != keepStack }

// Why a trace was left out: an index of outReasons.
const (
	outOneIn       = iota // sampling::one_in
	outMinDuration        // sampling::min_duration
	outKernel             // its kernel's head bucket was empty
	outProcess            // its process's (at its share of the node's rate)
	outNode               // the node's
	outSpanRate           // limits::spans_per_second, after the policy
	nOutReasons
)

// outReasons are the values of AttrSamplingReason of a left-out trace.
var outReasons = [nOutReasons]string{"one_in", "min_duration", "kernel", "process", "node", "spans_per_second"}

// TracePolicyOptions bound the traces. The zero value keeps every trace
// and tests for no anomaly but failed launches.
type TracePolicyOptions struct {
	// Head traces a second (rate and burst) of each kernel of a client,
	// of each process and of the node; 0: no limit.
	PerKernel, PerProcess, PerNode float64
	// Anomalous traces a second of each process and of the node, before
	// the head bounds; 0: no limit.
	AnomaliesPerProcess, AnomaliesPerNode float64
	// SlowFactor marks slow a launch that executed more than this times
	// its kernel's running median (0: off).
	SlowFactor float64
	// HostWait marks a launch whose host wait was at least this (0: off).
	HostWait time.Duration
}

// TracePolicyOf returns the trace policy of the configuration's
// sampling::traces_per_second_*, anomalies_per_second_*, slow_factor
// and host_wait_threshold.
func TracePolicyOf(c *config.SamplingConfig) TracePolicyOptions {
	return TracePolicyOptions{PerKernel: c.TracesPerSecondPerKernel, PerProcess: c.TracesPerSecondPerProcess,
		PerNode: c.TracesPerSecondPerNode, AnomaliesPerProcess: c.AnomaliesPerSecondPerProcess,
		AnomaliesPerNode: c.AnomaliesPerSecondPerNode, SlowFactor: c.SlowFactor, HostWait: c.HostWaitThreshold}
}

// headBounded says whether some head bound is set.
func (o *TracePolicyOptions) headBounded() bool {
	return o.PerKernel > 0 || o.PerProcess > 0 || o.PerNode > 0
}

// Running median of a kernel's execution time: each launch moves the
// estimate toward its time by at most medianStep of the estimate, and
// the estimate judges from the medianWarmup-th launch on.
const (
	medianStep   = 1.0 / 16
	medianWarmup = 16
)

// kernelTrace is the trace policy's state of one kernel of a client.
type kernelTrace struct {
	head   tokenBucket
	median float64 // running estimate of the execution time, ns
	n      uint32  // executions folded in, up to medianWarmup
}

// slow folds execution time ns into the running median and says whether
// it was over factor × the median before it.
func (kt *kernelTrace) slow(ns uint64, factor float64) bool {
	x := float64(ns)
	slow := kt.n >= medianWarmup && kt.median > 0 && x > factor*kt.median
	switch m := kt.median; {
	case kt.n == 0:
		kt.median = x
	case x > m:
		kt.median = min(x, m+m*medianStep)
	case x < m:
		kt.median = max(x, m-m*medianStep)
	}
	if kt.n < medianWarmup {
		kt.n++
	}
	return slow
}

// Processes: one counts as tracing for activeWindow after its latest
// head request (the node's rate is shared among those), and is
// forgotten after procTraceIdle without a request.
const (
	activeWindow  = time.Second
	procTraceIdle = 10 * time.Second
)

// procTrace is the trace policy's state of one process.
type procTrace struct {
	head, anomaly tokenBucket
	seen          time.Time // latest head request
	used          time.Time // latest request
}

// tracePolicy owns the buckets of the node and its processes and counts
// what it kept and left out.
type tracePolicy struct {
	o          *TracePolicyOptions
	now        time.Time // the latest wall clock the Translator was handed
	start      pcommon.Timestamp
	nt         *nodeTrace // the node's buckets, shared with the Node's other Translators
	byPID      map[uint32]*procTrace
	active     int       // processes tracing: counted at the latest sweep, plus those become so since
	nodeActive int       // the same summed over the Node's Translators, as of this one's latest change
	swept      time.Time // the latest sweep
	kept       [nKeepReasons]uint64
	out        [nOutReasons]uint64
}

// anomaly says why finished launch l is anomalous (keepHead: it is not;
// keepParent: it is not, and it ran under a sampled application span),
// folding its execution time into its kernel's running median.
func (tp *tracePolicy) anomaly(l *launch, tm *launchTimes) int {
	slow := tm.haveExec && tp.o.SlowFactor > 0 && l.k.trace.slow(tm.execNS, tp.o.SlowFactor)
	switch {
	case l.rec.Result != 0:
		return keepFailed
	case slow:
		return keepSlow
	case tp.o.HostWait > 0 && l.gap.known && l.gap.hostWaitNS >= uint64(tp.o.HostWait):
		return keepHostWait
	case l.host.app.sampled():
		return keepParent
	case l.host.app.stack != nil:
		return keepStack
	}
	return keepHead
}

// launch decides whether finished launch l, anomalous for reason why
// (anomaly), gets a trace; a refusal is counted.
func (tp *tracePolicy) launch(l *launch, why int) bool {
	if why == keepParent || why == keepStack {
		// The application's sampler kept the span the launch ran under:
		// no kernel bound (a kept request shows all its kernels), the
		// process's and the node's, as for a host-call trace.
		return tp.host(l.rec.PID)
	}
	if why == keepHead {
		switch {
		case !tp.o.headBounded():
			return true
		case !ready(&l.k.trace.head, tp.now, tp.o.PerKernel):
			// The cheap path of a launch-bound loop: no process lookup.
			tp.out[outKernel]++
			return false
		}
	}
	now := tp.now
	p := tp.proc(l.rec.PID, now)
	if anomalous(why) && tp.takeAnomaly(p, now) {
		return true
	}
	k := &l.k.trace.head
	if l.host.app.sampled() || l.host.app.stack != nil {
		// An anomaly past its bounds under a kept request (or with a
		// stack) is bounded as the ordinary launches there: not by its
		// kernel.
		k = nil
	}
	if out := tp.takeHead(k, p, now); out >= 0 {
		tp.out[out]++
		return false
	}
	return true
}

// host decides whether a host-call trace of process pid is built (the
// process's and the node's head bounds); a refusal is counted.
func (tp *tracePolicy) host(pid uint32) bool {
	if !tp.o.headBounded() {
		return true
	}
	now := tp.now
	if out := tp.takeHead(nil, tp.proc(pid, now), now); out >= 0 {
		tp.out[out]++
		return false
	}
	return true
}

// takeAnomaly takes a token from p's and the node's anomaly buckets if
// both have one.
func (tp *tracePolicy) takeAnomaly(p *procTrace, now time.Time) bool {
	pr, nr := tp.o.AnomaliesPerProcess, tp.o.AnomaliesPerNode
	if !ready(&p.anomaly, now, pr) {
		return false
	}
	tp.nt.mu.Lock()
	defer tp.nt.mu.Unlock()
	if !ready(&tp.nt.nodeAnomaly, now, nr) {
		return false
	}
	spend(&p.anomaly, pr)
	spend(&tp.nt.nodeAnomaly, nr)
	return true
}

// takeHead takes a token from the head buckets of kernel k (nil: none),
// the node and process p if all have one, and returns -1; else the out
// reason of the first that had none (and takes nothing).
func (tp *tracePolicy) takeHead(k *tokenBucket, p *procTrace, now time.Time) int {
	if now.Sub(p.seen) > activeWindow {
		tp.setActive(tp.active + 1)
	}
	p.seen = now
	share := tp.share()
	tp.nt.mu.Lock()
	defer tp.nt.mu.Unlock()
	switch {
	case k != nil && !ready(k, now, tp.o.PerKernel):
		return outKernel
	case !ready(&tp.nt.node, now, tp.o.PerNode):
		return outNode
	case !ready(&p.head, now, share):
		return outProcess
	}
	if k != nil {
		spend(k, tp.o.PerKernel)
	}
	spend(&p.head, share)
	spend(&tp.nt.node, tp.o.PerNode)
	return -1
}

// share is a process's head rate: PerProcess, at most the node's rate
// divided among the processes tracing (0: no limit).
func (tp *tracePolicy) share() float64 {
	r := tp.o.PerProcess
	if n := tp.o.PerNode; n > 0 {
		if s := n / float64(max(tp.nodeActive, 1)); r == 0 || s < r {
			r = s
		}
	}
	return r
}

// ready refills b and says whether it has a token at rate (0: no limit).
func ready(b *tokenBucket, now time.Time, rate float64) bool {
	return rate <= 0 || b.ready(now, 1, rate)
}

// spend takes the token ready found (nothing for no limit).
func spend(b *tokenBucket, rate float64) {
	if rate > 0 {
		b.tokens--
	}
}

// proc returns pid's state, made on first use (past maxRateProcs, after a
// sweep found no idle one, the shared otherPID's), and sweeps at most
// once per activeWindow.
func (tp *tracePolicy) proc(pid uint32, now time.Time) *procTrace {
	if now.Sub(tp.swept) >= activeWindow {
		tp.sweep(now)
	}
	p := tp.byPID[pid]
	if p == nil {
		if len(tp.byPID) >= maxRateProcs {
			pid = otherPID
			p = tp.byPID[pid]
		}
		if p == nil {
			p = &procTrace{}
			tp.byPID[pid] = p
		}
	}
	p.used = now
	return p
}

// sweep recounts the processes tracing and forgets the idle ones.
func (tp *tracePolicy) sweep(now time.Time) {
	tp.swept = now
	active := 0
	for pid, p := range tp.byPID {
		switch {
		case now.Sub(p.used) > procTraceIdle:
			delete(tp.byPID, pid)
		case now.Sub(p.seen) <= activeWindow:
			active++
		}
	}
	tp.setActive(active)
}

// setActive sets the processes tracing in this Translator to n and
// updates the node's count.
func (tp *tracePolicy) setActive(n int) {
	tp.nodeActive = tp.nt.setActive(tp.active, n)
	tp.active = n
}

// appendMetrics writes the traces kept and left out, by reason (only the
// reasons with some).
func (tp *tracePolicy) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	put := func(name, desc string, counts []uint64, reasons []string) {
		dps := newSum(sm, name, "{trace}", desc)
		for i, n := range counts {
			if n == 0 {
				continue
			}
			dp := dps.AppendEmpty()
			dp.SetStartTimestamp(tp.start)
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(n))
			dp.Attributes().PutStr(AttrSamplingReason, reasons[i])
		}
	}
	put(MetricTracesKept, "Traces built, by why the trace policy kept them (head, failed, slow, host_wait, parent).",
		tp.kept[:], keepReasons[:])
	put(MetricTracesSampledOut, "Traces not built, by what left them out (one_in, min_duration, kernel, process, node, spans_per_second); their launches still count in every metric.",
		tp.out[:], outReasons[:])
}
