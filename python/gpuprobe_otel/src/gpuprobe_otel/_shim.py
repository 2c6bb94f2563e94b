"""The span-context API of libgpuprobe.so, through ctypes.

The shim is in the process only when the application runs under
``gpuprobe run`` (or with LD_PRELOAD): its symbols are then in the global
scope, where ``ctypes.CDLL(None)`` finds them. Without it every call here
is a no-op.
"""

import ctypes
import threading

# W3C trace-flags bit: the span was sampled.
TRACE_FLAG_SAMPLED = 1

_lock = threading.Lock()
_looked = False
_set = None
_clear = None


def _load():
    """Binds the shim's functions once; leaves them None without the shim."""
    global _looked, _set, _clear
    with _lock:
        if _looked:
            return
        try:
            lib = ctypes.CDLL(None)
            set_fn = lib.gpuprobe_set_span_context
            clear_fn = lib.gpuprobe_clear_span_context
        except (OSError, AttributeError):
            set_fn = clear_fn = None
        if set_fn is not None:
            set_fn.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint8)
            set_fn.restype = ctypes.c_int
            clear_fn.argtypes = ()
            clear_fn.restype = None
        _set, _clear = set_fn, clear_fn
        _looked = True


def raw_functions():
    """The shim's two functions as ctypes binds them, (set, clear), or
    (None, None) without the shim: set takes 16 and 8 bytes and an int,
    unchecked, for callers that built them (the span processor)."""
    _load()
    return _set, _clear


def shim_loaded():
    """Whether libgpuprobe.so is in the process (its API is callable)."""
    _load()
    return _set is not None


def set_span_context(trace_id, span_id, flags=TRACE_FLAG_SAMPLED):
    """Makes the calling thread's following launches children of a span.

    trace_id and span_id are the span's ids, as the integers an
    OpenTelemetry SpanContext holds or as 16 and 8 big-endian bytes; flags
    are its W3C trace flags. Returns True when the shim took the context,
    False without the shim or for an invalid (all-zero) id.
    """
    _load()
    if _set is None:
        return False
    if isinstance(trace_id, int):
        trace_id = trace_id.to_bytes(16, "big")
    if isinstance(span_id, int):
        span_id = span_id.to_bytes(8, "big")
    if len(trace_id) != 16 or len(span_id) != 8:
        raise ValueError("trace_id must be 16 bytes and span_id 8")
    return _set(bytes(trace_id), bytes(span_id), int(flags) & 0xFF) == 0


def clear_span_context():
    """Drops the calling thread's span context (TRACEPARENT's applies, if set)."""
    _load()
    if _clear is not None:
        _clear()
