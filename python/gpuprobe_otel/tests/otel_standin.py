"""A STAND-IN for the part of the opentelemetry-python SDK that
scripts/gpu/inference_server.py uses, for machines where the real
packages (opentelemetry-api, -sdk, -exporter-otlp-proto-http) cannot be
installed. It is test code, not part of gpuprobe_otel: the server imports
the real SDK when it is there and this module only otherwise.

What it reproduces, as the SDK (1.x) does it:

* ``TracerProvider(resource=None)``: ``add_span_processor`` (processors
  called in the order they were added, synchronously, on the thread that
  starts or ends the span), ``get_tracer``, ``force_flush``,
  ``shutdown`` (also at interpreter exit); the resource's
  ``service.name`` from ``OTEL_SERVICE_NAME``.
* ``Tracer.start_span`` and ``Tracer.start_as_current_span``: the parent
  is the current span of the calling context (``contextvars``); every span
  is sampled (the SDK's default ParentBased(ALWAYS_ON)); ``Span.start``
  calls ``on_start(span, parent_context=...)`` before the span becomes
  current; leaving ``start_as_current_span`` detaches the span from the
  context first, then ``Span.end`` sets the end time and calls
  ``on_end`` with a read-only copy (the SDK's ReadableSpan). An exception
  leaving the block is recorded and sets status ERROR.
* ``SpanContext`` with integer ``trace_id``, ``span_id``, ``trace_flags``
  and ``is_valid``; ``trace.get_current_span()``, ``format_trace_id``,
  ``format_span_id``, ``SpanKind``, ``StatusCode``.
* ``BatchSpanProcessor(exporter)``: queues ended sampled spans, exports
  them from a worker thread every ``OTEL_BSP_SCHEDULE_DELAY`` ms (5000)
  or when ``max_export_batch_size`` (512) are queued, and on
  ``force_flush`` and ``shutdown``.
* ``OTLPSpanExporter(endpoint=None)``: POSTs OTLP/HTTP to ``endpoint``
  (default ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, else
  ``http://localhost:4318/v1/traces``); in JSON where the real one sends
  protobuf (an OTLP receiver takes both).

Left out: samplers other than always-on, links, events other than the
exception, span limits, propagators, metrics and logs.
"""

import atexit
import contextlib
import contextvars
import enum
import json
import os
import random
import threading
import time
import urllib.request

_current = contextvars.ContextVar("otel_standin_current_span", default=None)


class SpanKind(enum.Enum):
    """opentelemetry.trace.SpanKind, with OTLP's numbers."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.Enum):
    """opentelemetry.trace.StatusCode, with OTLP's numbers."""

    UNSET = 0
    OK = 1
    ERROR = 2


class SpanContext:
    """opentelemetry.trace.SpanContext: the ids as integers."""

    def __init__(self, trace_id, span_id, is_remote=False, trace_flags=1):
        self.trace_id, self.span_id = trace_id, span_id
        self.is_remote, self.trace_flags = is_remote, trace_flags

    @property
    def is_valid(self):
        return self.trace_id != 0 and self.span_id != 0


INVALID_SPAN_CONTEXT = SpanContext(0, 0, False, 0)


def format_trace_id(trace_id):
    """The trace id as 32 lower-case hex digits."""
    return "%032x" % trace_id


def format_span_id(span_id):
    """The span id as 16 lower-case hex digits."""
    return "%016x" % span_id


class _NonRecordingSpan:
    """What get_current_span returns outside any span."""

    def get_span_context(self):
        return INVALID_SPAN_CONTEXT

    def is_recording(self):
        return False


class ReadableSpan:
    """The read-only copy of an ended span that on_end and exporters get."""

    def __init__(self, span):
        self.name, self.kind, self.resource = span.name, span.kind, span.resource
        self.parent, self._context = span.parent, span._context
        self.start_time, self.end_time = span.start_time, span.end_time
        self.attributes = dict(span.attributes)
        self.status, self.status_description = span.status, span.status_description
        self.events = list(span.events)
        self.instrumentation_scope = span.scope

    @property
    def context(self):
        return self._context

    def get_span_context(self):
        return self._context


