/*
 * cupti.c - exact device windows for every kernel: CUPTI kernel
 * activity, mapped to the shim's launch records.
 *
 * Every kernel the driver runs - SASS-only cuBLAS, PyTorch and Triton
 * kernels, patched or not, plain launch or graph node - gets its device
 * start and end from CUPTI's CONCURRENT_KERNEL activity records. The shim
 * loads the application's own libcupti (or the toolkit's, cupti_load),
 * hands CUPTI its clock (CLOCK_MONOTONIC, the launch records' domain) and
 * learns each launch's correlation id from a driver callback at the entry
 * of the launch entry points, which files it under the launch id the
 * shim's wrapper named (gp_win_expect: one store; the callback: three),
 * and the activity thread turns each
 * kernel record into a window record (record type 12) keyed by the launch
 * id, written into the session's launch ring. A kernel launched by
 * another kernel (dynamic parallelism) comes as a CDP kernel record with
 * the correlation id of the host launch it descends from: its window is
 * flagged DEVICE_LAUNCHED. A kernel CUPTI could not time (0 timestamps)
 * gets an UNTIMED window, so that its launch is counted with that reason
 * rather than waited for.
 *
 * The application's profiler comes first. torch.profiler (Kineto), Nsight
 * Systems and ncu use CUPTI, which has one set of activity callbacks and
 * one subscriber per process: the shim exports CUPTI's entry points a
 * profiler starts with, and when the application calls one the shim steps
 * aside (disables its kinds, flushes, unsubscribes) before forwarding the
 * call, says so in a window_state record, and comes back once the
 * application has disabled every kind it enabled and has no subscriber. A
 * profiler injected through CUDA_INJECTION64_PATH keeps CUPTI to itself.
 *
 * Bounded: GP_WIN_BUFS activity buffers of GP_WIN_BUF bytes (16 MiB of
 * address space, touched as CUPTI fills them), allocated once (CUPTI asks for buffers on the application's launch path: a buffer
 * is taken from the pool there, never allocated); records CUPTI drops when
 * the pool is empty, and windows the ring cannot take, are counted in the
 * next window_state record. Any failure leaves windows off and the
 * application unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp.h"

/* ---- the CUPTI ABI used here (checked against cupti.h on the GPU
 * machine: scripts/gpu/windows.sh, "abi") ---------------------------- */

typedef int gp_cupti_result;
#define GP_CUPTI_SUCCESS 0
#define GP_CUPTI_KIND_KERNEL 3
#define GP_CUPTI_KIND_CONCURRENT_KERNEL 10
#define GP_CUPTI_DOMAIN_DRIVER 1
#define GP_CUPTI_API_ENTER 0
#define GP_CUPTI_API_EXIT 1
#define GP_CUPTI_FLUSH_FORCED 1
/* CUpti_CallbackData: callbackSite at 0, correlationId at 64. */
#define GP_CB_SITE 0
#define GP_CB_CORRELATION 64
/* CUpti_ActivityKernel4..9 (CUDA 11 onwards), the fields read here. */
#define GP_AK_KIND 0
#define GP_AK_START 16
#define GP_AK_END 24
#define GP_AK_DEVICE 40
#define GP_AK_CORRELATION 92
#define GP_AK_NAME 104
#define GP_AK_LAUNCH_TYPE 136 /* u8; read for the trace only */
#define GP_AK_GRAPH_NODE 144
#define GP_AK_MIN_SIZE 152
/* CUpti_ActivityCdpKernel (unversioned since CUDA 5.5): a kernel launched
 * by another kernel, enabled with CONCURRENT_KERNEL. Its correlation id
 * is the host launch call's the kernel descends from. */
#define GP_CUPTI_KIND_CDP_KERNEL 18
#define GP_CDP_START 8
#define GP_CDP_END 16
#define GP_CDP_DEVICE 24
#define GP_CDP_CORRELATION 76
#define GP_CDP_NAME 136
/* CUpti_ActivityGraphTrace(2): one graph launch's whole device window,
 * GPUPROBE_GRAPH_WINDOWS=graph. Its correlation id is the cuGraphLaunch
 * call's. */
#define GP_CUPTI_KIND_GRAPH_TRACE 51
#define GP_GT_CORRELATION 4
#define GP_GT_START 8
#define GP_GT_END 16
#define GP_GT_DEVICE 24
/* The oldest CUPTI whose kernel records have that layout and whose
 * activity and callback APIs behave as used here: CUDA 12.0 (API 18). */
#define GP_CUPTI_MIN_API 18

/* Driver callback ids of the launch entry points (cupti_driver_cbid.h). */
static const uint32_t gp_win_cbids[] = {
	307, /* cuLaunchKernel */
	442, /* cuLaunchKernel_ptsz */
	652, /* cuLaunchKernelEx */
	653, /* cuLaunchKernelEx_ptsz */
	477, /* cuLaunchCooperativeKernel */
	478, /* cuLaunchCooperativeKernel_ptsz */
	514, /* cuGraphLaunch */
	515, /* cuGraphLaunch_ptsz */
};

