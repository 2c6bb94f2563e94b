package translate

// Exemplars: the kept launch traces of a kernel series, linked from its
// next metrics point (gpu.cuda.kernel.launches, and
// gpu.cuda.kernel.execution.duration for a launch whose execution time is
// known), at most exemplarsPerSeries per series and emission, anomalies
// before head traces. They cost nothing for the launches left out: only a
// kept trace writes one.

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Bounds of the exemplars: per series and emission, and of the series
// that have some (a Translator whose metrics are never taken keeps no
// more).
const (
	exemplarsPerSeries = 2
	maxExemplarSeries  = 4096
)

// exemplar is one kept launch trace, for its series' next points.
type exemplar struct {
	trace    pcommon.TraceID
	span     pcommon.SpanID // the launch span
	ts       pcommon.Timestamp
	execS    float64 // execution time, s (haveExec)
	haveExec bool
	why      int // keepReasons
}

// exemplarBook holds the exemplars of each series until its next
// emission.
type exemplarBook struct {
	bySeries map[*devSeries][]exemplar
}

// add keeps e for series s, in place of a head trace's when s has its
// fill and e is an anomaly.
func (eb *exemplarBook) add(s *devSeries, e exemplar) {
	es, ok := eb.bySeries[s]
	switch {
	case !ok && len(eb.bySeries) >= maxExemplarSeries:
	case len(es) < exemplarsPerSeries:
		if es == nil {
			es = make([]exemplar, 0, exemplarsPerSeries)
		}
		eb.bySeries[s] = append(es, e)
	case anomalous(e.why):
		for i := range es {
			if !anomalous(es[i].why) {
				es[i] = e
				return
			}
		}
	}
}

// putLaunches writes s's exemplars on its launches point.
func (eb *exemplarBook) putLaunches(s *devSeries, to pmetric.ExemplarSlice) {
	for _, e := range eb.bySeries[s] {
		x := e.put(to)
		x.SetIntValue(1)
	}
}

// putExec writes s's exemplars that have an execution time on its
// execution duration point.
func (eb *exemplarBook) putExec(s *devSeries, to pmetric.ExemplarSlice) {
	for _, e := range eb.bySeries[s] {
		if e.haveExec {
			x := e.put(to)
			x.SetDoubleValue(e.execS)
		}
	}
}

// put appends e's trace, time and reason to to (the value is the
// caller's).
func (e *exemplar) put(to pmetric.ExemplarSlice) pmetric.Exemplar {
	x := to.AppendEmpty()
	x.SetTraceID(e.trace)
	x.SetSpanID(e.span)
	x.SetTimestamp(e.ts)
	x.FilteredAttributes().PutStr(AttrSamplingReason, keepReasons[e.why])
	return x
}

// reset forgets the exemplars written (after an emission).
func (eb *exemplarBook) reset() {
	if len(eb.bySeries) > 0 {
		clear(eb.bySeries)
	}
}

// lastExemplars returns the exemplars of the point o appended last.
func (o histOut) lastExemplars() pmetric.ExemplarSlice {
	if o.explicit {
		return o.bucketed.At(o.bucketed.Len() - 1).Exemplars()
	}
	return o.exp.At(o.exp.Len() - 1).Exemplars()
}
