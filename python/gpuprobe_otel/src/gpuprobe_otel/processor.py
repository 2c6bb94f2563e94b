"""An OpenTelemetry SDK span processor that hands spans to the shim.

Each span is handed to libgpuprobe.so on the thread that starts it, and
the span below it on that thread is handed back when it ends, so the CUDA
launches a thread makes inside a span become that span's children in the
same trace. Spans the SDK's sampler dropped never reach a processor: the
launches under them join the nearest recorded span of their thread, or
keep traces of their own.
"""

import threading

from . import _shim

try:  # the SDK's base class when it is installed; the hooks are the same
    from opentelemetry.sdk.trace import SpanProcessor as _Base
except ImportError:  # pragma: no cover - exercised without the SDK
    _Base = object

# A thread's open spans beyond this depth push the oldest out: a span that
# is never ended cannot grow the stack without bound.
MAX_DEPTH = 256


class _Open:
    """One open span of a thread: its ids as the shim wants them."""

    __slots__ = ("key", "trace", "span", "flags", "stack")

    def __init__(self, key, trace, span, flags, stack):
        self.key, self.trace, self.span, self.flags, self.stack = key, trace, span, flags, stack


class GpuprobeSpanProcessor(_Base):
    """Sets the shim's span context of a thread to its innermost open span.

    on_start pushes the span on its thread's stack and hands it to the
    shim; on_end takes it off and hands the shim the span now on top (or
    clears the context when none is left). A span ended on another thread
    than it started on is taken off its starting thread's stack; that
    thread's context is corrected at its next span start or end, since the
    shim's context is per thread. With no shim in the process every hook
    returns at once.
    """

    def __init__(self, shim=_shim):
        self._on = shim.shim_loaded()
        if shim is _shim:
            # The ctypes functions themselves: the ids are built here.
            self._set, self._clear = _shim.raw_functions()
        else:
            self._set, self._clear = shim.set_span_context, shim.clear_span_context
        self._local = threading.local()
        self._open = {}  # (trace id, span id) → _Open, of every thread
        self._lock = threading.Lock()

    @property
    def enabled(self):
        """Whether the shim is loaded (else the processor does nothing)."""
        return self._on

    def _stack(self):
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def on_start(self, span, parent_context=None):
        """Hands span to the shim as the calling thread's context."""
        if not self._on:
            return
        sc = span.get_span_context()
        if sc is None or not sc.is_valid:
            return
        st = self._stack()
        o = _Open((sc.trace_id, sc.span_id), sc.trace_id.to_bytes(16, "big"),
                  sc.span_id.to_bytes(8, "big"), int(sc.trace_flags) & 0xFF, st)
        with self._lock:
            if len(st) >= MAX_DEPTH:
                self._open.pop(st.pop(0).key, None)
            st.append(o)
            self._open[o.key] = o
        self._set(o.trace, o.span, o.flags)

    def on_end(self, span):
        """Takes span off its thread's stack; the calling thread's context
        becomes its innermost open span, or none."""
        if not self._on:
            return
        sc = span.get_span_context()
        if sc is None:
            return
        with self._lock:
            o = self._open.pop((sc.trace_id, sc.span_id), None)
            if o is not None:
                try:
                    o.stack.remove(o)
                except ValueError:
                    pass
            st = self._stack()
            top = st[-1] if st else None
        if top is not None:
            self._set(top.trace, top.span, top.flags)
        else:
            self._clear()

    def shutdown(self):
        """Nothing to release: the shim's contexts live in its threads."""

    def force_flush(self, timeout_millis=30000):
        """Nothing is buffered here."""
        return True
