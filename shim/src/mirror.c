/*
 * mirror.c - device-resident maps (PATCHED global kind 5; shm/doc.go,
 * "Device-resident maps").
 *
 * A GPU program's array or ring may live in a device copy of its WELCOME
 * region, so that GPU code updates it at L2 speed instead of over PCIe
 * (1.01x against 66x for a per-thread ring record on an H100).
 * gp_devmap_bind (load time, under patch.c's lock) allocates the copy,
 * fills it from the host region and starts, once per process, the mirror
 * thread, which keeps the host region current: every mirror period it
 * copies an array's data area back and drains a ring's device copy into the
 * host ring (steps R1-R5), with asynchronous copies on a non-blocking
 * stream of its own, so it never orders against the application's streams.
 * The thread's calls must not invalidate an application's stream capture
 * (a global-mode capture forbids other threads' "potentially unsafe"
 * calls: copies, synchronisation, context switches): it runs in relaxed
 * capture mode, set once at its start; binding runs on the application's
 * thread, relaxed by patch.c for the load.
 * At exit one last pass, bounded to about 100 ms; the same before the
 * application releases or destroys a context (ctxgone.c), whose device
 * memory dies with it: the maps in it are then forgotten. A failure leaves the
 * global 0 (bind) or stops that map (mirror); the application runs on.
 * Nothing here is on the launch path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp.h"

#define GP_STREAM_NON_BLOCKING 1u
#define GP_DM_CTL 64u /* the part of a ring's control block copied back: 64..511 (drop shards, counters) */
#define GP_DM_CTL_LEN (GPBR_DATA_OFFSET - GP_DM_CTL)
#define GP_DM_LIMIT ((uint64_t)1 << 30) /* device bytes per process (GPUPROBE_DEVICE_MAP_LIMIT) */
#define GP_DM_STALL_NS 5000000000ull    /* ring stall timeout (GPUPROBE_DEVICE_MAP_STALL_MS) */
#define GP_DM_EXIT_NS 100000000ull      /* bound on the exit pass */
#define GP_MS 1000000ull

/* Driver entry points (the real ones); any missing disables device maps. */
static struct {
	CUresult (*ctx_get)(CUcontext *);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*ctx_device)(CUdevice *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free)(CUdeviceptr);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_sync)(CUstream);
	CUresult (*capture_mode)(int *); /* cuThreadExchangeStreamCaptureMode */
	int looked, ok;
} gp_md;

/* One device map. Set up by bind, then owned by the mirror thread. */
struct gp_dmap {
	uint32_t region;
	int ring;
	uint8_t *host;        /* the host region */
	uint64_t size;        /* its bytes, and the device copy's */
	CUdeviceptr dev;
	CUcontext ctx;        /* current at bind: the copy's context */
	CUdevice device;      /* its device (a primary context is named by it) */
	uint64_t period_ns;   /* atomic (a later bind may shorten it) */
	uint64_t due;         /* CLOCK_MONOTONIC of the next copy */
	int dead;             /* a driver call failed, or its context died: no longer mirrored */
	int gone;             /* its context died (its device copy with it) */
	int ending;           /* its context may be dying: in the final pass (gp_dm_mu) */
	/* Rings: the drainer's private state. */
	uint32_t slots, stride;
	uint64_t p;           /* first unresolved device ticket */
	uint32_t *acked;      /* per slot: device drops seen */
	uint8_t *data;        /* private copy of the data area */
	uint8_t ctl[GP_DM_CTL_LEN];
	uint64_t tailbuf;     /* source of the tail write, valid until the sync */
	uint64_t stalls;      /* tickets given up on (counted as device drops) */
	uint64_t stall_t, stall_since; /* the ticket waited on + 1, since when (0: none) */
	uint64_t skipped;     /* the ticket skipped in this pass + 1: not delivered if it lands late */
	uint64_t dropped0, devdropped0, shards0; /* counters at bind */
};

