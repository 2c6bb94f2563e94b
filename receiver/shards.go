package receiver

// Poll workers (poll_workers): the clients' sources are split among
// several translators, each read by a goroutine of its own during a poll
// pass. A source belongs to one shard for its life, chosen by its
// process id (shardOf), so that all the clients of a process share one
// translator's per-process state (series, launch tables, span and trace
// buckets). What is node-wide is handled apart: the per-GPU time
// attribution and the trace policy's node buckets are the translators'
// shared translate.Node; the pass's budget (planShares), the rotation,
// releasing sources, the counters and the emission stay on the poll
// goroutine, which waits for every worker before it goes on. A pass is
// thus still one step of the poll loop: nothing of a shard runs while the
// loop flushes, emits or shuts down.

import (
	"context"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// shards are the poll workers' translators, one per worker, sharing one
// translate.Node.
type shards struct {
	trs []*translate.Translator
}

// newShards returns k translators with options o that share one Node.
func newShards(o translate.Options, k int) shards {
	node := translate.NewNode(o)
	trs := make([]*translate.Translator, max(k, 1))
	for i := range trs {
		trs[i] = translate.NewShard(o, node)
	}
	return shards{trs: trs}
}

// shardOf returns the shard of a client of process pid (0: unknown, then
// by its source id) among k: a multiplicative hash, so that processes
// whose pids step by a fixed stride (their threads take the pids in
// between) still spread.
func shardOf(pid, id uint32, k int) int {
	if k <= 1 {
		return 0
	}
	if pid == 0 {
		pid = id
	}
	return int(uint64(pid*2654435761) * uint64(k) >> 32)
}

// of returns the translator of source s.
func (sh *shards) of(s *source) *translate.Translator { return sh.trs[s.shard] }

// first returns the first shard's translator: the one of host probes and
// user maps (pollWorkers), and the one that writes the Node's metrics.
func (sh *shards) first() *translate.Translator { return sh.trs[0] }

// each runs f for every shard, in parallel when there are several,
// and returns when all are done.
func (sh *shards) each(f func(i int, tr *translate.Translator)) {
	if len(sh.trs) == 1 {
		f(0, sh.trs[0])
		return
	}
	var wg sync.WaitGroup
	for i, tr := range sh.trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, tr)
		}()
	}
	wg.Wait()
}

// counters returns the translators' counters summed.
func (sh *shards) counters() translate.Counters {
	var c translate.Counters
	for _, tr := range sh.trs {
		c.Add(tr.Counters())
	}
	return c
}

// pending returns the launches waiting for more records in every shard.
func (sh *shards) pending() int {
	n := 0
	for _, tr := range sh.trs {
		n += tr.Pending()
	}
	return n
}

// spanCount returns the spans built and not taken in every shard.
func (sh *shards) spanCount() int {
	n := 0
	for _, tr := range sh.trs {
		n += tr.SpanCount()
	}
	return n
}

