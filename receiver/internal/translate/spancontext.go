package translate

// Application span contexts: a shim client's SpanContext records say, per
// thread, under which span of the application's own traces its following
// launches, copies and syncs run. The client keeps each thread's latest
// context (records of one thread come in the launch ring before the
// records they apply to); a launch takes its thread's context when its
// record is read, and its root span (the outermost host call over it,
// else the launch span) then becomes a child of that span in the
// application's trace instead of starting a trace of its own; so do the
// spans of a copy or a sync.

import (
	"github.com/gpuprobe/gpuprobe/receiver/internal/otelid"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// maxThreadContexts bounds the threads of one client that hold a span
// context: past it, a new thread's context is ignored (its launches keep
// their own traces). A cleared context frees its entry.
const maxThreadContexts = 4096

// AttrParentSource says where a launch trace's parent span came from on
// its root span: "thread" (the application's span context, handed to the
// shim on the launching thread) or "env" (TRACEPARENT of the process).
const AttrParentSource = "gpuprobe.parent.source"

// appSpan is the application span a launch ran under; the zero value is
// none.
type appSpan struct {
	trace  pcommon.TraceID
	span   pcommon.SpanID
	flags  uint8
	source record.SpanContextSource
	stack  *launchStack // a launch's own stack, if it was sampled (stacks.go)
}

// set says whether there is a span.
func (a *appSpan) set() bool { return a.source != record.SpanContextNone }

// sampled says whether the application's sampler kept the span.
func (a *appSpan) sampled() bool { return a.set() && a.flags&record.TraceFlagSampled != 0 }

// threadSpans are the span contexts of a client's threads, by thread id.
type threadSpans map[uint32]appSpan

// onSpanContext takes SpanContext record r of source src.
func (ct *clientTable) onSpanContext(src uint32, r *record.SpanContext) {
	if src == HostProbeSource {
		return // host probes know no application span
	}
	c := ct.clientOf(src)
	if r.Source == record.SpanContextNone {
		delete(c.spans, r.TID)
		return
	}
	if c.spans == nil {
		c.spans = threadSpans{}
	}
	if _, ok := c.spans[r.TID]; !ok && len(c.spans) >= maxThreadContexts {
		return
	}
	c.spans[r.TID] = appSpan{trace: r.TraceID, span: r.SpanID, flags: r.Flags, source: r.Source}
}

// spanOf returns the span context of thread tid of source src (none when
// it set none).
func (ct *clientTable) spanOf(src, tid uint32) appSpan {
	if c := ct.get(src); c != nil {
		return c.spans[tid]
	}
	return appSpan{}
}

// traceOf returns the trace of a launch made under application span a and
// the parent of its root span: a's trace and span, else a new trace and
// no parent.
func traceOf(a *appSpan) (pcommon.TraceID, pcommon.SpanID) {
	if a.set() {
		return a.trace, a.span
	}
	return otelid.NewTraceID(), pcommon.SpanID{}
}
