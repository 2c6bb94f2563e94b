/* gpuprobe_record.h: the records that producers (the libgpuprobe shim, PTX
 * probes, load generators) write into gpuprobe's shared-memory rings.
 *
 * This header mirrors package github.com/gpuprobe/gpuprobe/record field by
 * field; record/record_c_test.go compiles it and checks every offset and
 * every encoded byte against the Go decoder.
 *
 * All fields are little-endian. Every record starts with gp_rec_prefix and
 * its size is a multiple of 8. Host timestamps (*_ns) are CLOCK_MONOTONIC
 * unless named realtime; device timestamps are %globaltimer.
 */
#ifndef GPUPROBE_RECORD_H
#define GPUPROBE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define GP_REC_VERSION 1

enum gp_rec_type {
	GP_REC_LAUNCH = 1,
	GP_REC_KERNEL_NAME = 2,
	GP_REC_WARP = 3,
	GP_REC_COMPLETION = 4,
	GP_REC_MEMCPY = 5,
	GP_REC_SYNC = 6,
	GP_REC_CALIBRATION = 7,
	GP_REC_THREAD_COUNT = 8,
	GP_REC_DEVICE = 9,
	GP_REC_HOST_CALL = 10, /* written by the collector's host uprobes, not the shim */
	GP_REC_EXEC = 11,      /* written by the GPU (kernel_phases), or the shim (SASS route) */
	GP_REC_WINDOW = 12,
	GP_REC_WINDOW_STATE = 13,
	GP_REC_SPAN_CONTEXT = 14,
	GP_REC_STACK = 15,
	GP_REC_PATCH = 16,
	GP_REC_COUNTER_SAMPLE = 17, /* written by the per-node PM sampler, not the shim */
	GP_REC_COUNTER_SET = 18,    /* the sampler's metric names and GPU, before its samples */
};

/* Common 8-byte prefix. */
struct gp_rec_prefix {
	uint16_t type;    /* enum gp_rec_type */
	uint16_t version; /* GP_REC_VERSION */
	uint32_t size;    /* whole record, prefix included, multiple of 8 */
};

/* Launch API (gp_rec_launch.api, low 16 bits). */
enum gp_launch_api {
	GP_API_LAUNCH_KERNEL = 0,
	GP_API_LAUNCH_KERNEL_EX = 1,
	GP_API_LAUNCH_COOPERATIVE_KERNEL = 2,
	GP_API_GRAPH_LAUNCH = 3,
};

/* Launch flags (gp_rec_launch.api, high 16 bits). UNPROBED: the launch
 * runs no device probe (its kernel is not patched, or it was given launch
 * id 0): no device record of it will come. */
#define GP_LAUNCH_F_UNPROBED (1u << 16)
/* NO_WINDOW: no window record (type 12) of this launch will come: device
 * windows are off, paused by their rate cap, or the driver gave the launch
 * no correlation id. */
#define GP_LAUNCH_F_NO_WINDOW (1u << 17)
/* SASS: the launch runs the SASS route's patch functions (shim/src/sass.c):
 * one Exec record (type 11) of it will come, from the shim. */
#define GP_LAUNCH_F_SASS (1u << 18)
/* PRESWAP: the launch ran before its kernel's patched image was ready
 * (compiled off the application's threads: shim/src/patch_async.c): it
 * ran the original kernel, with UNPROBED; windows only. */
#define GP_LAUNCH_F_PRESWAP (1u << 19)
/* COOPERATIVE, CLUSTER: a cuLaunchKernelEx launch with the cooperative
 * attribute, or with a thread-block cluster dimension (the launch kinds a
 * window or its lack is counted by, besides the entry point). */
#define GP_LAUNCH_F_COOPERATIVE (1u << 20)
#define GP_LAUNCH_F_CLUSTER (1u << 21)

