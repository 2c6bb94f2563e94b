package record

import "fmt"

// SpanContextSize is the size of a SpanContext record.
const SpanContextSize = 48

// SpanContextSource says where a thread's span context came from.
type SpanContextSource uint8

// Span context sources.
const (
	// SpanContextNone: the thread has no span context (cleared); its
	// launches start their own traces. Trace and span ids are zero.
	SpanContextNone SpanContextSource = 0
	// SpanContextThread: the application handed it over on this thread
	// (gpuprobe_set_span_context).
	SpanContextThread SpanContextSource = 1
	// SpanContextEnv: the process's TRACEPARENT, for a thread that set
	// none of its own.
	SpanContextEnv SpanContextSource = 2
)

// String names the source as the span attribute says it.
func (s SpanContextSource) String() string {
	switch s {
	case SpanContextNone:
		return "none"
	case SpanContextThread:
		return "thread"
	case SpanContextEnv:
		return "env"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// TraceFlagSampled is the W3C trace-flags bit of a sampled parent.
const TraceFlagSampled = 1

// SpanContext is the application span under which a thread's following
// launches, copies and syncs run (type 14, 48 bytes). The shim writes it
// into the launch ring, on that thread, just before the first launch,
// memcpy or sync record after the thread's context changed (and before a
// thread's first such record of a session once the process uses contexts
// at all), so it precedes in the ring every record it applies to. It
// holds until the thread's next SpanContext record:
//
//	offset  0  prefix {u16 type = 14, u16 version = 1, u32 size = 48}
//	offset  8  u32 pid          process id (tgid)
//	offset 12  u32 tid          the thread it applies to
//	offset 16  16 bytes trace_id  W3C trace id; all zero with source none
//	offset 32  8 bytes  span_id   W3C parent span id; all zero with source none
//	offset 40  u8  flags        W3C trace flags (bit 0: sampled)
//	offset 41  u8  source       SpanContextSource
//	offset 42  u16 reserved     zero
//	offset 44  u32 reserved     zero
type SpanContext struct {
	PID     uint32
	TID     uint32
	TraceID [16]byte
	SpanID  [8]byte
	Flags   uint8
	Source  SpanContextSource
}

// Decode fills s from the record in b.
func (s *SpanContext) Decode(b []byte) error {
	if err := check(b, TypeSpanContext, SpanContextSize); err != nil {
		return err
	}
	*s = SpanContext{PID: le32(b, 8), TID: le32(b, 12), Flags: b[40], Source: SpanContextSource(b[41])}
	copy(s.TraceID[:], b[16:32])
	copy(s.SpanID[:], b[32:40])
	if s.Source > SpanContextEnv {
		return &DecodeError{Type: TypeSpanContext, Field: "source", Offset: 41, Reason: fmt.Sprintf("unknown source %d", s.Source)}
	}
	if le16(b, 42) != 0 || le32(b, 44) != 0 {
		return &DecodeError{Type: TypeSpanContext, Field: "reserved", Offset: 42, Reason: "must be zero"}
	}
	none := s.Source == SpanContextNone
	if zero := s.TraceID == [16]byte{}; zero != none {
		return &DecodeError{Type: TypeSpanContext, Field: "trace_id", Offset: 16, Reason: zeroReason(none, s.Source)}
	}
	if zero := s.SpanID == [8]byte{}; zero != none {
		return &DecodeError{Type: TypeSpanContext, Field: "span_id", Offset: 32, Reason: zeroReason(none, s.Source)}
	}
	return nil
}

// zeroReason says why an id is wrong for its source.
func zeroReason(none bool, src SpanContextSource) string {
	if none {
		return "must be zero with source none"
	}
	return fmt.Sprintf("must be nonzero with source %s", src)
}

// Append appends the encoded record to b.
func (s *SpanContext) Append(b []byte) []byte {
	b, r := grow(b, SpanContextSize)
	putPrefix(r, TypeSpanContext, SpanContextSize)
	put32(r, 8, s.PID)
	put32(r, 12, s.TID)
	copy(r[16:32], s.TraceID[:])
	copy(r[32:40], s.SpanID[:])
	r[40] = s.Flags
	r[41] = uint8(s.Source)
	return b
}
