/* gpuprobe_shim.h: what an application may call in libgpuprobe.so, the
 * shim that `gpuprobe run` (or LD_PRELOAD) loads into it.
 *
 * Span context: the launches, copies and syncs a thread makes after
 * gpuprobe_set_span_context become children of that span (same trace id,
 * parent span id = span_id) in the collector's traces, until the thread
 * sets another or calls gpuprobe_clear_span_context. A thread that never
 * set one uses the process's TRACEPARENT (W3C traceparent, read when the
 * shim starts its session), else its launches start traces of their own.
 *
 * Cost: a set or a clear is a copy into the calling thread's own storage
 * (no lock, allocation or system call); the shim writes one 48-byte
 * record only at the first launch, copy or sync after a change.
 *
 * The shim may not be loaded: call these through weak references
 * (define GPUPROBE_SHIM_WEAK before including this header, then test the
 * function's address) or dlsym(RTLD_DEFAULT, "gpuprobe_set_span_context").
 */
#ifndef GPUPROBE_SHIM_H
#define GPUPROBE_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef GPUPROBE_SHIM_WEAK
#define GPUPROBE_SHIM_API __attribute__((weak))
#else
#define GPUPROBE_SHIM_API
#endif

/* W3C trace-flags bit: the application's sampler kept the span. */
#define GPUPROBE_TRACE_FLAG_SAMPLED 1u

/* gpuprobe_set_span_context makes the calling thread's following launches
 * children of span span_id of trace trace_id (W3C ids, big-endian bytes
 * as in traceparent); flags are the span's W3C trace flags. It returns 0,
 * or -1 (and changes nothing) when either id is all zero (invalid in
 * W3C) or a pointer is NULL. */
GPUPROBE_SHIM_API int gpuprobe_set_span_context(const uint8_t trace_id[16], const uint8_t span_id[8],
						uint8_t flags);

/* gpuprobe_clear_span_context drops the calling thread's span context: its
 * launches fall back to TRACEPARENT, if set, else to traces of their own. */
GPUPROBE_SHIM_API void gpuprobe_clear_span_context(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUPROBE_SHIM_H */