/* Type 1, 96 bytes: one kernel launch, written when the launch call returns. */
struct gp_rec_launch {
	struct gp_rec_prefix h;
	uint64_t launch_id;  /* unique per process and device context */
	uint32_t pid;        /* tgid */
	uint32_t tid;        /* caller thread */
	uint64_t enqueue_ns; /* launch call began */
	uint64_t return_ns;  /* launch call returned */
	uint64_t stream;     /* CUstream, 0 = legacy default */
	uint64_t function;   /* CUfunction */
	uint32_t device;     /* device ordinal */
	uint32_t shared_mem; /* dynamic shared memory bytes */
	uint32_t grid[3];    /* x, y, z; each >= 1 */
	uint32_t block[3];   /* x, y, z; each >= 1 */
	uint32_t result;     /* CUresult of the call */
	uint32_t api;        /* enum gp_launch_api | GP_LAUNCH_F_* */
};

#define GP_KERNEL_NAME_MAX 4096
#define GP_KERNEL_NAME_TRUNCATED 1

/* Type 2, 32 + name_len rounded up to 8: function handle -> mangled name,
 * written once per handle before its first launch.
 *
 * Long names: C++ kernel names often exceed a launch-ring slot (128 bytes
 * by default leave 112 bytes of payload, an 80-byte name). Every client is
 * also handed a names ring (agent role GP_ROLE_NAME_RING, region name
 * "names") whose slots hold the largest record (GP_NAME_RING_SLOT bytes,
 * slot header included): write kernel_name records there. The collector
 * reads the names ring before the launch ring on every poll, so a name
 * published before its launch is always seen first. A producer without a
 * names ring cuts the name at a UTF-8 boundary to fit its slot and sets
 * GP_KERNEL_NAME_TRUNCATED; the collector marks such names with a trailing
 * "..." (U+2026) and counts them, so nothing is lost silently. */
#define GP_ROLE_NAME_RING 4
#define GP_NAME_RING_SLOT (16 + 32 + GP_KERNEL_NAME_MAX)
struct gp_rec_kernel_name {
	struct gp_rec_prefix h;
	uint64_t function; /* CUfunction */
	uint64_t module;   /* CUmodule or CUlibrary */
	uint32_t pid;
	uint16_t name_len; /* 1..GP_KERNEL_NAME_MAX */
	uint16_t flags;    /* GP_KERNEL_NAME_TRUNCATED */
	char name[];       /* name_len bytes, no NUL, zero padded to size */
};

/* Type 3, 64 bytes: one warp of a launch, written by the warp's leader lane
 * in the kernel_phases exit probe. start_ns <= min_exit_ns <= end_ns. */
struct gp_rec_warp {
	struct gp_rec_prefix h;
	uint64_t launch_id;
	uint32_t block[3];    /* %ctaid */
	uint32_t warp;        /* linear tid / 32 inside the block */
	uint32_t sm_id;       /* %smid */
	uint32_t active_mask; /* lanes that reached exit, nonzero */
	uint64_t start_ns;    /* %globaltimer, earliest lane entry */
	uint64_t end_ns;      /* %globaltimer, latest lane exit */
	uint64_t min_exit_ns; /* %globaltimer, earliest lane exit */
};

enum gp_completion_how {
	GP_SEEN_BY_STREAM_SYNC = 0,
	GP_SEEN_BY_EVENT_QUERY = 1,
	GP_SEEN_BY_CTX_SYNC = 2,
	GP_SEEN_BY_HOST_CALLBACK = 3,
};

/* Type 4, 32 bytes: the host saw the launch complete. */
struct gp_rec_completion {
	struct gp_rec_prefix h;
	uint64_t launch_id;
	uint64_t complete_ns;
	uint32_t device;
	uint32_t how; /* enum gp_completion_how */
};

enum gp_memcpy_kind {
	GP_MEMCPY_UNKNOWN = 0,
	GP_MEMCPY_HTOD = 1,
	GP_MEMCPY_DTOH = 2,
	GP_MEMCPY_DTOD = 3,
	GP_MEMCPY_HTOH = 4,
	GP_MEMCPY_PEER = 5,
};
#define GP_MEMCPY_ASYNC 1