typedef void (*gp_buf_req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*gp_buf_done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef void (*gp_cb_fn)(void *, uint32_t, uint32_t, const void *);

static struct {
	gp_cupti_result (*get_version)(uint32_t *);
	gp_cupti_result (*register_callbacks)(gp_buf_req_fn, gp_buf_done_fn);
	gp_cupti_result (*enable)(uint32_t);
	gp_cupti_result (*disable)(uint32_t);
	gp_cupti_result (*flush_all)(uint32_t);
	gp_cupti_result (*next_record)(uint8_t *, size_t, void **);
	gp_cupti_result (*dropped)(void *, uint32_t, size_t *);
	gp_cupti_result (*subscribe)(void **, gp_cb_fn, void *);
	gp_cupti_result (*unsubscribe)(void *);
	gp_cupti_result (*enable_callback)(uint32_t, void *, uint32_t, uint32_t);
	gp_cupti_result (*timestamp_cb)(uint64_t (*)(void));
	gp_cupti_result (*finalize)(void);
	gp_cupti_result (*get_timestamp)(uint64_t *);
	void *lib;
	char path[512];
} gp_cu;

/* ---- state --------------------------------------------------------- */

/* gp_win_on: windows are being recorded (the launch path files ids). */
GP_HOT_VAR GP_HIDDEN int gp_win_on;

enum { GP_WIN_IDLE, GP_WIN_ON, GP_WIN_ASIDE, GP_WIN_UNAVAILABLE };
static pthread_mutex_t gp_win_mu = PTHREAD_MUTEX_INITIALIZER;
/* Set while this thread holds gp_win_mu: a CUPTI call made under it that
 * comes back through an interposer below (libcupti calling its own
 * exported entry points) goes straight through. */
static __thread int gp_win_held;

static void gp_win_lock(void)
{
	pthread_mutex_lock(&gp_win_mu);
	gp_win_held = 1;
}

static void gp_win_unlock(void)
{
	gp_win_held = 0;
	pthread_mutex_unlock(&gp_win_mu);
}
static int gp_win_state = GP_WIN_IDLE;
static void *gp_win_sub;
static int gp_win_ts_ours; /* CUPTI timestamps are gp_now's */
static uint32_t gp_win_flush_us = 100000; /* the WELCOME's flush_us (0 there: this default) */
/* What the application itself asked of CUPTI (the interposers). */
static uint32_t gp_app_kinds;  /* kinds enabled, counted */
static int gp_app_sub;         /* it holds a subscriber */
static int gp_app_cb;          /* it registered activity callbacks and has not disabled every kind since */
static uint64_t gp_app_idle_since;
static uint32_t gp_win_lost;   /* windows lost since the last state record (atomic) */
static int gp_win_detach;      /* the rate cap asks for CUPTI's detach at the next launch's exit (atomic) */
static void gp_win_detach_now(void);
static uint64_t gp_win_written, gp_win_lost_all, gp_win_cupti_dropped; /* for the trace's exit line (atomic) */
static uint64_t gp_win_untimed, gp_win_device; /* of those written: UNTIMED, DEVICE_LAUNCHED (atomic) */
static uint64_t gp_win_graphs, gp_win_nodes; /* of those written: GRAPH_EXEC, graph nodes' own (atomic) */
/* gp_win_graph_mode: graph launches are timed whole (CUPTI's graph trace)
 * rather than per kernel node: GPUPROBE_GRAPH_WINDOWS=graph. */
static int gp_win_graph_mode;
static uint32_t gp_win_watch, gp_win_watched; /* the detach's flush: was this correlation id's window written? */

/* The correlation table: slot corr % GP_CORR_SLOTS holds the launch id of
 * correlation id corr. Written by the launch path, read by the activity
 * thread; a slot is invalidated (corr 0) before its id changes. */
#define GP_CORR_SLOTS 65536u
struct gp_corr {
	uint32_t corr; /* atomic */
	uint32_t pad;
	uint64_t id;   /* atomic */
};
static struct gp_corr gp_corr_tab[GP_CORR_SLOTS];

static void gp_win_file(uint32_t corr, uint64_t id)
{
	struct gp_corr *e = &gp_corr_tab[corr % GP_CORR_SLOTS];
	__atomic_store_n(&e->corr, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&e->id, id, __ATOMIC_RELAXED);
	__atomic_store_n(&e->corr, corr, __ATOMIC_RELEASE);
}

/* gp_win_lookup returns the launch id filed for corr, 0 if none is. */
static uint64_t gp_win_lookup(uint32_t corr)
{
	struct gp_corr *e = &gp_corr_tab[corr % GP_CORR_SLOTS];
	if (corr == 0 || __atomic_load_n(&e->corr, __ATOMIC_ACQUIRE) != corr)
		return 0;
	uint64_t id = __atomic_load_n(&e->id, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&e->corr, __ATOMIC_RELAXED) == corr ? id : 0;
}

/* ---- activity buffers: a fixed pool ------------------------------- */

#define GP_WIN_BUFS 32u /* one bit each in gp_win_free */
#define GP_WIN_BUF ((size_t)512 << 10)
static uint8_t *gp_win_pool;
static uint32_t gp_win_free = 0xffffffffu; /* bit i: buffer i is free (atomic) */

/* A buffer is handed over only when all its records are complete, or when
 * it is full: in a stream that always has a kernel in flight that is when
 * it is full. So a buffer is sized to fill in about GP_WIN_FILL_NS at the
 * process's launch rate (gp_win_size, from the flush thread), between
 * GP_WIN_BUF_MIN and GP_WIN_BUF: a 512 KiB buffer held a GEMM's windows
 * for seconds on a time-sliced GPU, past the collector's settling lag. */
#define GP_WIN_BUF_MIN ((size_t)2 << 10)
#define GP_WIN_FILL_NS 200000000ull
static size_t gp_win_bufsize = (size_t)16 << 10; /* the next buffer's size (atomic) */
static uint32_t gp_win_recsize = 256;             /* bytes per record seen (atomic) */
static uint64_t gp_win_size_epoch, gp_win_size_ids; /* the flush thread's */

static void gp_buf_requested(uint8_t **buf, size_t *size, size_t *max)
{
	*buf = NULL, *size = 0, *max = 0;
	uint32_t f = __atomic_load_n(&gp_win_free, __ATOMIC_ACQUIRE);
	while (f != 0) {
		uint32_t i = (uint32_t)__builtin_ctz(f);
		if (__atomic_compare_exchange_n(&gp_win_free, &f, f & ~(1u << i), 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			*buf = gp_win_pool + i * GP_WIN_BUF, *size = __atomic_load_n(&gp_win_bufsize, __ATOMIC_RELAXED);
			return;
		}
	}
	/* None free: CUPTI drops records and counts them (gp_win_dropped). */
}

static void gp_buf_release(uint8_t *buf)
{
	if (buf < gp_win_pool || buf >= gp_win_pool + GP_WIN_BUFS * GP_WIN_BUF)
		return;
	uint32_t i = (uint32_t)((size_t)(buf - gp_win_pool) / GP_WIN_BUF);
	__atomic_fetch_or(&gp_win_free, 1u << i, __ATOMIC_RELEASE);
}

/* ---- records --------------------------------------------------------- */

static uint32_t gp_fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (int i = 0; s != NULL && s[i] != 0 && i < GP_KERNEL_NAME_MAX; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static void gp_win_state_record(uint32_t state, uint32_t reason, uint32_t detail)
{
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (ring == NULL)
		return;
	struct gp_rec_window_state r = {
		.h = {.type = GP_REC_WINDOW_STATE, .version = GP_REC_VERSION, .size = sizeof r},
		.time_ns = gp_now(),
		.state = state,
		.reason = reason,
		.detail = detail,
		.dropped = __atomic_exchange_n(&gp_win_lost, 0, __ATOMIC_RELAXED),
	};
	gp_produce(ring, GP_REC_WINDOW_STATE, &r, sizeof r);
}

static uint64_t gp_rd64(const uint8_t *p, size_t off)
{
	uint64_t v;
	memcpy(&v, p + off, 8);
	return v;
}

static uint32_t gp_rd32(const uint8_t *p, size_t off)
{
	uint32_t v;
	memcpy(&v, p + off, 4);
	return v;
}

/* Where one kind of kernel record keeps the fields read here. */
struct gp_ak_layout {
	size_t start, end, device, correlation, name;
	uint32_t flags; /* GP_WINDOW_F_* every record of the kind gets */
};
static const struct gp_ak_layout gp_ak_kernel = {GP_AK_START, GP_AK_END, GP_AK_DEVICE, GP_AK_CORRELATION, GP_AK_NAME, 0};
static const struct gp_ak_layout gp_ak_cdp = {GP_CDP_START, GP_CDP_END, GP_CDP_DEVICE, GP_CDP_CORRELATION, GP_CDP_NAME,
					      GP_WINDOW_F_DEVICE_LAUNCHED};

/* gp_win_seen traces the first record of each kind and launch type
 * (kind and type below 32), and the first few that find no launch: what
 * a new launch path looks like to CUPTI, in the shim's trace. */
static void gp_win_seen(uint32_t kind, const uint8_t *k, const struct gp_rec_window *w, const char *name)
{
	static uint32_t seen[32], nolaunch;
	uint32_t lt = kind == GP_CUPTI_KIND_CDP_KERNEL ? 0 : k[GP_AK_LAUNCH_TYPE];
	if (GP_LIKELY(gp_trace_fd < 0))
		return;
	if (kind < 32 && lt < 32 && !(__atomic_fetch_or(&seen[kind], 1u << lt, __ATOMIC_RELAXED) & (1u << lt)))
		GP_TRACE("device windows: first record of kind %u, launch type %u: %s, correlation %u, launch %llu, "
			 "flags %#x", kind, lt, name ? name : "(no name)", w->correlation,
			 (unsigned long long)w->launch_id, w->flags);
	if ((w->flags & GP_WINDOW_F_NO_LAUNCH) && __atomic_fetch_add(&nolaunch, 1, __ATOMIC_RELAXED) < 8)
		GP_TRACE("device windows: %s (kind %u, correlation %u) has no launch the shim filed",
			 name ? name : "(no name)", kind, w->correlation);
}

/* gp_win_times sets window w's times from CUPTI's start and end (shifted
 * to gp_now's clock), UNTIMED when CUPTI gave none, and NO_LAUNCH when w
 * names no launch. */
static void gp_win_times(struct gp_rec_window *w, uint64_t start, uint64_t end, int64_t shift)
{
	if (start == 0 || end < start)
		w->flags |= GP_WINDOW_F_UNTIMED;
	else
		w->start_ns = start + (uint64_t)shift, w->end_ns = end + (uint64_t)shift;
	if (w->launch_id == 0)
		w->flags |= GP_WINDOW_F_NO_LAUNCH;
}

/* gp_win_put writes window w into the ring and counts it, written or lost. */
static void gp_win_put(void *ring, const struct gp_rec_window *w)
{
	if (ring == NULL || gpbr_ring_produce(ring, GP_REC_WINDOW, w, sizeof *w) != GPBR_PUBLISHED) {
		__atomic_fetch_add(&gp_win_lost, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&gp_win_lost_all, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_fetch_add(&gp_win_written, 1, __ATOMIC_RELAXED);
	if (w->flags & GP_WINDOW_F_UNTIMED)
		__atomic_fetch_add(&gp_win_untimed, 1, __ATOMIC_RELAXED);
	if (w->flags & GP_WINDOW_F_DEVICE_LAUNCHED)
		__atomic_fetch_add(&gp_win_device, 1, __ATOMIC_RELAXED);
	if (w->flags & GP_WINDOW_F_GRAPH_EXEC)
		__atomic_fetch_add(&gp_win_graphs, 1, __ATOMIC_RELAXED);
	else if (w->flags & GP_WINDOW_F_GRAPH)
		__atomic_fetch_add(&gp_win_nodes, 1, __ATOMIC_RELAXED);
	if (w->correlation == __atomic_load_n(&gp_win_watch, __ATOMIC_RELAXED))
		__atomic_store_n(&gp_win_watched, 1, __ATOMIC_RELAXED);
}

/* gp_win_emit writes the window of one kernel record of layout L. A
 * kernel the driver did not time (CUPTI says so with 0) gets an UNTIMED
 * window, so that its launch has a reason instead of a wait. */
static void gp_win_emit(void *ring, uint32_t kind, const uint8_t *k, const struct gp_ak_layout *L, int64_t shift)
{
	uint64_t start = gp_rd64(k, L->start), end = gp_rd64(k, L->end);
	uint32_t corr = gp_rd32(k, L->correlation);
	const char *name;
	memcpy(&name, k + L->name, sizeof name);
	/* The shim's own kernels (calibration) have no launch record: their
	 * windows would only count as unmatched in the collector. */
	if (name != NULL && strncmp(name, "__gpuprobe_", 11) == 0)
		return;
	struct gp_rec_window w = {
		.h = {.type = GP_REC_WINDOW, .version = GP_REC_VERSION, .size = sizeof w},
		.launch_id = gp_win_lookup(corr),
		.device = gp_rd32(k, L->device),
		.name_hash = gp_fnv1a(name),
		.correlation = corr,
		.flags = L->flags,
	};
	if (L == &gp_ak_kernel && gp_rd64(k, GP_AK_GRAPH_NODE) != 0)
		w.flags |= GP_WINDOW_F_GRAPH;
	gp_win_times(&w, start, end, shift);
	gp_win_seen(kind, k, &w, name);
	gp_win_put(ring, &w);
}

/* gp_win_emit_graph writes the window of one graph trace record: the
 * whole graph launch's, named by the launch id of its first node record. */
static void gp_win_emit_graph(void *ring, const uint8_t *k, int64_t shift)
{
	uint64_t start = gp_rd64(k, GP_GT_START), end = gp_rd64(k, GP_GT_END);
	uint32_t corr = gp_rd32(k, GP_GT_CORRELATION);
	struct gp_rec_window w = {
		.h = {.type = GP_REC_WINDOW, .version = GP_REC_VERSION, .size = sizeof w},
		.launch_id = gp_win_lookup(corr),
		.device = gp_rd32(k, GP_GT_DEVICE),
		.correlation = corr,
		.flags = GP_WINDOW_F_GRAPH | GP_WINDOW_F_GRAPH_EXEC,
	};
	gp_win_times(&w, start, end, shift);
	gp_win_put(ring, &w);
}

/* gp_buf_completed runs on CUPTI's thread (or the one that flushes). */
static void gp_buf_completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
	(void)ctx, (void)stream, (void)size;
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	/* CUPTI's own clock when it has no callback of ours: its offset to
	 * gp_now, read now (both count nanoseconds). */
	int64_t shift = 0;
	uint64_t ct = 0;
	if (!gp_win_ts_ours && gp_cu.get_timestamp && gp_cu.get_timestamp(&ct) == GP_CUPTI_SUCCESS)
		shift = (int64_t)(gp_now() - ct);
	void *r = NULL;
	uint32_t n = 0;
	while (buf != NULL && valid > 0 && n < GP_WIN_BUF / 16 &&
	       gp_cu.next_record(buf, valid, &r) == GP_CUPTI_SUCCESS && r != NULL) {
		const uint8_t *k = r;
		uint32_t kind = gp_rd32(k, GP_AK_KIND);
		if (kind == GP_CUPTI_KIND_CONCURRENT_KERNEL || kind == GP_CUPTI_KIND_KERNEL)
			gp_win_emit(ring, kind, k, &gp_ak_kernel, shift);
		else if (kind == GP_CUPTI_KIND_CDP_KERNEL)
			gp_win_emit(ring, kind, k, &gp_ak_cdp, shift);
		else if (kind == GP_CUPTI_KIND_GRAPH_TRACE)
			gp_win_emit_graph(ring, k, shift);
		n++;
	}
	if (n > 0 && valid / n >= 64 && valid / n <= 4096)
		__atomic_store_n(&gp_win_recsize, (uint32_t)(valid / n), __ATOMIC_RELAXED);
	size_t d = 0;
	if (gp_cu.dropped && gp_cu.dropped(ctx, stream, &d) == GP_CUPTI_SUCCESS && d > 0) {
		__atomic_fetch_add(&gp_win_lost, (uint32_t)d, __ATOMIC_RELAXED);
		__atomic_fetch_add(&gp_win_cupti_dropped, d, __ATOMIC_RELAXED);
	}
	if (__atomic_load_n(&gp_win_lost, __ATOMIC_RELAXED) != 0)
		gp_win_state_record(GP_WINDOWS_ON, GP_WINDOWS_R_NONE, 0);
	gp_buf_release(buf);
}

/* The driver callback at a launch call's entry: its correlation id is filed
 * under the launch id the shim's wrapper named (gp_win_expect). A call the
 * shim did not wrap has none, and nothing is filed. */
static void gp_win_callback(void *ud, uint32_t domain, uint32_t cbid, const void *data)
{
	(void)ud, (void)domain, (void)cbid;
	const uint8_t *d = data;
	uint64_t id = gp_self.pending;
	if (d != NULL && gp_rd32(d, GP_CB_SITE) == GP_CUPTI_API_EXIT &&
	    GP_UNLIKELY(__atomic_load_n(&gp_win_detach, __ATOMIC_ACQUIRE))) {
		gp_win_detach_now();
		return;
	}
	/* A launch entry point the driver implements with another one (a
	 * cooperative launch or launch attributes through cuLaunchKernelEx)
	 * calls back again, nested, with a correlation id of its own, and the
	 * kernel record may carry either: every one is filed under the launch
	 * id. gp_win_note clears corr when the outer call returns. */
	if (d == NULL || id == 0 || gp_rd32(d, GP_CB_SITE) != GP_CUPTI_API_ENTER ||
	    !__atomic_load_n(&gp_win_on, __ATOMIC_RELAXED))
		return;
	uint32_t corr = gp_rd32(d, GP_CB_CORRELATION);
	if (corr == 0)
		return;
	gp_win_file(corr, id);
	gp_self.corr = corr;
}

static uint64_t gp_win_clock(void) { return gp_now(); }

/* ---- loading libcupti ------------------------------------------------ */

static const char *const gp_cupti_names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

static int gp_cupti_try(const char *path, int flags)
{
	void *h = dlopen(path, flags | RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return 0;
	gp_cu.lib = h;
	snprintf(gp_cu.path, sizeof gp_cu.path, "%s", path);
	return 1;
}

/* Beside a loaded CUDA library (the application's toolkit or wheel):
 * its own directory, a pip wheel's nvidia/cuda_cupti/lib, the toolkit's
 * extras/CUPTI/lib64. */
static int gp_cupti_beside(struct dl_phdr_info *info, size_t sz, void *arg)
{
	(void)sz, (void)arg;
	const char *p = info->dlpi_name, *base = p ? strrchr(p, '/') : NULL;
	if (base == NULL || (strncmp(base + 1, "libcudart.so", 12) != 0 && strncmp(base + 1, "libcublas", 9) != 0))
		return 0;
	static const char *const rel[] = {"", "/../../cuda_cupti/lib", "/../extras/CUPTI/lib64"};
	char path[512];
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
		for (size_t j = 0; j < sizeof gp_cupti_names / sizeof gp_cupti_names[0]; j++) {
			int n = snprintf(path, sizeof path, "%.*s%s/%s", (int)(base - p), p, rel[i], gp_cupti_names[j]);
			if (n > 0 && (size_t)n < sizeof path && access(path, R_OK) == 0 && gp_cupti_try(path, 0))
				return 1;
		}
	return 0;
}

static int gp_cupti_load(const char **why)
{
	const char *env = getenv("GPUPROBE_CUPTI");
	if (env && env[0])
		return gp_cupti_try(env, 0) ? 0 : (*why = "GPUPROBE_CUPTI could not be loaded", -1);
	/* One the application loaded already comes first: two CUPTIs in one
	 * process would fight over the driver's hooks. */
	for (size_t j = 0; j < sizeof gp_cupti_names / sizeof gp_cupti_names[0]; j++)
		if (gp_cupti_try(gp_cupti_names[j], RTLD_NOLOAD))
			return 0;
	if (dl_iterate_phdr(gp_cupti_beside, NULL))
		return 0;
	static const char *const dirs[] = {"/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64",
					   "/usr/local/cuda/targets/x86_64-linux/lib",
					   "/usr/local/cuda/targets/sbsa-linux/lib"};
	char path[512];
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(path, sizeof path, "%s/libcupti.so", dirs[i]);
		if (access(path, R_OK) == 0 && gp_cupti_try(path, 0))
			return 0;
	}
	for (size_t j = 0; j < sizeof gp_cupti_names / sizeof gp_cupti_names[0]; j++)
		if (gp_cupti_try(gp_cupti_names[j], 0))
			return 0;
	*why = "no libcupti found (set GPUPROBE_CUPTI to its path)";
	return -1;
}

#define GP_CU_SYM(field, name) (*(void **)&gp_cu.field = gp_real_dlsym(gp_cu.lib, name))

static int gp_cupti_syms(const char **why)
{
	GP_CU_SYM(get_version, "cuptiGetVersion");
	GP_CU_SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
	GP_CU_SYM(enable, "cuptiActivityEnable");
	GP_CU_SYM(disable, "cuptiActivityDisable");
	GP_CU_SYM(flush_all, "cuptiActivityFlushAll");
	GP_CU_SYM(next_record, "cuptiActivityGetNextRecord");
	GP_CU_SYM(dropped, "cuptiActivityGetNumDroppedRecords");
	GP_CU_SYM(subscribe, "cuptiSubscribe");
	GP_CU_SYM(unsubscribe, "cuptiUnsubscribe");
	GP_CU_SYM(enable_callback, "cuptiEnableCallback");
	GP_CU_SYM(timestamp_cb, "cuptiActivityRegisterTimestampCallback");
	GP_CU_SYM(get_timestamp, "cuptiGetTimestamp");
	GP_CU_SYM(finalize, "cuptiFinalize");
	if (!gp_cu.get_version || !gp_cu.register_callbacks || !gp_cu.enable || !gp_cu.disable ||
	    !gp_cu.flush_all || !gp_cu.next_record || !gp_cu.subscribe || !gp_cu.unsubscribe ||
	    !gp_cu.enable_callback) {
		*why = "libcupti lacks an entry point";
		return -1;
	}
	uint32_t v = 0;
	if (gp_cu.get_version(&v) != GP_CUPTI_SUCCESS || v < GP_CUPTI_MIN_API) {
		*why = "libcupti older than CUDA 12";
		return -1;
	}
	return 0;
}

/* ---- on, aside, back --------------------------------------------------- */

/* gp_win_enable turns our collection on (gp_win_mu held); a CUptiResult
 * on failure, with everything it did undone. */
static int gp_win_enable(const char **why)
{
	gp_cupti_result r;
	if ((r = gp_cu.subscribe(&gp_win_sub, gp_win_callback, NULL)) != GP_CUPTI_SUCCESS) {
		gp_win_sub = NULL;
		return *why = "cuptiSubscribe (another subscriber?)", r;
	}
	for (size_t i = 0; i < sizeof gp_win_cbids / sizeof gp_win_cbids[0]; i++)
		gp_cu.enable_callback(1, gp_win_sub, GP_CUPTI_DOMAIN_DRIVER, gp_win_cbids[i]);
	gp_win_ts_ours = gp_cu.timestamp_cb && gp_cu.timestamp_cb(gp_win_clock) == GP_CUPTI_SUCCESS;
	if ((r = gp_cu.register_callbacks(gp_buf_requested, gp_buf_completed)) != GP_CUPTI_SUCCESS ||
	    (r = gp_cu.enable(GP_CUPTI_KIND_CONCURRENT_KERNEL)) != GP_CUPTI_SUCCESS) {
		gp_cu.unsubscribe(gp_win_sub);
		gp_win_sub = NULL;
		return *why = "enabling kernel activity", r;
	}
	/* Graph mode: a CUPTI that cannot trace graphs whole times their
	 * nodes, as the default does. */
	if (gp_win_graph_mode && gp_cu.enable(GP_CUPTI_KIND_GRAPH_TRACE) != GP_CUPTI_SUCCESS) {
		gp_win_graph_mode = 0;
		GP_TRACE("device windows: no graph trace in this CUPTI: graph nodes are timed one by one");
	}
	__atomic_store_n(&gp_win_on, 1, __ATOMIC_RELEASE);
	return 0;
}

/* gp_win_disable turns our collection off and drains it (gp_win_mu held). */
static void gp_win_disable(void)
{
	__atomic_store_n(&gp_win_on, 0, __ATOMIC_RELEASE);
	gp_cu.disable(GP_CUPTI_KIND_CONCURRENT_KERNEL);
	if (gp_win_graph_mode)
		gp_cu.disable(GP_CUPTI_KIND_GRAPH_TRACE);
	gp_cu.flush_all(GP_CUPTI_FLUSH_FORCED);
	if (gp_win_sub != NULL)
		gp_cu.unsubscribe(gp_win_sub);
	gp_win_sub = NULL;
}

/* ---- the rate cap ------------------------------------------------------
 * Windows cost the launching thread about 1 us a launch, nothing on the
 * GPU, and once CUPTI is attached that cost stays even with its kinds
 * disabled and its subscriber gone (measured on an H200: an
 * empty-kernel loop at 1.23x plain with windows on, 1.25x with them
 * paused, 1.006x with the shim alone). So a process that launches more
 * than the budget allows (launches a second x 1 us > budget_ppm of one
 * thread) for two epochs in a row has CUPTI detached (cuptiFinalize, from
 * a launch call's exit callback, where CUPTI says it is safe): windows
 * stay off for it, said in a window_state record (reason RATE), and its
 * launches are flagged NO_WINDOW. The rate is measured every
 * GP_WIN_EPOCH_NS from the launch ids handed out (blocks of 1024 a
 * thread: coarse below about 5,000 launches a second, far under any
 * budget). PyTorch steps launch 12,000-14,000 kernels a second (issue
 * 17's transformer, eager and compiled): they keep their windows. */
#define GP_WIN_COST_NS 1000ull
#define GP_WIN_EPOCH_NS 200000000ull
static uint64_t gp_win_budget_ppm = 20000; /* GPUPROBE_WINDOWS_BUDGET_PPM; 0: no cap */
static uint64_t gp_win_epoch, gp_win_epoch_ids;
static int gp_win_over; /* epochs in a row over the budget */

/* gp_win_pace measures the launch rate each epoch (gp_win_mu held, state
 * ON) and asks for the detach when it stays over the budget. */
/* gp_win_size sizes the next buffers to fill in GP_WIN_FILL_NS at the
 * launch rate of the last second (flush thread, gp_win_lock held). */
static void gp_win_size(uint64_t now)
{
	if (now - gp_win_size_epoch < 1000000000ull)
		return;
	uint64_t ids = gp_ids_handed(), launches = ids - gp_win_size_ids, ms = (now - gp_win_size_epoch) / 1000000ull;
	int first = gp_win_size_epoch == 0;
	gp_win_size_epoch = now, gp_win_size_ids = ids;
	if (first || launches == 0)
		return; /* no rate yet, or no launch: keep the size the last ones had */
	uint64_t want = launches * __atomic_load_n(&gp_win_recsize, __ATOMIC_RELAXED) * (GP_WIN_FILL_NS / 1000000ull) / ms;
	size_t size = want < GP_WIN_BUF_MIN ? GP_WIN_BUF_MIN : want > GP_WIN_BUF ? GP_WIN_BUF : (size_t)want;
	size = (size + 1023) & ~(size_t)1023;
	if (size != __atomic_exchange_n(&gp_win_bufsize, size, __ATOMIC_RELAXED))
		GP_TRACE("device windows: buffers of %zu bytes (%llu launches in %llu ms)", size,
			 (unsigned long long)launches, (unsigned long long)ms);
}

static void gp_win_pace(uint64_t now)
{
	if (gp_win_budget_ppm == 0 || now - gp_win_epoch < GP_WIN_EPOCH_NS)
		return;
	uint64_t ids = gp_ids_handed(), rate = (ids - gp_win_epoch_ids) * 1000000000ull / (now - gp_win_epoch);
	uint64_t allowed = gp_win_budget_ppm * 1000 / GP_WIN_COST_NS;
	gp_win_epoch = now, gp_win_epoch_ids = ids;
	gp_win_over = rate > allowed ? gp_win_over + 1 : 0;
	if (gp_win_over >= 2 && !__atomic_exchange_n(&gp_win_detach, 1, __ATOMIC_ACQ_REL))
		GP_TRACE("device windows: %llu launches a second, over the budget of %llu: detaching CUPTI",
			 (unsigned long long)rate, (unsigned long long)allowed);
}

/* gp_win_detach_now runs in the driver callback at a launch call's exit
 * once the detach is asked for: CUPTI is finalized (or, without
 * cuptiFinalize, its kind disabled and its subscriber dropped). */
static void gp_win_detach_now(void)
{
	if (pthread_mutex_trylock(&gp_win_mu) != 0)
		return; /* the next launch tries again */
	gp_win_held = 1;
	if (gp_win_state == GP_WIN_ON) {
		__atomic_store_n(&gp_win_on, 0, __ATOMIC_RELEASE);
		gp_cu.disable(GP_CUPTI_KIND_CONCURRENT_KERNEL);
		/* cuptiFinalize drops what CUPTI still holds: the windows of
		 * finished kernels are handed over first (as CUPTI advises; a
		 * kernel still running is counted lost, not timed). */
		__atomic_store_n(&gp_win_watch, gp_self.corr, __ATOMIC_RELAXED);
		__atomic_store_n(&gp_win_watched, 0, __ATOMIC_RELAXED);
		gp_cu.flush_all(GP_CUPTI_FLUSH_FORCED);
		if (gp_cu.finalize)
			gp_cu.finalize();
		else
			gp_cu.unsubscribe(gp_win_sub);
		gp_win_sub = NULL;
		/* This launch's window came in the flush or will never come:
		 * its record says which. */
		if (!__atomic_load_n(&gp_win_watched, __ATOMIC_RELAXED))
			gp_self.corr = 0;
		__atomic_store_n(&gp_win_watch, 0, __ATOMIC_RELAXED);
		gp_win_state = GP_WIN_UNAVAILABLE;
		GP_TRACE("device windows: off (CUPTI %s)", gp_cu.finalize ? "detached" : "unsubscribed");
		gp_win_state_record(GP_WINDOWS_OFF, GP_WINDOWS_R_RATE, 0);
	}
	gp_win_unlock();
}

/* The flush thread: a default flush every flush period (it hands over
 * every buffer whose records are complete, full or not; CUPTI's own
 * periodic flush, cuptiActivityFlushPeriod, hands over full buffers only,
 * so a process launching a few hundred kernels a second got its windows
 * only at exit, seconds after its launches, on an H200);
 * the rate cap; and the way back after the application's profiler is
 * done. */
static void *gp_win_main(void *arg)
{
	(void)arg;
	struct timespec ts = {.tv_sec = gp_win_flush_us / 1000000, .tv_nsec = (long)(gp_win_flush_us % 1000000) * 1000L};
	for (;;) {
		nanosleep(&ts, NULL);
		gp_win_lock();
		if (gp_win_state == GP_WIN_ON)
			gp_cu.flush_all(0);
		if (gp_win_state == GP_WIN_ON)
			gp_win_pace(gp_now());
		if (gp_win_state == GP_WIN_ON)
			gp_win_size(gp_now());
		if (gp_win_state == GP_WIN_ASIDE && gp_app_kinds == 0 && !gp_app_sub && gp_app_idle_since &&
		    gp_now() - gp_app_idle_since > 1000000000ull) {
			const char *why = "";
			int r = gp_win_enable(&why);
			if (r == 0) {
				gp_win_state = GP_WIN_ON;
				GP_TRACE("device windows: back on (the application's profiler is done)");
				gp_win_state_record(GP_WINDOWS_ON, GP_WINDOWS_R_NONE, 0);
			} else
				gp_app_idle_since = gp_now(); /* try again later */
		}
		gp_win_unlock();
	}
	return NULL;
}

/* How long the exit flush waits for gp_win_mu: the flush thread may be
 * inside its periodic cuptiActivityFlushAll when the process exits, and
 * giving up at once (a trylock) lost every window of a process shorter
 * than one flush period (all of them CUPTI still held, none traced). */
#define GP_WIN_EXIT_WAIT_NS 2000000000L

/* gp_win_exit hands over the windows CUPTI still holds at exit. */
static void gp_win_exit(void)
{
	struct timespec ts;
	int r = 0;
	if (gp_win_held)
		r = -1; /* exit called under our own lock: it cannot be taken */
	else {
		clock_gettime(CLOCK_REALTIME, &ts); /* pthread_mutex_timedlock's clock */
		ts.tv_nsec += GP_WIN_EXIT_WAIT_NS % 1000000000L;
		ts.tv_sec += GP_WIN_EXIT_WAIT_NS / 1000000000L + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		r = pthread_mutex_timedlock(&gp_win_mu, &ts);
	}
	if (r != 0) {
		GP_TRACE("device windows: exit flush skipped (%s): %llu written, the rest CUPTI held is lost",
			 r < 0 ? "exit under the windows lock" : "the windows lock stayed held",
			 (unsigned long long)__atomic_load_n(&gp_win_written, __ATOMIC_RELAXED));
		return;
	}
	gp_win_held = 1;
	if (gp_win_state == GP_WIN_ON)
		gp_cu.flush_all(GP_CUPTI_FLUSH_FORCED);
	GP_TRACE("device windows: %llu written (%llu untimed, %llu device-launched, %llu graph nodes, %llu whole "
		 "graphs), %llu lost (the ring full), %llu dropped by CUPTI",
		 (unsigned long long)gp_win_written, (unsigned long long)gp_win_untimed,
		 (unsigned long long)gp_win_device, (unsigned long long)gp_win_nodes,
		 (unsigned long long)gp_win_graphs, (unsigned long long)gp_win_lost_all,
		 (unsigned long long)gp_win_cupti_dropped);
	gp_win_unlock();
}

static void gp_win_unavailable(uint32_t reason, uint32_t detail, const char *why)
{
	gp_win_state = reason == GP_WINDOWS_R_INJECTION || reason == GP_WINDOWS_R_PROFILER ? GP_WIN_ASIDE
											     : GP_WIN_UNAVAILABLE;
	GP_TRACE("device windows: off: %s (%u)", why, detail);
	gp_win_state_record(gp_win_state == GP_WIN_ASIDE ? GP_WINDOWS_STEPPED_ASIDE : GP_WINDOWS_UNAVAILABLE, reason,
			    detail);
}

/* gp_windows_start turns device windows on for this process, once (called
 * when the first session is up). */
GP_HIDDEN void gp_windows_start(uint32_t flush_us, uint32_t settings)
{
	static int once;
	if (__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL))
		return;
	const char *why = "", *off = getenv("GPUPROBE_WINDOWS");
	gp_win_lock();
	if (flush_us != 0)
		gp_win_flush_us = flush_us;
	const char *inj = getenv("CUDA_INJECTION64_PATH"), *bud = getenv("GPUPROBE_WINDOWS_BUDGET_PPM");
	if (bud && bud[0]) {
		char *end;
		unsigned long long v = strtoull(bud, &end, 10);
		if (*end == 0 && v <= 1000000)
			gp_win_budget_ppm = v;
	}
	gp_win_epoch = gp_now(), gp_win_epoch_ids = gp_ids_handed();
	/* The application's environment overrides the collector's choice. */
	const char *gm = getenv("GPUPROBE_GRAPH_WINDOWS");
	gp_win_graph_mode = gm != NULL && gm[0] ? strcmp(gm, "graph") == 0 : (settings & GP_SET_GRAPH_WHOLE) != 0;
	if (off && strcmp(off, "0") == 0)
		gp_win_unavailable(GP_WINDOWS_R_CONFIG, 0, "GPUPROBE_WINDOWS=0");
	else if (inj && inj[0])
		gp_win_unavailable(GP_WINDOWS_R_INJECTION, 0, "a profiler is injected (CUDA_INJECTION64_PATH)");
	else if (gp_app_kinds || gp_app_sub || gp_app_cb)
		gp_win_unavailable(GP_WINDOWS_R_PROFILER, 0, "the application uses CUPTI");
	else if (gp_sass_holds_callbacks())
		gp_win_unavailable(GP_WINDOWS_R_SASS, 0, "the SASS route's Sanitizer API holds the callback subscriber");
	else if (gp_cupti_load(&why) != 0)
		gp_win_unavailable(GP_WINDOWS_R_NO_LIBRARY, 0, why);
	else if (gp_cupti_syms(&why) != 0)
		gp_win_unavailable(GP_WINDOWS_R_NO_LIBRARY, 0, why);
	else if ((gp_win_pool = aligned_alloc(64, GP_WIN_BUFS * GP_WIN_BUF)) == NULL)
		gp_win_unavailable(GP_WINDOWS_R_API_ERROR, 0, "no memory for activity buffers");
	else {
		int r = gp_win_enable(&why);
		if (r != 0)
			gp_win_unavailable(GP_WINDOWS_R_API_ERROR, (uint32_t)r, why);
		else {
			gp_win_state = GP_WIN_ON;
			GP_TRACE("device windows: on (%s, %s clock, flush every %u us, graphs timed %s)", gp_cu.path,
				 gp_win_ts_ours ? "the shim's" : "CUPTI's", gp_win_flush_us,
				 gp_win_graph_mode ? "whole" : "by node");
			gp_win_state_record(GP_WINDOWS_ON, GP_WINDOWS_R_NONE, 0);
			pthread_t th;
			pthread_attr_t a;
			sigset_t all, old;
			pthread_attr_init(&a);
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			if (pthread_create(&th, &a, gp_win_main, NULL) == 0)
				pthread_setname_np(th, "gpuprobe-window");
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			pthread_attr_destroy(&a);
			atexit(gp_win_exit);
		}
	}
	gp_win_unlock();
}

/* gp_windows_forked: a fork child records no windows (CUPTI's state is
 * the parent's). */
GP_HIDDEN void gp_windows_forked(void) { __atomic_store_n(&gp_win_on, 0, __ATOMIC_RELAXED); }

/* ---- the application's own CUPTI calls --------------------------------- */

/* gp_app_uses steps aside before the application's call reaches CUPTI. */
static void gp_app_uses(const char *what)
{
	if (gp_win_state == GP_WIN_ON) {
		gp_win_disable();
		gp_win_state = GP_WIN_ASIDE;
		GP_TRACE("device windows: stepped aside (the application called %s)", what);
		gp_win_state_record(GP_WINDOWS_STEPPED_ASIDE, GP_WINDOWS_R_PROFILER, 0);
	}
	gp_app_idle_since = 0;
}

/* gp_app_profiles tells the SASS route whether the application's
 * profiler holds CUPTI (kinds enabled or a subscriber): patched kernels
 * would distort what it measures, so the route steps aside meanwhile,
 * and says so in a window_state record (its windows are the process's). */
static void gp_app_profiles(int on, const char *what)
{
	if (!gp_sass_holds_callbacks() || gp_sass_aside(on, what) != 0)
		return;
	if (on)
		gp_win_state_record(GP_WINDOWS_STEPPED_ASIDE, GP_WINDOWS_R_PROFILER, 0);
	else
		gp_win_state_record(GP_WINDOWS_UNAVAILABLE, GP_WINDOWS_R_SASS, 0);
}

static void gp_app_maybe_idle(void)
{
	if (gp_app_kinds == 0)
		gp_app_cb = 0;
	if (gp_app_kinds == 0 && !gp_app_sub) {
		gp_app_idle_since = gp_now();
		gp_app_profiles(0, NULL);
	}
}

/* gp_app_cupti_find: the path of a libcupti the process has loaded. */
static int gp_app_cupti_find(struct dl_phdr_info *info, size_t sz, void *arg)
{
	(void)sz;
	const char *p = info->dlpi_name, *base = p ? strrchr(p, '/') : NULL;
	if (base == NULL || strncmp(base + 1, "libcupti.so", 11) != 0)
		return 0;
	snprintf(arg, 512, "%s", p);
	return 1;
}

/* gp_next_cupti returns the application's CUPTI entry point name. Its
 * libcupti may be outside the global scope (Python loads torch with
 * RTLD_LOCAL, and Kineto's libcupti with it), where RTLD_NEXT does not
 * look: then the loaded library itself is asked (a reference to it, never
 * a load). Without this, torch.profiler fails in a process whose shim
 * has not loaded libcupti itself (a process on the SASS route, seen on an
 * H100: CUPTI_ERROR_NOT_INITIALIZED, no kernel events). */
static void *gp_next_cupti(const char *name)
{
	static void *app;
	void *p = gp_cu.lib ? gp_real_dlsym(gp_cu.lib, name) : NULL;
	if (p == NULL)
		p = gp_real_dlsym(RTLD_NEXT, name);
	if (p != NULL)
		return p;
	void *h = __atomic_load_n(&app, __ATOMIC_ACQUIRE);
	char path[512] = "";
	for (size_t j = 0; h == NULL && j < sizeof gp_cupti_names / sizeof gp_cupti_names[0]; j++)
		h = dlopen(gp_cupti_names[j], RTLD_NOLOAD | RTLD_NOW | RTLD_LOCAL);
	if (h == NULL && dl_iterate_phdr(gp_app_cupti_find, path))
		h = dlopen(path, RTLD_NOLOAD | RTLD_NOW | RTLD_LOCAL);
	if (h != NULL)
		__atomic_store_n(&app, h, __ATOMIC_RELEASE);
	return h ? gp_real_dlsym(h, name) : NULL;
}

#define GP_CUPTI_NOT_INITIALIZED 15

GP_EXPORT gp_cupti_result cuptiActivityRegisterCallbacks(gp_buf_req_fn req, gp_buf_done_fn done)
{
	gp_cupti_result (*fn)(gp_buf_req_fn, gp_buf_done_fn) = gp_next_cupti("cuptiActivityRegisterCallbacks");
	if (gp_win_held)
		return fn ? fn(req, done) : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_app_uses("cuptiActivityRegisterCallbacks");
	gp_cupti_result r = fn ? fn(req, done) : GP_CUPTI_NOT_INITIALIZED;
	gp_app_cb = 1;
	gp_win_unlock();
	return r;
}

GP_EXPORT gp_cupti_result cuptiActivityEnable(uint32_t kind)
{
	gp_cupti_result (*fn)(uint32_t) = gp_next_cupti("cuptiActivityEnable");
	if (gp_win_held)
		return fn ? fn(kind) : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_app_uses("cuptiActivityEnable");
	gp_cupti_result r = fn ? fn(kind) : GP_CUPTI_NOT_INITIALIZED;
	if (r == GP_CUPTI_SUCCESS) {
		gp_app_kinds++;
		gp_app_profiles(1, "cuptiActivityEnable");
	}
	gp_win_unlock();
	return r;
}

GP_EXPORT gp_cupti_result cuptiActivityDisable(uint32_t kind)
{
	gp_cupti_result (*fn)(uint32_t) = gp_next_cupti("cuptiActivityDisable");
	if (gp_win_held)
		return fn ? fn(kind) : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_cupti_result r = fn ? fn(kind) : GP_CUPTI_NOT_INITIALIZED;
	if (r == GP_CUPTI_SUCCESS && gp_app_kinds > 0)
		gp_app_kinds--;
	gp_app_maybe_idle();
	gp_win_unlock();
	return r;
}

GP_EXPORT gp_cupti_result cuptiSubscribe(void **sub, gp_cb_fn cb, void *ud)
{
	gp_cupti_result (*fn)(void **, gp_cb_fn, void *) = gp_next_cupti("cuptiSubscribe");
	if (gp_win_held)
		return fn ? fn(sub, cb, ud) : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_app_uses("cuptiSubscribe");
	gp_cupti_result r = fn ? fn(sub, cb, ud) : GP_CUPTI_NOT_INITIALIZED;
	if (r == GP_CUPTI_SUCCESS) {
		gp_app_sub = 1;
		gp_app_profiles(1, "cuptiSubscribe");
	}
	else if (gp_sass_holds_callbacks())
		GP_TRACE("sass: the application's cuptiSubscribe failed (%d): this process opted in to the SASS route "
			 "(GPUPROBE_SASS=1), whose Sanitizer API holds the driver's one callback subscriber for the "
			 "process's life; profile without GPUPROBE_SASS",
			 (int)r);
	gp_win_unlock();
	return r;
}

GP_EXPORT gp_cupti_result cuptiUnsubscribe(void *sub)
{
	gp_cupti_result (*fn)(void *) = gp_next_cupti("cuptiUnsubscribe");
	if (gp_win_held)
		return fn ? fn(sub) : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_cupti_result r = fn ? fn(sub) : GP_CUPTI_NOT_INITIALIZED;
	if (r == GP_CUPTI_SUCCESS && sub != gp_win_sub)
		gp_app_sub = 0;
	gp_app_maybe_idle();
	gp_win_unlock();
	return r;
}

GP_EXPORT gp_cupti_result cuptiFinalize(void)
{
	gp_cupti_result (*fn)(void) = gp_next_cupti("cuptiFinalize");
	if (gp_win_held)
		return fn ? fn() : GP_CUPTI_NOT_INITIALIZED;
	gp_win_lock();
	gp_app_uses("cuptiFinalize");
	gp_cupti_result r = fn ? fn() : GP_CUPTI_NOT_INITIALIZED;
	gp_app_kinds = 0, gp_app_sub = 0, gp_app_cb = 0;
	gp_app_maybe_idle();
	gp_win_unlock();
	return r;
}