// takeTraces returns the spans every shard built, in one ptrace.
func (sh *shards) takeTraces() ptrace.Traces {
	td := sh.trs[0].TakeTraces()
	for _, tr := range sh.trs[1:] {
		tr.TakeTraces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	return td
}

// metrics returns every shard's metrics in one pmetric: the
// collector's resource first, its metrics summed over the shards (self
// are added once), then every process's resource. The first shard's go
// first: it settles the node's GPU attribution the others' processes
// read.
func (sh *shards) metrics(now time.Time, self []translate.SelfMetric) pmetric.Metrics {
	md := sh.trs[0].Metrics(now, self)
	into := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for _, tr := range sh.trs[1:] {
		mi := tr.Metrics(now, nil)
		rms := mi.ResourceMetrics()
		mergeMetrics(into, rms.At(0).ScopeMetrics().At(0).Metrics())
		first := true // the collector's resource, merged above
		rms.RemoveIf(func(pmetric.ResourceMetrics) bool {
			f := first
			first = false
			return f
		})
		rms.MoveAndAppendTo(md.ResourceMetrics())
	}
	return md
}

// appendMetrics writes the metrics of no process of every shard into
// sm, summed (metrics), with self once.
func (sh *shards) appendMetrics(sm pmetric.MetricSlice, now time.Time, self []translate.SelfMetric) {
	sh.trs[0].AppendMetrics(sm, now, self)
	for _, tr := range sh.trs[1:] {
		si := pmetric.NewMetricSlice()
		tr.AppendMetrics(si, now, nil)
		mergeMetrics(sm, si)
	}
}

// mergeMetrics adds the metrics of src to dst: a sum's points to the
// point of dst's same-named sum with the same attributes (the shards
// count apart what one translator would count together), every other
// point or metric appended.
func mergeMetrics(dst, src pmetric.MetricSlice) {
	for i := range src.Len() {
		m := src.At(i)
		d, ok := findMetric(dst, m.Name(), m.Type())
		if !ok {
			m.CopyTo(dst.AppendEmpty())
			continue
		}
		switch m.Type() {
		case pmetric.MetricTypeSum:
			addPoints(d.Sum().DataPoints(), m.Sum().DataPoints())
		case pmetric.MetricTypeGauge:
			appendPoints(d.Gauge().DataPoints(), m.Gauge().DataPoints())
		default:
			m.CopyTo(dst.AppendEmpty())
		}
	}
}

// findMetric returns the metric of sl named name of type t.
func findMetric(sl pmetric.MetricSlice, name string, t pmetric.MetricType) (pmetric.Metric, bool) {
	for i := range sl.Len() {
		if m := sl.At(i); m.Name() == name && m.Type() == t {
			return m, true
		}
	}
	return pmetric.Metric{}, false
}

// addPoints adds each point of src to dst's point with the same
// attributes, or appends it.
func addPoints(dst, src pmetric.NumberDataPointSlice) {
	for i := range src.Len() {
		p := src.At(i)
		q, ok := findPoint(dst, p.Attributes())
		switch {
		case !ok:
			p.CopyTo(dst.AppendEmpty())
		case p.ValueType() == pmetric.NumberDataPointValueTypeDouble:
			q.SetDoubleValue(q.DoubleValue() + p.DoubleValue())
		default:
			q.SetIntValue(q.IntValue() + p.IntValue())
		}
	}
}

// appendPoints appends the points of src to dst.
func appendPoints(dst, src pmetric.NumberDataPointSlice) {
	for i := range src.Len() {
		src.At(i).CopyTo(dst.AppendEmpty())
	}
}

// findPoint returns the point of sl with attributes a.
func findPoint(sl pmetric.NumberDataPointSlice, a pcommon.Map) (pmetric.NumberDataPoint, bool) {
	for i := range sl.Len() {
		if p := sl.At(i); p.Attributes().Equal(a) {
			return p, true
		}
	}
	return pmetric.NumberDataPoint{}, false
}

// testHookShardRead runs in a shard's worker before it reads source s
// (tests: a client acting in the middle of a pass).
var testHookShardRead = func(*source) {}

// passResult is what one shard's read of a pass found.
type passResult struct {
	dropped, corrupt uint64
	waiting          bool
	closed           []*source
}

// readShards reads every source of the pass, each by its shard's worker,
// with its share of the pass's budget (shares, by index in sources), and
// returns the results summed.
func readShards(ctx context.Context, r *gpuReceiver, now time.Time, sources []*source, shares []int, stopping bool) passResult {
	parts := make([][]int, len(r.sh.trs))
	for i, s := range sources {
		parts[s.shard] = append(parts[s.shard], i)
	}
	res := make([]passResult, len(r.sh.trs))
	r.sh.each(func(k int, _ *translate.Translator) {
		for _, i := range parts[k] {
			readOne(ctx, r, sources[i], now, shares[i], stopping, &res[k])
		}
	})
	var all passResult
	for _, p := range res {
		all.dropped, all.corrupt = all.dropped+p.dropped, all.corrupt+p.corrupt
		all.waiting = all.waiting || p.waiting
		all.closed = append(all.closed, p.closed...)
	}
	return all
}

// readOne reads source s's share of the pass (its shard's worker) and
// notes in res whether it is to be released.
func readOne(ctx context.Context, r *gpuReceiver, s *source, now time.Time, share int, stopping bool, res *passResult) {
	// Whether the producer had gone before this read: only then is
	// everything it wrote in the rings (onDisconnect may set closing
	// while they are read, and records written since would be lost).
	r.mu.Lock()
	gone, evict := s.closing || stopping, s.evict
	peer := s.peer
	s.peer = nil
	r.mu.Unlock()
	if peer != nil {
		r.sh.of(s).Connect(s.id, *peer) // before any of its records
	}
	testHookShardRead(s)
	// Each source's records are stamped when its read begins, not when
	// the pass did: a window that ended while earlier sources were read
	// has not ended in the future.
	if t := time.Now(); t.After(now) {
		now = t
	}
	lost, bad := r.readSource(s, now, share)
	res.dropped, res.corrupt = res.dropped+lost, res.corrupt+bad
	res.waiting = res.waiting || backlog(s.launch) > 0
	release := false
	if gone || evict {
		var lost, bad uint64
		release, lost, bad = r.finished(s, now, stopping || evict)
		res.dropped, res.corrupt = res.dropped+lost, res.corrupt+bad
	}
	if err := s.violation(); err != nil {
		r.disconnect(ctx, s, err)
		release = true
	}
	if release {
		res.closed = append(res.closed, s)
	}
}

// clients returns the clients every shard knows.
func (sh *shards) clients() int {
	n := 0
	for _, tr := range sh.trs {
		n += tr.Clients()
	}
	return n
}
