/*
 * sass_filter.c - which kernels the SASS route may probe when the collector
 * filters them (the WELCOME's GP_SET_SASS_FILTER: kernels::include/exclude,
 * sampling::device_one_in). The patterns are Go regular expressions
 * matched against mangled and demangled names, which only the collector
 * has, so the first launch of a function the route would sample files its
 * name in a queue (a copy into a static slot: no allocation, lock or
 * syscall in the launch callback) and the route's thread asks the
 * collector (PATCH with load API 4) at its next pass. Until the answer the
 * function is not probed; one the answer does not name never is. A query
 * that gets no answer (the collector went away) leaves its functions
 * unknown, filed again at a later launch.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gp.h"
#include "sass.h"

/* A function's verdict, with the unload generation it holds for, in one
 * word: gen << 32 | state. */
enum { GP_SF_UNKNOWN, GP_SF_PENDING, GP_SF_PROBE, GP_SF_SKIP };
#define GP_SF_FUNCS 16384 /* open addressing, GP_SF_PROBES tries */
#define GP_SF_PROBES 16
#define GP_SF_QUEUE 64 /* agent.SASSMaxQuery */
#define GP_SF_NAME 4096 /* agent.MaxKernelName */
#define GP_SF_BATCH 60000u /* bytes of names a query carries (one frame) */

static struct gp_sf_func {
	uint64_t f; /* CUfunction, 0 = free (atomic) */
	uint64_t v; /* gen << 32 | state (atomic) */
} gp_sf_funcs[GP_SF_FUNCS];

static struct gp_sf_query {
	uint32_t state; /* 0 free, 1 being filled, 2 filed (atomic) */
	uint32_t len;
	struct gp_sf_func *e;
	uint64_t f; /* the function asked about: the entry may be taken over meanwhile */
	uint64_t v; /* the entry's word when filed */
	char name[GP_SF_NAME];
} gp_sf_queue[GP_SF_QUEUE];

static int gp_sf_on;          /* atomic: the collector filters */
static uint32_t gp_sf_one_in; /* atomic: its device_one_in */

static inline uint64_t gp_sf_word(uint32_t gen, uint32_t state) { return (uint64_t)gen << 32 | state; }

/* gp_sass_filter_set: whether the collector filters the route's kernels
 * (each WELCOME says again: a reconnect's collector may not). */
GP_HIDDEN void gp_sass_filter_set(int on) { __atomic_store_n(&gp_sf_on, on, __ATOMIC_RELEASE); }

/* gp_sf_entry finds f's entry, taking a free one or one of an older
 * generation; NULL when its tries are all taken. */