class Span:
    """An SDK span: started by its tracer, ended once."""

    def __init__(self, name, context, parent, kind, attributes, resource, scope, processor):
        self.name, self._context, self.parent, self.kind = name, context, parent, kind
        self.attributes = dict(attributes or {})
        self.resource, self.scope, self._processor = resource, scope, processor
        self.start_time = self.end_time = None
        self.status, self.status_description = StatusCode.UNSET, None
        self.events = []
        self._lock = threading.Lock()

    def get_span_context(self):
        return self._context

    def is_recording(self):
        return self.end_time is None

    def set_attribute(self, key, value):
        if self.is_recording():
            self.attributes[key] = value

    def set_status(self, code, description=None):
        if self.is_recording() and self.status is not StatusCode.OK and code is not StatusCode.UNSET:
            self.status, self.status_description = code, description

    def record_exception(self, exc):
        self.events.append((time.time_ns(), "exception", {
            "exception.type": type(exc).__name__, "exception.message": str(exc)}))

    def start(self, start_time=None, parent_context=None):
        with self._lock:
            if self.start_time is not None:
                return
            self.start_time = start_time if start_time is not None else time.time_ns()
        self._processor.on_start(self, parent_context=parent_context)

    def end(self, end_time=None):
        with self._lock:
            if self.start_time is None or self.end_time is not None:
                return
            self.end_time = end_time if end_time is not None else time.time_ns()
        self._processor.on_end(ReadableSpan(self))


class _Processors:
    """The SDK's SynchronousMultiSpanProcessor: each hook in turn, in the
    order the processors were added."""

    def __init__(self):
        self._ps = ()
        self._lock = threading.Lock()

    def add(self, p):
        with self._lock:
            self._ps = self._ps + (p,)

    def on_start(self, span, parent_context=None):
        for p in self._ps:
            p.on_start(span, parent_context=parent_context)

    def on_end(self, span):
        for p in self._ps:
            p.on_end(span)

    def force_flush(self, timeout_millis=30000):
        return all(p.force_flush(timeout_millis) for p in self._ps)

    def shutdown(self):
        for p in self._ps:
            p.shutdown()


class Tracer:
    """A tracer of one instrumentation scope."""

    def __init__(self, provider, scope):
        self._provider, self._scope = provider, scope

    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None, start_time=None):
        parent = context if context is not None else _current.get()
        psc = parent.get_span_context() if parent is not None else INVALID_SPAN_CONTEXT
        trace_id = psc.trace_id if psc.is_valid else random.getrandbits(128)
        sc = SpanContext(trace_id, random.getrandbits(64), False, 1)
        s = Span(name, sc, psc if psc.is_valid else None, kind, attributes, self._provider.resource,
                 self._scope, self._provider._processors)
        s.start(start_time, parent_context=parent)
        return s

    @contextlib.contextmanager
    def start_as_current_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                              end_on_exit=True):
        span = self.start_span(name, context, kind, attributes)
        try:
            token = _current.set(span)
            try:
                yield span
            finally:
                _current.reset(token)
        except BaseException as e:
            if span.is_recording():
                span.record_exception(e)
                span.set_status(StatusCode.ERROR, "%s: %s" % (type(e).__name__, e))
            raise
        finally:
            if end_on_exit:
                span.end()


class TracerProvider:
    """The SDK's TracerProvider, shut down at interpreter exit."""

    def __init__(self, resource=None):
        self.resource = dict(resource or {})
        self.resource.setdefault("service.name", os.environ.get("OTEL_SERVICE_NAME") or "unknown_service")
        self.resource.setdefault("telemetry.sdk.name", "opentelemetry")
        self.resource.setdefault("telemetry.sdk.language", "python")
        self._processors = _Processors()
        self._down = False
        atexit.register(self.shutdown)

    def add_span_processor(self, processor):
        self._processors.add(processor)

    def get_tracer(self, name, version=None):
        return Tracer(self, (name, version))

    def force_flush(self, timeout_millis=30000):
        return self._processors.force_flush(timeout_millis)

    def shutdown(self):
        if not self._down:
            self._down = True
            self._processors.shutdown()


class _ProxyTracer:
    """What trace.get_tracer returns: the global provider's tracer."""

    def __init__(self, name):
        self._name = name

    def start_as_current_span(self, *a, **k):
        return _provider.get_tracer(self._name).start_as_current_span(*a, **k)

    def start_span(self, *a, **k):
        return _provider.get_tracer(self._name).start_span(*a, **k)


_provider = None


