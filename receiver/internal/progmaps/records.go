package progmaps

import (
	"fmt"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/btfdecode"
	"github.com/gpuprobe/gpuprobe/receiver/internal/otelid"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
)

// ScopeName is the instrumentation scope of user-program telemetry.
const ScopeName = "github.com/gpuprobe/gpuprobe/receiver/progmaps"

// AttrMapName is the span attribute naming the ring-buffer map of a record.
const AttrMapName = "gpuprobe.map.name"

// AttrClockMapped is false on spans and events whose GPU timestamps could
// not be mapped onto the host clock (no calibration record of the device
// yet): they are placed at the time the collector read them instead.
const AttrClockMapped = "gpuprobe.clock.mapped"

// traceBuf accumulates spans per application.
type traceBuf struct {
	td     ptrace.Traces
	byPID  map[uint64]ptrace.SpanSlice // by resourceKey
	nSpans int
}

func (b *traceBuf) reset() {
	b.td = ptrace.NewTraces()
	b.byPID = map[uint64]ptrace.SpanSlice{}
	b.nSpans = 0
}

// TakeTraces returns the spans built since the last call.
func (c *Collector) TakeTraces() ptrace.Traces {
	td := c.tr.td
	c.tr.reset()
	return td
}

// SpanCount is the number of spans waiting in TakeTraces.
func (c *Collector) SpanCount() int { return c.tr.nSpans }

// resourceKey separates the spans of host programs (by the record's pid,
// 0 when unknown) from those of applications' GPU maps.
func resourceKey(in *Instance, pid uint32) uint64 {
	if in.Host {
		return 1<<32 | uint64(pid)
	}
	return uint64(pid)
}

// spansOf returns the span slice of process pid (in.PID for application
// instances; from the record for the host instance).
func (c *Collector) spansOf(in *Instance, pid uint32) ptrace.SpanSlice {
	key := resourceKey(in, pid)
	if ss, ok := c.tr.byPID[key]; ok {
		return ss
	}
	rs := c.tr.td.ResourceSpans().AppendEmpty()
	c.fillResource(rs.Resource().Attributes(), in, pid)
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName(ScopeName)
	ss := sc.Spans()
	c.tr.byPID[key] = ss
	return ss
}

// fillResource puts the resource of process pid into a: the application's
// own, else one of its pid and executable name.
func (c *Collector) fillResource(a pcommon.Map, in *Instance, pid uint32) {
	if !in.Host && in.Resource != (pcommon.Map{}) {
		in.Resource.CopyTo(a)
		return
	}
	if !in.Host || pid != 0 {
		a.PutInt("process.pid", int64(pid))
	}
	if in.Process != "" {
		a.PutStr("process.executable.name", in.Process)
	}
	switch {
	case c.o.ServiceName != "":
		a.PutStr("service.name", c.o.ServiceName)
	case in.Process != "":
		a.PutStr("service.name", in.Process)
	case in.Host:
		a.PutStr("service.name", "unknown_service")
	default:
		a.PutStr("service.name", "unknown_service:cuda")
	}
}

// pidOf is the process of a record: the application's for GPU maps; for
// host programs' records their pid / tgid / pid_tgid field, or 0.
func pidOf(in *Instance, d *Def, fs []btfdecode.Field) uint32 {
	if !in.Host {
		return in.PID
	}
	if d.rec.pidField < 0 || fs[d.rec.pidField].Absent {
		return 0
	}
	f := &fs[d.rec.pidField]
	v := f.Uint
	if f.Kind == btfdecode.KindInt {
		v = uint64(f.Int)
	}
	if d.rec.pidIsTgid {
		v >>= 32 // bpf_get_current_pid_tgid: tgid in the upper half
	}
	return uint32(v)
}

// batch is the span that collects the events of one ring in one read.
type batch struct {
	span       ptrace.Span
	open       bool
	denied     bool // the span cap left this batch out: its events are dropped
	n          int
	pid        uint32
	start, end pcommon.Timestamp
}

func (b *batch) close() {
	if b.open && !b.denied {
		b.span.SetStartTimestamp(b.start)
		b.span.SetEndTimestamp(b.end)
		b.span.Attributes().PutInt("gpuprobe.map.records", int64(b.n))
	}
	b.open, b.denied = false, false
}

// admit says whether the span cap keeps the next span of pid.
func (c *Collector) admit(pid uint32) bool {
	return c.o.AdmitSpan == nil || c.o.AdmitSpan(pid, 1)
}