static struct gp_sf_func *gp_sf_entry(uint64_t f, uint32_t gen)
{
	uint32_t h = (uint32_t)((f * 0x9E3779B97F4A7C15ull) >> 40);
	for (uint32_t i = 0; i < GP_SF_PROBES; i++) {
		struct gp_sf_func *e = &gp_sf_funcs[(h + i) % GP_SF_FUNCS];
		uint64_t cur = __atomic_load_n(&e->f, __ATOMIC_ACQUIRE);
		if (cur == f)
			return e;
		uint64_t v = __atomic_load_n(&e->v, __ATOMIC_ACQUIRE);
		int stale = cur != 0 && (uint32_t)(v >> 32) != gen && (uint32_t)v != GP_SF_PENDING;
		if ((cur == 0 || stale) &&
		    __atomic_compare_exchange_n(&e->f, &cur, f, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return e;
		if (cur == f)
			return e;
	}
	return NULL;
}

/* gp_sf_file copies name (n bytes) into a free queue slot for the thread
 * to ask about; 0 when the queue is full. */
static int gp_sf_file(struct gp_sf_func *e, uint64_t f, uint64_t v, const char *name, size_t n)
{
	for (int i = 0; i < GP_SF_QUEUE; i++) {
		struct gp_sf_query *q = &gp_sf_queue[i];
		uint32_t free_ = 0;
		if (!__atomic_compare_exchange_n(&q->state, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			continue;
		memcpy(q->name, name, n + 1);
		q->len = (uint32_t)n, q->e = e, q->f = f, q->v = v;
		__atomic_store_n(&q->state, 2, __ATOMIC_RELEASE);
		return 1;
	}
	return 0;
}

/* gp_sf_out counts a launch the filter keeps out (only the trace's
 * summary reads it: no shared write per launch otherwise). */
static inline int gp_sf_out(void)
{
	if (GP_UNLIKELY(gp_trace_fd >= 0))
		gp_sass_count(&gp_sass_stats.filtered, 1);
	return 0;
}

/* gp_sass_filter says whether the route may probe this launch of f (name,
 * launch id): always, unless the collector filters; then when it named f
 * and the launch is its one in device_one_in. In the launch callback. */
GP_HIDDEN int gp_sass_filter(CUfunction f, const char *name, uint64_t id, uint32_t gen)
{
	if (!__atomic_load_n(&gp_sf_on, __ATOMIC_ACQUIRE))
		return 1;
	struct gp_sf_func *e = gp_sf_entry((uint64_t)f, gen);
	if (e == NULL)
		return gp_sf_out();
	uint64_t v = __atomic_load_n(&e->v, __ATOMIC_ACQUIRE);
	if ((uint32_t)(v >> 32) == gen && (uint32_t)v == GP_SF_PROBE) {
		uint32_t n = __atomic_load_n(&gp_sf_one_in, __ATOMIC_RELAXED);
		return n <= 1 || gp_sample_keep(id, n) ? 1 : gp_sf_out();
	}
	uint64_t p = gp_sf_word(gen, GP_SF_PENDING);
	if (((uint32_t)(v >> 32) != gen || (uint32_t)v == GP_SF_UNKNOWN) &&
	    __atomic_compare_exchange_n(&e->v, &v, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		size_t n = name ? strnlen(name, GP_SF_NAME) : 0;
		if (n == 0 || n == GP_SF_NAME) /* no name the collector could match */
			__atomic_store_n(&e->v, gp_sf_word(gen, GP_SF_SKIP), __ATOMIC_RELEASE);
		else if (!gp_sf_file(e, (uint64_t)f, p, name, n)) /* the queue is full: asked at a later launch */
			__atomic_store_n(&e->v, gp_sf_word(gen, GP_SF_UNKNOWN), __ATOMIC_RELEASE);
	}
	return gp_sf_out();
}

/* gp_sf_answer reads the PATCHED answer: which of the n queued names
 * (queue indexes idx) the route may probe, and device_one_in. */
static void gp_sf_answer(const uint8_t *p, uint32_t plen, const int *idx, uint32_t n)
{
	uint8_t yes[GP_SF_QUEUE] = {0};
	uint32_t nk = rd32(p + 4), off = 32;
	for (uint32_t i = 0; i < nk && off + 12 <= plen; i++) {
		uint32_t at = rd32(p + off), len = rd32(p + off + 8);
		if (len > plen - off - 12)
			break;
		if (at < n)
			yes[at] = 1;
		off += 12 + len;
	}
	__atomic_store_n(&gp_sf_one_in, rd32(p + 12), __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < n; i++) {
		struct gp_sf_query *q = &gp_sf_queue[idx[i]];
		/* An entry another function took over meanwhile is asked about
		 * again, for that function. */
		int mine = __atomic_load_n(&q->e->f, __ATOMIC_ACQUIRE) == q->f;
		uint64_t v = q->v, w = gp_sf_word((uint32_t)(v >> 32), !mine ? GP_SF_UNKNOWN : yes[i] ? GP_SF_PROBE : GP_SF_SKIP);
		__atomic_compare_exchange_n(&q->e->v, &v, w, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		gp_sass_count(yes[i] ? &gp_sass_stats.allowed : &gp_sass_stats.excluded, 1);
		GP_TRACE("sass: kernel %s: %s", q->name, yes[i] ? "probed" : "not probed (kernels::include/exclude)");
		__atomic_store_n(&q->state, 0, __ATOMIC_RELEASE);
	}
}

/* gp_sass_filter_pass asks the collector about the filed names (the
 * route's thread, every pass). */
GP_HIDDEN void gp_sass_filter_pass(void)
{
	int idx[GP_SF_QUEUE];
	uint32_t n = 0;
	size_t bytes = 0;
	for (int i = 0; i < GP_SF_QUEUE; i++)
		if (__atomic_load_n(&gp_sf_queue[i].state, __ATOMIC_ACQUIRE) == 2 &&
		    bytes + gp_sf_queue[i].len + 1 <= GP_SF_BATCH)
			idx[n++] = i, bytes += gp_sf_queue[i].len + 1;
	if (n == 0)
		return;
	char *buf = malloc(bytes);
	uint8_t *p = NULL;
	uint32_t plen = 0;
	if (buf != NULL) {
		size_t at = 0;
		for (uint32_t i = 0; i < n; i++) {
			memcpy(buf + at, gp_sf_queue[idx[i]].name, gp_sf_queue[idx[i]].len + 1);
			at += gp_sf_queue[idx[i]].len + 1;
		}
		p = gp_patch_query(buf, bytes, &plen);
		free(buf);
	}
	if (p != NULL) {
		gp_sf_answer(p, plen, idx, n);
		free(p);
		return;
	}
	/* No answer: unknown again, asked at a later launch. */
	for (uint32_t i = 0; i < n; i++) {
		struct gp_sf_query *q = &gp_sf_queue[idx[i]];
		uint64_t v = q->v;
		__atomic_compare_exchange_n(&q->e->v, &v, gp_sf_word((uint32_t)(v >> 32), GP_SF_UNKNOWN), 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		__atomic_store_n(&q->state, 0, __ATOMIC_RELEASE);
	}
}