/* Type 5, 56 bytes: one memory copy call. */
struct gp_rec_memcpy {
	struct gp_rec_prefix h;
	uint64_t bytes;
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t stream;
	uint32_t pid;
	uint32_t tid;
	uint32_t device;
	uint16_t kind;  /* enum gp_memcpy_kind */
	uint16_t flags; /* GP_MEMCPY_ASYNC */
};

enum gp_sync_kind {
	GP_SYNC_CONTEXT = 1,
	GP_SYNC_STREAM = 2,
	GP_SYNC_EVENT = 3,
	GP_SYNC_STREAM_WAIT_EVENT = 4,
};

/* Type 6, 48 bytes: one synchronisation call. */
struct gp_rec_sync {
	struct gp_rec_prefix h;
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t stream; /* CUstream or CUevent, 0 for context syncs */
	uint32_t pid;
	uint32_t tid;
	uint32_t device;
	uint16_t kind;     /* enum gp_sync_kind */
	uint16_t reserved; /* zero */
};

/* Type 7, 40 bytes: host clocks and %globaltimer read together. */
struct gp_rec_calibration {
	struct gp_rec_prefix h;
	uint64_t mono_ns;        /* CLOCK_MONOTONIC, midpoint of the read */
	uint64_t realtime_ns;    /* CLOCK_REALTIME at the same moment */
	uint64_t gpu_ns;         /* %globaltimer */
	uint32_t device;
	uint32_t uncertainty_ns; /* half the host interval around the GPU read */
};

#define GP_THREAD_COUNT_MAX 65536

/* Type 8, 24 + 8*count: execution counts of consecutive threads. */
struct gp_rec_thread_count {
	struct gp_rec_prefix h;
	uint64_t launch_id;
	uint32_t first_thread; /* linear global index of counts[0] */
	uint32_t count;        /* 1..GP_THREAD_COUNT_MAX */
	uint64_t counts[];
};

/* Type 9, 104 bytes: a device the application uses. */
struct gp_rec_device {
	struct gp_rec_prefix h;
	uint32_t device;
	uint32_t pid;
	uint8_t uuid[16];     /* cuDeviceGetUuid */
	uint32_t sm_count;
	uint32_t compute_cap; /* major*10 + minor */
	char name[64];        /* NUL padded */
};

/* Window flags (gp_rec_window.flags). GRAPH: the kernel ran as a node of a
 * graph launch (launch_id is the graph launch's first node record; match
 * by name_hash among that launch's nodes). NO_LAUNCH: the shim found no
 * launch of this correlation id (launch_id is 0). DEVICE_LAUNCHED: a
 * kernel launched by another kernel (CUPTI's CDP kernel record);
 * launch_id, when known, is the host launch it descends from, never its
 * own. UNTIMED: the driver gave the kernel no timestamps (start_ns and
 * end_ns are 0): its launch has no window, for that reason. GRAPH_EXEC:
 * the window of a whole graph launch (CUPTI's graph trace, the shim's
 * GPUPROBE_GRAPH_WINDOWS=graph), with GRAPH: launch_id is its first node
 * record, name_hash 0; its nodes have no window of their own. */
#define GP_WINDOW_F_GRAPH 1u
#define GP_WINDOW_F_NO_LAUNCH 2u
#define GP_WINDOW_F_DEVICE_LAUNCHED 4u
#define GP_WINDOW_F_UNTIMED 8u
#define GP_WINDOW_F_GRAPH_EXEC 16u

/* Type 12, 48 bytes: one kernel's exact device window as the driver timed
 * it (CUPTI activity, any kernel: SASS or PTX, patched or not), written by
 * the shim's activity thread some time after the kernel ran.
 * start_ns <= end_ns (both 0 with UNTIMED), CLOCK_MONOTONIC (the shim
 * hands CUPTI its clock). */
struct gp_rec_window {
	struct gp_rec_prefix h;
	uint64_t launch_id;   /* the Launch it belongs to; 0 with NO_LAUNCH */
	uint64_t start_ns;    /* the kernel began executing */
	uint64_t end_ns;      /* the kernel finished */
	uint32_t device;      /* device ordinal */
	uint32_t name_hash;   /* FNV-1a 32 of the mangled kernel name */
	uint32_t correlation; /* the driver's correlation id of the launch */
	uint32_t flags;       /* GP_WINDOW_F_* */
};