// ReadRings reads up to max records (per ring) from every ring-buffer map
// of in and turns them into spans (records with start and end fields) or
// span events. It returns the records read.
func (c *Collector) ReadRings(in *Instance, now time.Time, max int) int {
	total := 0
	for i := range in.rings {
		g := &in.rings[i]
		if g.kr != nil {
			total += c.readKernelRing(in, g, now, max)
			continue
		}
		var b batch
		total += g.cons.Read(max, func(r shm.Record) {
			c.record(in, g.def, r.Payload, now, &b)
		})
		b.close()
		c.count(g)
	}
	return total
}

// count adds what ring g lost since the last call to the counters. The
// ring's counters are written by the application: only growth counts.
func (c *Collector) count(g *ringInst) {
	st, cs := g.ring.Stats(), g.cons.Stats()
	if d := st.Dropped + st.Oversize + cs.Stalled + cs.Abandoned; d > g.lastDrop {
		c.counters.Dropped += d - g.lastDrop
		g.lastDrop = d
	}
	c.counters.Corrupt += cs.Corrupt - g.lastBad
	g.lastBad = cs.Corrupt
}

// DrainRings resolves, without reading them, the tickets left in each
// ring of a gone application (shm.Consumer.Drain; at most a lap: tickets
// further on can only be drops, counted by their producers), counting its
// records as dropped. It reports whether every ring was resolved.
func (c *Collector) DrainRings(in *Instance) bool {
	done := true
	for i := range in.rings {
		g := &in.rings[i]
		if g.kr != nil {
			continue
		}
		done = g.cons.Drain(g.ring.Slots(), nil) && done
		c.count(g)
	}
	return done
}

// Err returns the first ring invariant the application broke in one of
// in's rings (see shm.Consumer.Err), or nil.
func (in *Instance) Err() error {
	for _, g := range in.rings {
		if g.cons != nil {
			if err := g.cons.Err(); err != nil {
				return fmt.Errorf("map %s: %w", g.def.Name, err)
			}
		}
	}
	return nil
}

// record turns one ring record into a span or span event. A record
// shorter than the map's record type is decoded by the bytes written: the
// fields it holds whole are kept, the others omitted (Counters.Short; one
// that it ends inside of also counts in Counters.Cut, logged once per map).
func (c *Collector) record(in *Instance, d *Def, p []byte, now time.Time, b *batch) {
	c.counters.Records++
	if len(p) == 0 {
		c.counters.Invalid++
		return
	}
	fs, cut := d.Dec.DecodePrefix(c.fields, p)
	c.fields = fs
	if len(p) < d.Dec.Size() {
		c.counters.Short++
		if cut > 0 {
			c.counters.Cut++
			c.logCut(d, len(p))
		}
	}
	if d.rec.ringSpan && !fs[d.Dec.Span().Start].Absent && !fs[d.Dec.Span().End].Absent {
		c.recordSpan(in, d, fs, now)
	} else {
		c.recordEvent(in, d, fs, now, b)
	}
}

// logCut logs, once per map, that a record ended inside a field.
func (c *Collector) logCut(d *Def, n int) {
	if c.cutLogged[d.Name] {
		return
	}
	c.cutLogged[d.Name] = true
	c.o.Logger.Debug("gpuprobe: ring records end inside a field of their type; the cut field is omitted",
		zap.String("map", d.Name), zap.String("object", d.Object), zap.String("type", d.Dec.TypeName()),
		zap.Int("record_bytes", n), zap.Int("type_bytes", d.Dec.Size()))
}

// gpuTime maps a %globaltimer reading of the record's device onto the host
// clock; without a calibration it returns now and false.
//
// Host programs' records (d.rec.hostClock) carry bpf_ktime_get_ns, which is
// CLOCK_MONOTONIC: they are mapped with the monotonic offset instead.
func (c *Collector) gpuTime(in *Instance, d *Def, fs []btfdecode.Field, ns uint64, now time.Time) (pcommon.Timestamp, bool) {
	if d.rec.hostClock {
		if r, ok := c.o.Clock.MonoToReal(ns); ok {
			return pcommon.Timestamp(r), true
		}
		return pcommon.NewTimestampFromTime(now), false
	}
	var dev uint32
	switch {
	case d.rec.devField >= 0 && !fs[d.rec.devField].Absent:
		dev = uint32(fs[d.rec.devField].Uint)
	case c.o.Device != nil:
		dev = c.o.Device(in.Src)
	}
	if r, ok := c.o.Clock.GPUToReal(in.Src, dev, ns); ok {
		return pcommon.Timestamp(r), true
	}
	return pcommon.NewTimestampFromTime(now), false
}

