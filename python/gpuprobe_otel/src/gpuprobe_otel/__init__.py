"""Kernels inside the application's traces: hand OpenTelemetry spans to
gpuprobe's shim (libgpuprobe.so), so that the CUDA launches made under a
span become its children in the same trace.

    from opentelemetry import trace
    import gpuprobe_otel

    gpuprobe_otel.install(trace.get_tracer_provider())

Without the shim in the process (not run under ``gpuprobe run``) it does
nothing.
"""

from ._shim import TRACE_FLAG_SAMPLED, clear_span_context, set_span_context, shim_loaded
from .processor import GpuprobeSpanProcessor

__all__ = [
    "GpuprobeSpanProcessor",
    "TRACE_FLAG_SAMPLED",
    "clear_span_context",
    "install",
    "set_span_context",
    "shim_loaded",
]

__version__ = "0.1.0"


def install(provider):
    """Adds a GpuprobeSpanProcessor to an SDK TracerProvider and returns it
    (installed even without the shim, where it does nothing)."""
    p = GpuprobeSpanProcessor()
    provider.add_span_processor(p)
    return p
