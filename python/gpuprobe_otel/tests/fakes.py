"""Stand-ins for the OpenTelemetry SDK's spans (the SDK need not be
installed to test the processor: it only reads get_span_context())."""


class SpanContext:
    """The fields of opentelemetry.trace.SpanContext the processor reads."""

    def __init__(self, trace_id, span_id, trace_flags=1):
        self.trace_id, self.span_id, self.trace_flags = trace_id, span_id, trace_flags

    @property
    def is_valid(self):
        return self.trace_id != 0 and self.span_id != 0


class Span:
    """A span with a fixed context."""

    def __init__(self, trace_id, span_id, trace_flags=1):
        self._sc = SpanContext(trace_id, span_id, trace_flags)

    def get_span_context(self):
        return self._sc