func (c *Collector) recordSpan(in *Instance, d *Def, fs []btfdecode.Field, now time.Time) {
	pid := pidOf(in, d, fs)
	if !c.admit(pid) {
		return
	}
	h := d.Dec.Span()
	startNS, endNS := fs[h.Start].Uint, fs[h.End].Uint
	sp := c.spansOf(in, pid).AppendEmpty()
	sp.SetTraceID(otelid.NewTraceID())
	sp.SetSpanID(otelid.NewSpanID())
	sp.SetName(d.Name)
	sp.SetKind(ptrace.SpanKindInternal)
	end, ok := c.gpuTime(in, d, fs, endNS, now)
	start := end - pcommon.Timestamp(endNS-startNS)
	if endNS < startNS {
		start = end
	}
	if ok {
		start, _ = c.gpuTime(in, d, fs, startNS, now)
		start = min(start, end)
	} else {
		c.counters.Unmapped++
	}
	sp.SetStartTimestamp(start)
	sp.SetEndTimestamp(end)
	a := sp.Attributes()
	a.EnsureCapacity(len(fs) + 2)
	a.PutStr(AttrMapName, d.Name)
	if !ok {
		a.PutBool(AttrClockMapped, false)
	}
	putFields(a, d, fs)
	c.tr.nSpans++
	c.counters.SpansBuilt++
}

func (c *Collector) recordEvent(in *Instance, d *Def, fs []btfdecode.Field, now time.Time, b *batch) {
	ts, ok := pcommon.NewTimestampFromTime(now), true
	if d.rec.tsField >= 0 && !fs[d.rec.tsField].Absent {
		ts, ok = c.gpuTime(in, d, fs, fs[d.rec.tsField].Uint, now)
		if !ok {
			c.counters.Unmapped++
		}
	}
	pid := pidOf(in, d, fs)
	if b.open && (b.n >= c.o.MaxEventsPerSpan || b.pid != pid) {
		b.close()
	}
	if !b.open && !c.admit(pid) {
		b.pid, b.open, b.denied, b.n = pid, true, true, 0
	}
	if b.denied {
		b.n++
		return
	}
	if !b.open {
		b.pid = pid
		b.span = c.spansOf(in, pid).AppendEmpty()
		b.span.SetTraceID(otelid.NewTraceID())
		b.span.SetSpanID(otelid.NewSpanID())
		b.span.SetName(d.Name)
		b.span.SetKind(ptrace.SpanKindInternal)
		b.span.Attributes().PutStr(AttrMapName, d.Name)
		b.open, b.n, b.start, b.end = true, 0, ts, ts
		c.tr.nSpans++
		c.counters.SpansBuilt++
	}
	b.n++
	b.start, b.end = min(b.start, ts), max(b.end, ts)
	ev := b.span.Events().AppendEmpty()
	ev.SetName(d.Name)
	ev.SetTimestamp(ts)
	a := ev.Attributes()
	a.EnsureCapacity(len(fs) + 1)
	if !ok {
		a.PutBool(AttrClockMapped, false)
	}
	putFields(a, d, fs)
	c.counters.EventsBuilt++
}

// putFields writes the record's fields (except the timestamps used for the
// span or event) as attributes named after the field paths.
func putFields(a pcommon.Map, d *Def, fs []btfdecode.Field) {
	for i := range fs {
		if isTime(d, i) {
			continue
		}
		f := &fs[i]
		if f.Absent {
			continue
		}
		switch f.Kind {
		case btfdecode.KindInt:
			a.PutInt(f.Name, f.Int)
		case btfdecode.KindUint:
			a.PutInt(f.Name, int64(f.Uint))
		case btfdecode.KindBool:
			a.PutBool(f.Name, f.Uint != 0)
		case btfdecode.KindFloat:
			a.PutDouble(f.Name, f.Float)
		case btfdecode.KindString, btfdecode.KindEnum:
			a.PutStr(f.Name, f.Str)
		case btfdecode.KindBytes:
			a.PutEmptyBytes(f.Name).FromRaw(f.Bytes)
		}
	}
}

func isTime(d *Def, i int) bool {
	for _, t := range d.rec.tids {
		if t == i {
			return true
		}
	}
	return false
}

// Empty reports whether in's rings hold no ticket left to resolve, as far
// as their heads tell.
func (in *Instance) Empty() bool {
	for _, g := range in.rings {
		if g.cons != nil && g.ring.Stats().Head > g.cons.Position() {
			return false
		}
	}
	return true
}