static struct gp_dmap gp_dmaps[GP_MAX_REGIONS];
static uint32_t gp_ndmaps;                  /* atomic: entries published */
static int8_t gp_dm_state[GP_MAX_REGIONS];  /* per region: 1 bound, -1 failed (logged) */
static uint32_t gp_dm_of[GP_MAX_REGIONS];   /* per bound region: its entry */
static uint64_t gp_dm_bytes, gp_dm_limit, gp_dm_stall_ns;
static pid_t gp_dm_pid;                     /* the process that bound (a fork child has no thread) */

static pthread_mutex_t gp_dm_mu = PTHREAD_MUTEX_INITIALIZER; /* held for a pass */
static pthread_cond_t gp_dm_cv;
static int gp_dm_started, gp_dm_stop;
static int gp_dm_ready; /* the thread's start: 1 relaxed, -1 it could not be (it exited) */

static void gp_md_init(void)
{
	if (gp_md.looked)
		return;
#define S(f, n) *(void **)&gp_md.f = gp_cuda_sym(n)
	S(ctx_get, "cuCtxGetCurrent");
	S(ctx_set, "cuCtxSetCurrent");
	S(ctx_device, "cuCtxGetDevice");
	S(alloc, "cuMemAlloc_v2");
	S(free, "cuMemFree_v2");
	S(htod, "cuMemcpyHtoD_v2");
	S(dtoh_async, "cuMemcpyDtoHAsync_v2");
	S(htod_async, "cuMemcpyHtoDAsync_v2");
	S(stream_create, "cuStreamCreate");
	S(stream_sync, "cuStreamSynchronize");
	S(capture_mode, "cuThreadExchangeStreamCaptureMode");
#undef S
	/* Without a relaxed capture mode the thread could break captures:
	 * no device maps then. */
	gp_md.ok = gp_md.ctx_get && gp_md.ctx_set && gp_md.ctx_device && gp_md.alloc && gp_md.free && gp_md.htod &&
		   gp_md.dtoh_async && gp_md.htod_async && gp_md.stream_create && gp_md.stream_sync && gp_md.capture_mode;
	gp_md.looked = 1;
}

static uint64_t gp_env_u64(const char *name, uint64_t def, uint64_t min)
{
	const char *s = getenv(name);
	if (s == NULL || s[0] == 0)
		return def;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end != 0 || v < min) {
		GP_TRACE("%s=%s is not a number >= %llu; using %llu", name, s, (unsigned long long)min,
			 (unsigned long long)def);
		return def;
	}
	return v;
}

/* gp_dm_shards sums the drop shards of a ring region whose bytes from
 * offset from on are at b. */
static uint64_t gp_dm_shards(const uint8_t *b, unsigned from)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < GPBR_RING_DROP_SHARDS; k++)
		n += rd64(b + gpbr_ring_drop_shard(k) - from);
	return n;
}

static uint64_t gp_period_ns(uint64_t us)
{
	uint64_t ns = us ? us * 1000u : 10 * GP_MS;
	if (us > 1000000u || ns > 1000 * GP_MS)
		return 1000 * GP_MS;
	return ns < GP_MS ? GP_MS : ns;
}

/* ---- the mirror thread -------------------------------------------------- */

/* The mirror's streams, one per context (under gp_dm_mu). */
static struct {
	CUcontext ctx;
	CUstream st;
} gp_dm_streams[GP_MAX_REGIONS];
static uint32_t gp_dm_nstreams;

/* gp_dm_enter makes m's context current on this thread and returns its
 * non-blocking stream (never the legacy default stream: that would
 * serialise with the application's work). */
static CUresult gp_dm_enter(const struct gp_dmap *m, CUstream *st)
{
	CUresult c = gp_md.ctx_set(m->ctx);
	if (c != CUDA_SUCCESS)
		return c;
	for (uint32_t i = 0; i < gp_dm_nstreams; i++)
		if (gp_dm_streams[i].ctx == m->ctx) {
			*st = gp_dm_streams[i].st;
			return CUDA_SUCCESS;
		}
	if (gp_dm_nstreams == GP_MAX_REGIONS)
		return CUDA_ERROR_INVALID_VALUE;
	c = gp_md.stream_create(st, GP_STREAM_NON_BLOCKING);
	if (c == CUDA_SUCCESS)
		gp_dm_streams[gp_dm_nstreams].ctx = m->ctx, gp_dm_streams[gp_dm_nstreams++].st = *st;
	return c;
}