/* Type 11, 48 bytes: one launch's device window measured by its own
 * probes: earliest warp start and latest warp exit, %globaltimer of the
 * device (kernel_phases writes it from the GPU; the SASS route's patch
 * functions aggregate it on the GPU and the shim copies it here).
 * start_ns <= end_ns, blocks >= 1. */
struct gp_rec_exec {
	struct gp_rec_prefix h;
	uint64_t launch_id; /* the Launch it belongs to */
	uint64_t start_ns;  /* first warp entered */
	uint64_t end_ns;    /* last warp exited */
	uint64_t blocks;    /* blocks of the grid */
	uint64_t threads;   /* threads that reached the exit probe */
};

/* Window states (gp_rec_window_state.state). */
enum gp_window_state {
	GP_WINDOWS_ON = 1,          /* device windows are being recorded */
	GP_WINDOWS_UNAVAILABLE = 2, /* no usable CUPTI: reason says why */
	GP_WINDOWS_STEPPED_ASIDE = 3, /* the application's profiler has CUPTI */
	GP_WINDOWS_OFF = 4,         /* turned off (configuration, exit) */
};

/* Why (gp_rec_window_state.reason). */
enum gp_window_reason {
	GP_WINDOWS_R_NONE = 0,
	GP_WINDOWS_R_NO_LIBRARY = 1,   /* libcupti could not be loaded */
	GP_WINDOWS_R_API_ERROR = 2,    /* a CUPTI call failed (detail: its CUptiResult) */
	GP_WINDOWS_R_PROFILER = 3,     /* the application called CUPTI itself */
	GP_WINDOWS_R_INJECTION = 4,    /* a profiler injected itself (CUDA_INJECTION64_PATH) */
	GP_WINDOWS_R_CONFIG = 5,       /* the collector's configuration turned them off */
	GP_WINDOWS_R_RATE = 6,         /* the process launches more than the windows' budget allows */
	GP_WINDOWS_R_SASS = 7,         /* the process opted in to the SASS route: the Sanitizer API holds CUPTI's subscriber */
};

/* Type 13, 32 bytes: device windows turned on or off, and what was lost:
 * written by the shim at each change and at each activity buffer. */
struct gp_rec_window_state {
	struct gp_rec_prefix h;
	uint64_t time_ns;  /* CLOCK_MONOTONIC of the change */
	uint32_t state;    /* enum gp_window_state */
	uint32_t reason;   /* enum gp_window_reason */
	uint32_t detail;   /* e.g. the CUptiResult of a failed call */
	uint32_t dropped;  /* windows lost since the last state record (CUPTI's dropped count + full ring) */
};

/* Where a thread's span context came from (gp_rec_span_context.source). */
enum gp_span_context_source {
	GP_SPANCTX_NONE = 0,   /* cleared: the thread's launches start their own traces; ids zero */
	GP_SPANCTX_THREAD = 1, /* gpuprobe_set_span_context on this thread */
	GP_SPANCTX_ENV = 2,    /* the process's TRACEPARENT (the thread set none of its own) */
};
/* W3C trace-flags bit of a sampled parent (gp_rec_span_context.flags). */
#define GP_TRACE_FLAG_SAMPLED 1u

/* Type 14, 48 bytes: the application span under which the thread's
 * following launches, copies and syncs run, until its next span_context
 * record. Written by the shim into the launch ring on that thread, just
 * before the first launch, memcpy or sync record after the thread's
 * context changed (and before a thread's first such record of a session
 * once the process uses contexts), so it precedes every record it
 * applies to. trace_id and span_id are
 * W3C ids, both zero exactly when source is GP_SPANCTX_NONE. */
