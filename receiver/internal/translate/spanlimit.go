package translate

// Span rate (limits::spans_per_second): the spans of each process go
// through a token bucket of that rate and burst, so one client's flood
// cannot crowd out the others' spans. A trace is kept or dropped whole,
// at its emission point; a dropped one's spans are counted per process
// (MetricSpansRateLimited). Only span export is capped: the launch was
// already counted in the metrics.

import (
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// MetricSpansRateLimited counts, per process, the spans of the traces
// left out by limits::spans_per_second.
const MetricSpansRateLimited = "gpuprobe.receiver.spans.rate_limited"

// SpanLimitOptions configure the per-process span cap.
type SpanLimitOptions struct {
	// PerSecond is the rate and burst of each process's bucket; 0: no cap.
	PerSecond int
	// OnCapped, if set, is called the first time a process (a client; a
	// reconnect is a new one) goes over the cap.
	OnCapped func(pid uint32)
	// Now is the clock of the buckets (default time.Now).
	Now func() time.Time
}

// maxRateProcs bounds the processes with a bucket of their own; later
// ones share one (process.pid -1) until idle buckets make room.
const maxRateProcs = 1024

// tokenBucket holds up to burst tokens, refilled at rate a second.
type tokenBucket struct {
	tokens float64
	last   time.Time // latest refill; zero: never used (full)
}

// take refills b to now and takes n tokens if it holds at least
// min(n, burst): a trace larger than the burst passes a full bucket and
// leaves it in debt, so a process's long-run rate stays within rate.
func (b *tokenBucket) take(now time.Time, n int, rate float64) bool {
	if !b.ready(now, n, rate) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// ready refills b to now and says whether take(now, n, rate) would take.
func (b *tokenBucket) ready(now time.Time, n int, rate float64) bool {
	b.refill(now, rate)
	return b.tokens >= min(float64(n), rate)
}

// refill adds the tokens earned since the last refill (none for a clock
// that went back).
func (b *tokenBucket) refill(now time.Time, rate float64) {
	switch {
	case b.last.IsZero():
		b.tokens = rate
	case now.After(b.last):
		b.tokens = min(rate, b.tokens+now.Sub(b.last).Seconds()*rate)
	default:
		return
	}
	b.last = now
}

// procRate is one process's bucket and the spans it lost.
type procRate struct {
	bucket  tokenBucket
	dropped uint64
	start   pcommon.Timestamp
	warned  bool // OnCapped was called
	gone    bool // its client left: emitted once more, then forgotten
}

// spanLimit owns the buckets of every process.
type spanLimit struct {
	o     *SpanLimitOptions
	start pcommon.Timestamp
	now   pcommon.Timestamp // the latest emission (start of series created after it)
	byPID map[uint32]*procRate
	swept time.Time // the latest sweep for idle buckets
}

// AdmitSpans says whether the next trace of process pid, of n spans, is
// kept under limits::spans_per_second (counted when it is not): for the
// spans built outside the Translator (user programs' ring records).
func (t *Translator) AdmitSpans(pid uint32, n int) bool { return t.spans.limit.admit(pid, n) }

// admit says whether the next trace of pid, of n spans, is kept, and
// counts it when it is not.
func (sl *spanLimit) admit(pid uint32, n int) bool {
	if sl.o.PerSecond <= 0 || n <= 0 {
		return true
	}
	now := sl.o.Now()
	p := sl.proc(pid, now)
	if p.bucket.take(now, n, float64(sl.o.PerSecond)) {
		return true
	}
	p.dropped += uint64(n)
	if !p.warned {
		p.warned = true
		if sl.o.OnCapped != nil {
			sl.o.OnCapped(pid)
		}
	}
	return false
}

// proc returns pid's bucket, made on first use; past maxRateProcs, after
// a sweep (at most once a second) found no idle bucket, the shared one.
func (sl *spanLimit) proc(pid uint32, now time.Time) *procRate {
	if p := sl.byPID[pid]; p != nil {
		return p
	}
	if len(sl.byPID) >= maxRateProcs && now.Sub(sl.swept) >= time.Second {
		sl.swept = now
		sl.sweep(now)
	}
	if len(sl.byPID) >= maxRateProcs {
		pid = otherPID
		if p := sl.byPID[pid]; p != nil {
			return p
		}
	}
	p := &procRate{start: max(sl.start, sl.now)}
	sl.byPID[pid] = p
	return p
}

// sweep forgets the buckets that lost nothing and are full again: a new
// one would be the same.
func (sl *spanLimit) sweep(now time.Time) {
	rate := float64(sl.o.PerSecond)
	for pid, p := range sl.byPID {
		if p.dropped == 0 && pid != otherPID {
			p.bucket.refill(now, rate)
			if p.bucket.tokens >= rate {
				delete(sl.byPID, pid)
			}
		}
	}
}

// gone marks pid's bucket for removal after its next emission (at once
// when it lost nothing).
func (sl *spanLimit) gone(pid uint32) {
	p := sl.byPID[pid]
	switch {
	case p == nil:
	case p.dropped == 0:
		delete(sl.byPID, pid)
	default:
		p.gone = true
	}
}

// appendMetrics writes the spans lost by each process that lost some,
// and forgets the processes that are gone.
func (sl *spanLimit) appendMetrics(sm pmetric.MetricSlice, ts pcommon.Timestamp) {
	dps := newSum(sm, MetricSpansRateLimited, "{span}",
		"Spans of traces left out because their process was over limits::spans_per_second, per process.")
	pids := make([]uint32, 0, len(sl.byPID))
	for pid, p := range sl.byPID {
		if p.dropped > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range pids {
		p := sl.byPID[pid]
		dp := dps.AppendEmpty()
		dp.SetStartTimestamp(p.start)
		dp.SetTimestamp(ts)
		dp.SetIntValue(int64(p.dropped))
		if pid == otherPID {
			dp.Attributes().PutInt("process.pid", -1)
		} else {
			dp.Attributes().PutInt("process.pid", int64(pid))
		}
		if p.gone {
			delete(sl.byPID, pid)
		}
	}
	sl.now = ts
}

// launchSpanCount is the number of spans of launch l's trace: the launch,
// its launch call, its host calls, its device phases and completion.
func (so *spanOut) launchSpanCount(l *launch, tm *launchTimes) int {
	n := 2 + len(l.host.calls)
	if tm.dev {
		n += 2
	}
	if l.completed {
		n++
	}
	return n
}

// treeSize is the number of spans of host call c and its children.
func treeSize(c *hostCall) int {
	n := 1
	for _, d := range c.children {
		n += treeSize(d)
	}
	return n
}