#define GP_CU(call)                              \
	do {                                     \
		CUresult c_ = (call);            \
		if (c_ != CUDA_SUCCESS)          \
			return c_;               \
	} while (0)

/* gp_dm_slots queues a copy of the slots of tickets t..t+n-1 (at most two
 * pieces: the range may wrap) into the private data copy. */
static CUresult gp_dm_slots(struct gp_dmap *m, CUstream st, uint64_t t, uint64_t n)
{
	uint64_t s = t & (m->slots - 1), first = n < m->slots - s ? n : m->slots - s;
	uint64_t off = s * m->stride;
	GP_CU(gp_md.dtoh_async(m->data + off, m->dev + GPBR_DATA_OFFSET + off, first * m->stride, st));
	if (n > first)
		GP_CU(gp_md.dtoh_async(m->data, m->dev + GPBR_DATA_OFFSET, (n - first) * m->stride, st));
	return CUDA_SUCCESS;
}

static const struct gpbr_slot *gp_dm_slot(const struct gp_dmap *m, uint64_t t)
{
	return (const struct gpbr_slot *)(m->data + (t & (m->slots - 1)) * m->stride);
}

/* gp_dm_walk is R3: the first ticket from p not known to be published or
 * dropped (acked counts the drops), skipping one stalled for the timeout;
 * *pub says whether any was published. */
static uint64_t gp_dm_walk(struct gp_dmap *m, uint64_t n, uint64_t h1, uint64_t now, int *pub)
{
	const uint32_t *drops = (const uint32_t *)(m->data + (uint64_t)m->slots * m->stride);
	uint64_t t = m->p;
	for (; t < m->p + n; t++) {
		uint32_t s = (uint32_t)(t & (m->slots - 1));
		if (gp_dm_slot(m, t)->seq == t + 1) {
			*pub = 1;
			continue;
		}
		uint32_t c = drops[s] - m->acked[s];
		if (h1 > t && c > (h1 - 1 - t) / m->slots) {
			m->acked[s]++;
			continue;
		}
		if (m->stall_t != t + 1) { /* stall_t holds ticket+1: 0 is none */
			m->stall_t = t + 1, m->stall_since = now;
			break;
		}
		if (now - m->stall_since < gp_dm_stall_ns)
			break;
		GP_TRACE("device map %u: ticket %llu unresolved for %llu ms: skipped, counted as dropped", m->region,
			 (unsigned long long)t, (unsigned long long)(gp_dm_stall_ns / GP_MS));
		m->stalls++, m->stall_t = 0, m->skipped = t + 1;
	}
	return t;
}