struct gp_rec_span_context {
	struct gp_rec_prefix h;
	uint32_t pid;
	uint32_t tid;         /* the thread it applies to */
	uint8_t trace_id[16];
	uint8_t span_id[8];   /* the parent span of the launches */
	uint8_t flags;        /* W3C trace flags: GP_TRACE_FLAG_SAMPLED */
	uint8_t source;       /* enum gp_span_context_source */
	uint16_t reserved0;   /* zero */
	uint32_t reserved1;   /* zero */
};

/* Stack flags (gp_rec_stack.flags). */
#define GP_STACK_F_LAST 1u        /* the last part of the stack */
#define GP_STACK_F_NATIVE_CUT 2u  /* the native walk stopped at its depth bound */
#define GP_STACK_F_PYTHON_CUT 4u  /* the Python walk stopped at its depth bound */
#define GP_STACK_F_PY_UNKNOWN 8u  /* a CPython of unknown or unverified layout: no Python frames */
/* The most words one stack record carries. */
#define GP_STACK_MAX_WORDS 255u

/* Type 15, 32 + 8 * (native + 2 * python) bytes: one part of the launching
 * thread's stack of a sampled launch, written by the shim into the launch
 * ring on that thread just before the launch record of launch_id. A stack
 * longer than a ring slot is cut into parts numbered from 0, the last one
 * flagged GP_STACK_F_LAST. words: native return addresses (innermost
 * first, the shim's own frames left out), then per Python frame (innermost
 * first) the code object's address and the frame's instruction pointer
 * (3.11+: the _Py_CODEUNIT address; 3.10: f_lasti). */
struct gp_rec_stack {
	struct gp_rec_prefix h;
	uint64_t launch_id;
	uint32_t pid;
	uint32_t tid;
	uint8_t part;        /* from 0 */
	uint8_t flags;       /* GP_STACK_F_* */
	uint8_t native;      /* native frames in this part */
	uint8_t python;      /* Python frames in this part */
	uint16_t py_version; /* major << 8 | minor; 0 without Python */
	uint16_t reserved;   /* zero */
	uint64_t words[];
};

enum gp_patch_outcome {
	GP_PATCH_SWAPPED = 0,   /* the patched kernels were swapped in */
	GP_PATCH_UNPATCHED = 1, /* the collector sent no patched image */
	GP_PATCH_FAILED = 2,    /* loading or binding the patched image failed */
	GP_PATCH_DROPPED = 3,   /* the application unloaded the module first */
};

enum gp_patch_cache {
	GP_PATCH_CACHE_OFF = 0,     /* no cache, or never reached */
	GP_PATCH_CACHE_HIT = 1,     /* the compiled image came from the cache: no JIT */
	GP_PATCH_CACHE_MISS = 2,    /* compiled, then stored */
	GP_PATCH_CACHE_CORRUPT = 3, /* an entry failed its check: removed, compiled again */
};

/* Type 16, 48 bytes: one module patched off the application's threads
 * (shim/src/patch_async.c), written by the patch thread when its job ends. */
struct gp_rec_patch {
	struct gp_rec_prefix h;
	uint64_t module;     /* the application's CUmodule or CUlibrary */
	uint64_t request_ns; /* asking the collector for the patched image */
	uint64_t compile_ns; /* loading it: the driver's JIT or link, or the cached image */
	uint32_t pid;
	uint32_t kernels; /* patched kernels swapped in */
	uint16_t outcome; /* enum gp_patch_outcome */
	uint16_t cache;   /* enum gp_patch_cache */
	uint32_t reserved;
};

#define GP_COUNTER_F_OVERFLOW_BEFORE 0x1 /* samples were lost before this one */
#define GP_COUNTER_MAX_VALUES 64

/* Type 17, 40 + 8 * values bytes: one sample of a GPU's performance
 * monitors (CUPTI PM sampling, counters/src), the whole device over
 * [start_ns, end_ns), one value per metric of the set named by set_hash
 * (FNV-1a 32 of the metric names joined by ","). */