class _TraceAPI:
    """The functions of the opentelemetry.trace module the server calls."""

    SpanKind, StatusCode, SpanContext = SpanKind, StatusCode, SpanContext
    format_trace_id, format_span_id = staticmethod(format_trace_id), staticmethod(format_span_id)

    @staticmethod
    def set_tracer_provider(provider):
        global _provider
        _provider = provider

    @staticmethod
    def get_tracer_provider():
        return _provider

    @staticmethod
    def get_tracer(name, version=None):
        return _ProxyTracer(name)

    @staticmethod
    def get_current_span():
        return _current.get() or _NonRecordingSpan()


trace = _TraceAPI()


class SpanExportResult(enum.Enum):
    """opentelemetry.sdk.trace.export.SpanExportResult."""

    SUCCESS = 0
    FAILURE = 1


class BatchSpanProcessor:
    """Exports ended sampled spans in batches from a worker thread."""

    def __init__(self, exporter, max_export_batch_size=512, schedule_delay_millis=None):
        self._exporter, self._batch = exporter, max_export_batch_size
        self._delay = (schedule_delay_millis if schedule_delay_millis is not None
                       else float(os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "5000"))) / 1000.0
        self._queue, self._cond = [], threading.Condition()
        self._flushing, self._done = 0, False
        self._export_lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="OtelBatchSpanProcessor", daemon=True)
        self._worker.start()

    def on_start(self, span, parent_context=None):
        pass

    def on_end(self, span):
        if not span.get_span_context().trace_flags & 1:
            return
        with self._cond:
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._cond.notify()

    def _take(self):
        with self._cond:
            out, self._queue = self._queue, []
        return out

    def _export(self):
        with self._export_lock:
            spans = self._take()
            for i in range(0, len(spans), self._batch):
                self._exporter.export(spans[i:i + self._batch])

    def _run(self):
        while True:
            with self._cond:
                if not self._done and len(self._queue) < self._batch:
                    self._cond.wait(self._delay)
                done = self._done
            self._export()
            if done:
                return

    def force_flush(self, timeout_millis=30000):
        self._export()
        return True

    def shutdown(self):
        with self._cond:
            self._done = True
            self._cond.notify()
        self._worker.join()
        self._export()
        self._exporter.shutdown()


def _any_value(v):
    """An attribute value as OTLP/JSON's AnyValue."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(d):
    return [{"key": k, "value": _any_value(v)} for k, v in d.items()]


class OTLPSpanExporter:
    """Sends spans to an OTLP/HTTP endpoint (JSON encoding)."""

    def __init__(self, endpoint=None, timeout=10):
        if endpoint is None:
            endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if endpoint is None:
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
            endpoint = base.rstrip("/") + "/v1/traces"
        self.endpoint, self._timeout = endpoint, timeout

    @staticmethod
    def _span(s):
        sc = s.get_span_context()
        out = {
            "traceId": format_trace_id(sc.trace_id), "spanId": format_span_id(sc.span_id),
            "name": s.name, "kind": s.kind.value, "flags": sc.trace_flags | 0x100,
            "startTimeUnixNano": str(s.start_time), "endTimeUnixNano": str(s.end_time),
            "attributes": _attrs(s.attributes),
            "status": {"code": s.status.value, "message": s.status_description or ""},
        }
        if s.parent is not None:
            out["parentSpanId"] = format_span_id(s.parent.span_id)
        if s.events:
            out["events"] = [{"timeUnixNano": str(t), "name": n, "attributes": _attrs(a)} for t, n, a in s.events]
        return out

    def body(self, spans):
        """The ExportTraceServiceRequest of spans, as OTLP/JSON."""
        by = {}
        for s in spans:
            by.setdefault((tuple(sorted(s.resource.items())), s.instrumentation_scope), []).append(s)
        rss = {}
        for (res, scope), ss in by.items():
            rs = rss.setdefault(res, {"resource": {"attributes": _attrs(dict(res))}, "scopeSpans": []})
            sc = {"name": scope[0]}
            if scope[1]:
                sc["version"] = scope[1]
            rs["scopeSpans"].append({"scope": sc, "spans": [self._span(s) for s in ss]})
        return {"resourceSpans": list(rss.values())}

    def export(self, spans):
        if not spans:
            return SpanExportResult.SUCCESS
        req = urllib.request.Request(self.endpoint, data=json.dumps(self.body(spans)).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as r:
                r.read()
            return SpanExportResult.SUCCESS
        except OSError:
            return SpanExportResult.FAILURE

    def shutdown(self):
        pass