/* gp_dm_drain is one drainer pass over a ring (R1-R5 of shm/doc.go). */
static CUresult gp_dm_drain(struct gp_dmap *m, CUstream st, uint64_t now)
{
	CUdeviceptr ctl = m->dev + GP_DM_CTL;
	GP_CU(gp_md.dtoh_async(m->ctl, ctl, GP_DM_CTL_LEN, st)); /* R1 */
	GP_CU(gp_md.stream_sync(st));
	uint64_t h0 = rd64(m->ctl + GPBR_RING_HEAD - GP_DM_CTL), p0 = m->p;
	if (h0 != m->p) {
		uint64_t n = h0 - m->p < m->slots ? h0 - m->p : m->slots;
		GP_CU(gp_dm_slots(m, st, m->p, n)); /* R2: slots, drop words, control block */
		uint64_t drops = (uint64_t)m->slots * m->stride;
		GP_CU(gp_md.dtoh_async(m->data + drops, m->dev + GPBR_DATA_OFFSET + drops, 4u * m->slots, st));
		GP_CU(gp_md.dtoh_async(m->ctl, ctl, GP_DM_CTL_LEN, st));
		GP_CU(gp_md.stream_sync(st));
		int pub = 0;
		m->skipped = 0;
		uint64_t q = gp_dm_walk(m, n, rd64(m->ctl + GPBR_RING_HEAD - GP_DM_CTL), now, &pub); /* R3 */
		if (pub) {
			/* R4: started after R2 completed, so every body whose seq
			 * R2 saw published is complete. */
			GP_CU(gp_dm_slots(m, st, m->p, q - m->p));
			GP_CU(gp_md.stream_sync(st));
			for (uint64_t t = m->p; t < q; t++) {
				const struct gpbr_slot *s = gp_dm_slot(m, t);
				if (s->seq != t + 1 || m->skipped == t + 1)
					continue; /* dropped, or skipped (counted) */
				if (s->len > m->stride - GPBR_SLOT_HEADER) {
					m->stalls++; /* a misbehaving producer: counted, not delivered */
					continue;
				}
				gpbr_ring_produce(m->host, s->type, (const uint8_t *)s + GPBR_SLOT_HEADER, s->len);
			}
		}
		m->p = q;
	}
	/* R5 */
	uint64_t dd = m->devdropped0 + rd64(m->ctl + GPBR_RING_DROPPED - GP_DM_CTL) - m->dropped0 +
		      gp_dm_shards(m->ctl, GP_DM_CTL) - m->shards0 + m->stalls;
	uint64_t ov = rd64(m->ctl + GPBR_RING_OVERSIZE - GP_DM_CTL); /* the copy started at the host's */
	uint64_t *hd = gpbr_u64(m->host, GPBR_RING_DEV_DROPPED), *ho = gpbr_u64(m->host, GPBR_RING_OVERSIZE);
	for (uint64_t v = __atomic_load_n(hd, __ATOMIC_RELAXED); v < dd;)
		if (__atomic_compare_exchange_n(hd, &v, dd, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			break;
	for (uint64_t v = __atomic_load_n(ho, __ATOMIC_RELAXED); v < ov;)
		if (__atomic_compare_exchange_n(ho, &v, ov, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			break;
	if (m->p != p0) {
		m->tailbuf = m->p;
		GP_CU(gp_md.htod_async(m->dev + GPBR_RING_TAIL, &m->tailbuf, 8, st));
		GP_CU(gp_md.stream_sync(st));
	}
	return CUDA_SUCCESS;
}

/* gp_dm_copy mirrors one map once. */
static CUresult gp_dm_copy(struct gp_dmap *m, uint64_t now)
{
	CUstream st = NULL;
	GP_CU(gp_dm_enter(m, &st));
	if (m->ring)
		return gp_dm_drain(m, st, now);
	GP_CU(gp_md.dtoh_async(m->host + GPBR_DATA_OFFSET, m->dev + GPBR_DATA_OFFSET, m->size - GPBR_DATA_OFFSET, st));
	return gp_md.stream_sync(st);
}

/* Which maps a pass mirrors. */
enum { GP_DM_DUE, GP_DM_ALL, GP_DM_ENDING };

/* gp_dm_pass mirrors the live maps that sel selects and returns when the
 * next one is due. Called with gp_dm_mu held. */
static uint64_t gp_dm_pass(int sel)
{
	uint64_t now = gp_now(), next = now + 1000 * GP_MS;
	uint32_t n = __atomic_load_n(&gp_ndmaps, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		struct gp_dmap *m = &gp_dmaps[i];
		if (m->dead || (sel == GP_DM_ENDING && !m->ending))
			continue;
		if (sel != GP_DM_DUE || now >= m->due) {
			CUresult c = gp_dm_copy(m, now);
			if (c != CUDA_SUCCESS) {
				m->dead = 1;
				__atomic_fetch_add(&gp_stats.devmap_stopped, 1, __ATOMIC_RELAXED);
				GP_TRACE("device map %u: driver error %d while mirroring: no longer mirrored", m->region, c);
				continue;
			}
			m->due = now + __atomic_load_n(&m->period_ns, __ATOMIC_RELAXED);
		}
		if (m->due < next)
			next = m->due;
	}
	return next;
}

static void *gp_dm_main(void *arg)
{
	(void)arg;
	int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED, for the thread's life */
	CUresult c = gp_md.capture_mode(&mode);
	pthread_mutex_lock(&gp_dm_mu);
	gp_dm_ready = c == CUDA_SUCCESS ? 1 : -1;
	pthread_cond_broadcast(&gp_dm_cv);
	if (c != CUDA_SUCCESS) {
		pthread_mutex_unlock(&gp_dm_mu);
		return NULL;
	}
	while (!gp_dm_stop) {
		uint64_t next = gp_dm_pass(GP_DM_DUE);
		struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
		while (!gp_dm_stop && gp_now() < next)
			if (pthread_cond_timedwait(&gp_dm_cv, &gp_dm_mu, &ts) == 0)
				break; /* a new map */
	}
	pthread_mutex_unlock(&gp_dm_mu);
	return NULL;
}

/* gp_dm_final runs passes over the maps of sel until nothing moves (a
 * full device ring refills) or the deadline, on an application thread:
 * relaxed capture mode (the thread may be capturing), and its current
 * context restored after. Called with gp_dm_mu held. */
static void gp_dm_final(int sel, uint64_t deadline)
{
	int mode, relaxed = gp_capture_relax(&mode);
	CUcontext cur = NULL;
	int saved = gp_md.ctx_get(&cur) == CUDA_SUCCESS;
	for (int i = 0; i < 16 && gp_now() < deadline; i++) {
		uint64_t moved = 0;
		uint32_t n = __atomic_load_n(&gp_ndmaps, __ATOMIC_ACQUIRE);
		for (uint32_t k = 0; k < n; k++)
			moved -= gp_dmaps[k].p;
		gp_dm_pass(sel);
		for (uint32_t k = 0; k < n; k++)
			moved += gp_dmaps[k].p;
		if (moved == 0)
			break;
	}
	if (saved)
		gp_md.ctx_set(cur);
	gp_capture_restore(relaxed, mode);
}

/* gp_dm_exit (atexit, registered at the first bind: it runs before the
 * runtime's teardown, registered earlier) stops the thread and drains what
 * is left, within GP_DM_EXIT_NS. */
static void gp_dm_exit(void)
{
	if (gp_dm_pid != getpid())
		return;
	uint64_t deadline = gp_now() + GP_DM_EXIT_NS;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts); /* pthread_mutex_timedlock's clock */
	ts.tv_nsec += (long)GP_DM_EXIT_NS;
	ts.tv_sec += ts.tv_nsec / 1000000000, ts.tv_nsec %= 1000000000;
	if (pthread_mutex_timedlock(&gp_dm_mu, &ts) != 0) {
		__atomic_store_n(&gp_dm_stop, 1, __ATOMIC_RELEASE);
		GP_TRACE("device maps: the mirror thread is busy at exit; no final pass");
		return;
	}
	__atomic_store_n(&gp_dm_stop, 1, __ATOMIC_RELEASE);
	gp_dm_final(GP_DM_ALL, deadline);
	pthread_cond_broadcast(&gp_dm_cv);
	pthread_mutex_unlock(&gp_dm_mu);
}

/* gp_dm_start starts the mirror thread: detached (it never keeps the
 * process alive), every signal blocked (the application's handlers never
 * run on it), named for ps and debuggers; it waits until the thread is in
 * relaxed capture mode (a failure there is final). */
static int gp_dm_start(void)
{
	if (gp_dm_ready < 0)
		return -ENOTSUP;
	pthread_condattr_t ca;
	pthread_attr_t a;
	sigset_t all, old;
	pthread_t th;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gp_dm_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(&th, &a, gp_dm_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (err)
		return -err;
	pthread_setname_np(th, "gpuprobe-mirror");
	pthread_mutex_lock(&gp_dm_mu);
	while (gp_dm_ready == 0)
		pthread_cond_wait(&gp_dm_cv, &gp_dm_mu);
	pthread_mutex_unlock(&gp_dm_mu);
	if (gp_dm_ready < 0)
		return -ENOTSUP;
	atexit(gp_dm_exit);
	gp_dm_started = 1;
	return 0;
}

/* ---- binding ------------------------------------------------------------ */

/* gp_dm_new allocates and fills the device copy of region i and hands it
 * to the mirror thread. */
static int gp_dm_new(uint32_t i, uint64_t period_us, uint64_t *dev, const char **why)
{
	struct gp_region *r = &gp_regions[i];
	uint64_t unused;
	if ((r->flags & GP_DESC_NOHEADER) || r->kind < GPBR_KIND_RING || r->kind > GPBR_KIND_PER_WARP_ARRAY)
		return *why = "not a ring or array region", -EINVAL;
	if (r->size > gp_dm_limit - gp_dm_bytes)
		return *why = "over GPUPROBE_DEVICE_MAP_LIMIT", -E2BIG;
	gp_md_init();
	if (!gp_md.ok)
		return *why = "driver entry point missing", -ENOENT;
	/* Mapped, and registered when the driver can: copies to registered
	 * memory are real DMA; a failed registration only makes them staged. */
	gp_region_dev(i, &unused);
	if (r->host == NULL)
		return *why = "mapping the region", -EFAULT;
	struct gpbr_header hc; /* checked and used as copied: the server may rewrite it */
	memcpy(&hc, r->host, sizeof hc);
	if (gpbr_check(&hc, r->size, r->kind) != GPBR_OK)
		return *why = "region header (gpbr_check)", -EPROTO;
	struct gp_dmap *m = &gp_dmaps[gp_ndmaps];
	memset(m, 0, sizeof *m);
	m->region = i, m->ring = r->kind == GPBR_KIND_RING, m->host = r->host, m->size = r->size;
	if (gp_md.ctx_get(&m->ctx) != CUDA_SUCCESS || m->ctx == NULL || gp_md.ctx_device(&m->device) != CUDA_SUCCESS)
		return *why = "no current context (cuCtxGetCurrent, cuCtxGetDevice)", -ENOENT;
	if (m->ring) {
		m->slots = hc.max_entries, m->stride = hc.stride;
		m->acked = malloc(4u * (size_t)m->slots);
		m->data = malloc(hc.data_size);
		if (m->acked == NULL || m->data == NULL) {
			free(m->acked), free(m->data);
			return *why = "malloc", -ENOMEM;
		}
	}
	/* The copy starts as the host region is now: the collector's seeded
	 * values, and for a ring its position and counters as baselines. */
	CUresult c = gp_md.alloc(&m->dev, r->size);
	if (c == CUDA_SUCCESS)
		c = gp_md.htod(m->dev, r->host, r->size);
	if (c == CUDA_SUCCESS && m->ring) {
		m->p = __atomic_load_n(gpbr_u64(r->host, GPBR_RING_TAIL), __ATOMIC_ACQUIRE);
		for (uint32_t s = 0; s < m->slots; s++)
			m->acked[s] = *gpbr_ring_slot_drops(r->host, s);
		m->dropped0 = *gpbr_u64(r->host, GPBR_RING_DROPPED);
		m->devdropped0 = *gpbr_u64(r->host, GPBR_RING_DEV_DROPPED);
		m->shards0 = gp_dm_shards(r->host, 0); /* the device copy starts as these bytes */
	}
	if (c == CUDA_SUCCESS && !gp_dm_started && gp_dm_start() != 0)
		c = -EAGAIN;
	if (c != CUDA_SUCCESS) {
		if (m->dev)
			gp_md.free(m->dev);
		free(m->acked), free(m->data);
		return *why = "device copy (cuMemAlloc, cuMemcpyHtoD) or the mirror thread", c;
	}
	m->period_ns = gp_period_ns(period_us);
	gp_dm_bytes += r->size;
	*dev = m->dev;
	/* Published, then the thread woken so that it copies it at once. */
	pthread_mutex_lock(&gp_dm_mu);
	gp_dm_of[i] = gp_ndmaps;
	__atomic_store_n(&gp_ndmaps, gp_ndmaps + 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&gp_dm_cv);
	pthread_mutex_unlock(&gp_dm_mu);
	return 0;
}

GP_HIDDEN int gp_devmap_bind(const char *api, uint32_t i, uint64_t period_us, uint64_t *dev)
{
	const char *why = "";
	int err;
	if (gp_dm_pid == 0) {
		gp_dm_pid = getpid();
		gp_dm_limit = gp_env_u64("GPUPROBE_DEVICE_MAP_LIMIT", GP_DM_LIMIT, 0);
		gp_dm_stall_ns = gp_env_u64("GPUPROBE_DEVICE_MAP_STALL_MS", GP_DM_STALL_NS / GP_MS, 1) * GP_MS;
	}
	if (gp_dm_state[i] > 0 && gp_dm_pid == getpid()) {
		struct gp_dmap *m = &gp_dmaps[gp_dm_of[i]];
		if (__atomic_load_n(&m->gone, __ATOMIC_ACQUIRE)) { /* its device copy is freed: never hand it out */
			GP_TRACE("%s: region %u: its device map's context was destroyed: the global stays 0", api, i);
			return -ENODEV;
		}
		uint64_t p = gp_period_ns(period_us);
		if (p < __atomic_load_n(&m->period_ns, __ATOMIC_RELAXED))
			__atomic_store_n(&m->period_ns, p, __ATOMIC_RELAXED);
		*dev = m->dev;
		return 0;
	}
	if (gp_dm_state[i] < 0)
		return -ENOENT;
	if (gp_dm_pid != getpid()) /* a fork child: no mirror thread, the parent's state is not its own */
		err = -ECHILD, why = "fork child";
	else
		err = gp_dm_new(i, period_us, dev, &why);
	if (err == 0) {
		gp_dm_state[i] = 1;
		__atomic_fetch_add(&gp_stats.devmap_bound, 1, __ATOMIC_RELAXED);
		GP_TRACE("%s: region %u (kind %u, %llu bytes) mirrored from device memory every %llu us", api, i,
			 gp_regions[i].kind, (unsigned long long)gp_regions[i].size,
			 (unsigned long long)(gp_period_ns(period_us) / 1000u));
		return 0;
	}
	gp_dm_state[i] = -1;
	__atomic_fetch_add(&gp_stats.devmap_unbound, 1, __ATOMIC_RELAXED);
	GP_TRACE("%s: region %u cannot be a device map (%s, %d): its globals stay 0, the GPU programs see it as absent",
		 api, i, why, err);
	return err;
}

/* ---- contexts torn down (ctxgone.c) -------------------------------------- */

GP_HIDDEN int gp_devmap_ctx_ending(CUcontext ctx, CUdevice dev)
{
	if (__atomic_load_n(&gp_ndmaps, __ATOMIC_ACQUIRE) == 0 || gp_dm_pid != getpid())
		return 0;
	/* Blocks for at most the thread's current pass. */
	pthread_mutex_lock(&gp_dm_mu);
	uint32_t n = __atomic_load_n(&gp_ndmaps, __ATOMIC_ACQUIRE), k = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct gp_dmap *m = &gp_dmaps[i];
		m->ending = !m->dead && (ctx != NULL ? m->ctx == ctx : m->device == dev);
		k += (uint32_t)m->ending;
	}
	if (k == 0) {
		pthread_mutex_unlock(&gp_dm_mu);
		return 0;
	}
	gp_dm_final(GP_DM_ENDING, gp_now() + GP_DM_EXIT_NS);
	return 1;
}

/* gp_dm_forget_stream drops the stream of a dead context: its handle may
 * come back for a new context, which needs a stream of its own. */
static void gp_dm_forget_stream(CUcontext ctx)
{
	for (uint32_t i = 0; i < gp_dm_nstreams; i++)
		if (gp_dm_streams[i].ctx == ctx) {
			gp_dm_streams[i] = gp_dm_streams[--gp_dm_nstreams];
			return;
		}
}

GP_HIDDEN void gp_devmap_ctx_ended(int gone)
{
	uint32_t n = __atomic_load_n(&gp_ndmaps, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		struct gp_dmap *m = &gp_dmaps[i];
		if (!m->ending)
			continue;
		m->ending = 0;
		if (!gone)
			continue;
		m->dead = 1;
		__atomic_store_n(&m->gone, 1, __ATOMIC_RELEASE);
		gp_dm_forget_stream(m->ctx);
		GP_TRACE("device map %u: its context was released or destroyed after a final pass: no longer mirrored",
			 m->region);
	}
	pthread_mutex_unlock(&gp_dm_mu);
}