struct gp_rec_counter_sample {
	struct gp_rec_prefix h;
	uint64_t start_ns; /* CLOCK_MONOTONIC */
	uint64_t end_ns;   /* CLOCK_MONOTONIC */
	uint32_t device;   /* CUDA device ordinal */
	uint32_t set_hash;
	uint16_t values; /* <= GP_COUNTER_MAX_VALUES */
	uint16_t flags;  /* GP_COUNTER_F_* */
	uint32_t reserved;
	double value[];
};

#define GP_COUNTER_MAX_NAMES_LEN 2048

/* Type 18, 48 + names_len rounded up to 8 bytes: the metrics of a
 * sampler's counter_sample records and the GPU they sample, written once
 * per session before the first sample. names are CUPTI's metric names
 * ([A-Za-z0-9_.]+) joined by ",", zero-padded; set_hash is their FNV-1a
 * 32, as in counter_sample. uuid is all zero when the driver gave none. */
struct gp_rec_counter_set {
	struct gp_rec_prefix h;
	uint64_t interval_ns;
	uint8_t uuid[16];   /* cuDeviceGetUuid_v2, else cuDeviceGetUuid */
	uint32_t device;    /* the sampler's CUDA device ordinal */
	uint32_t set_hash;
	uint16_t count;     /* names, 1..GP_COUNTER_MAX_VALUES */
	uint16_t names_len; /* bytes, 1..GP_COUNTER_MAX_NAMES_LEN */
	uint32_t reserved;
	char names[];
};

#define GP_STATIC_ASSERT(c, m) _Static_assert(c, m)
GP_STATIC_ASSERT(sizeof(struct gp_rec_prefix) == 8, "prefix");
GP_STATIC_ASSERT(sizeof(struct gp_rec_launch) == 96, "launch");
GP_STATIC_ASSERT(offsetof(struct gp_rec_launch, grid) == 64, "launch.grid");
GP_STATIC_ASSERT(offsetof(struct gp_rec_launch, api) == 92, "launch.api");
GP_STATIC_ASSERT(sizeof(struct gp_rec_kernel_name) == 32, "kernel_name");
GP_STATIC_ASSERT(sizeof(struct gp_rec_warp) == 64, "warp");
GP_STATIC_ASSERT(sizeof(struct gp_rec_completion) == 32, "completion");
GP_STATIC_ASSERT(sizeof(struct gp_rec_memcpy) == 56, "memcpy");
GP_STATIC_ASSERT(sizeof(struct gp_rec_sync) == 48, "sync");
GP_STATIC_ASSERT(sizeof(struct gp_rec_calibration) == 40, "calibration");
GP_STATIC_ASSERT(sizeof(struct gp_rec_thread_count) == 24, "thread_count");
GP_STATIC_ASSERT(sizeof(struct gp_rec_device) == 104, "device");
GP_STATIC_ASSERT(sizeof(struct gp_rec_window) == 48, "window");
GP_STATIC_ASSERT(sizeof(struct gp_rec_window_state) == 32, "window_state");
GP_STATIC_ASSERT(sizeof(struct gp_rec_span_context) == 48, "span_context");
GP_STATIC_ASSERT(offsetof(struct gp_rec_span_context, flags) == 40, "span_context.flags");
GP_STATIC_ASSERT(sizeof(struct gp_rec_stack) == 32, "stack");
GP_STATIC_ASSERT(offsetof(struct gp_rec_stack, py_version) == 28, "stack.py_version");
GP_STATIC_ASSERT(sizeof(struct gp_rec_patch) == 48, "patch");
GP_STATIC_ASSERT(offsetof(struct gp_rec_patch, outcome) == 40, "patch.outcome");
GP_STATIC_ASSERT(sizeof(struct gp_rec_counter_sample) == 40, "counter_sample");
GP_STATIC_ASSERT(offsetof(struct gp_rec_counter_sample, value) == 40, "counter_sample.value");
GP_STATIC_ASSERT(sizeof(struct gp_rec_counter_set) == 48, "counter_set");
GP_STATIC_ASSERT(offsetof(struct gp_rec_counter_set, count) == 40, "counter_set.count");

#endif /* GPUPROBE_RECORD_H */
