// Package otelid makes the random trace and span identifiers of the spans
// the receiver builds.
package otelid

import (
	"math/rand/v2"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// NewTraceID returns a random trace id.
func NewTraceID() pcommon.TraceID {
	var id [16]byte
	a, b := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		id[i], id[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
	}
	return id
}

// NewSpanID returns a random span id; it is never the zero (invalid) id.
func NewSpanID() pcommon.SpanID {
	var id [8]byte
	a := rand.Uint64() | 1
	for i := range 8 {
		id[i] = byte(a >> (8 * i))
	}
	return id
}
