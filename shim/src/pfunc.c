/*
 * pfunc.c - the patched-function table: which function handles launch
 * with the hidden launch-id parameter, where it goes, and (for a module
 * patched off the application's threads, patch_async.c) which patched
 * kernel to launch instead. Filled at kernel lookups and swaps (patch.c,
 * patch_async.c, under their locks); read lock-free at every launch
 * (gp_pfunc_get). Entries are never removed: a concurrent launch may read
 * one; a swap or an unload changes its state.
 */
#define _GNU_SOURCE
#include "gp.h"

/* ---- patched functions (read at launch) --------------------------------- */

struct gp_pfunc {
	uint64_t handle; /* atomic: CUfunction or CUkernel */
	struct gp_pfunc_info info;
};
#define GP_PFUNCS 4096
static struct gp_pfunc gp_pfuncs[GP_PFUNCS];

static uint32_t gp_hash(uint64_t h) { return (uint32_t)((h * 0x9E3779B97F4A7C15ull) >> 52); }

/* gp_pfunc_fill writes in's fields into e, state last: a launch that reads
 * the new state reads the fields written before it. An entry that was
 * READY goes OFF first, so that a launch reading it meanwhile runs the
 * original rather than half-written fields. */
static void gp_pfunc_fill(struct gp_pfunc_info *e, const struct gp_pfunc_info *in)
{
	__atomic_store_n(&e->state, GP_PF_OFF, __ATOMIC_RELEASE);
	e->index = in->index, e->offset = in->offset, e->one_in = in->one_in;
	e->max_rate = in->max_rate, e->gap_ns = in->max_rate ? 1000000000u / in->max_rate : 0;
	e->amod = in->amod;
	__atomic_store_n(&e->next_ns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->swap, in->swap, __ATOMIC_RELAXED);
	__atomic_store_n(&e->state, in->state, __ATOMIC_RELEASE);
}

/* gp_pfunc_slot returns handle's entry, claiming a free one (NULL: full). */
static struct gp_pfunc *gp_pfunc_slot(uint64_t handle, int *fresh)
{
	uint32_t h = gp_hash(handle);
	for (uint32_t i = 0; i < 64 && handle; i++) {
		struct gp_pfunc *e = &gp_pfuncs[(h + i) % GP_PFUNCS];
		uint64_t k = __atomic_load_n(&e->handle, __ATOMIC_ACQUIRE);
		if (k == handle) {
			*fresh = 0;
			return e;
		}
		if (k != 0)
			continue;
		/* A slot never filled is OFF (zero): a launch finding it
		 * before it is filled runs the original. */
		uint64_t zero = 0;
		if (__atomic_compare_exchange_n(&e->handle, &zero, handle, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			*fresh = 1;
			return e;
		}
		if (zero == handle) {
			*fresh = 0;
			return e;
		}
	}
	GP_TRACE("patched-function table full: %p launches without its launch id", (void *)handle);
	return NULL;
}

GP_HIDDEN void gp_pfunc_put(uint64_t handle, const struct gp_pfunc_info *in)
{
	int fresh;
	struct gp_pfunc *e = gp_pfunc_slot(handle, &fresh);
	if (e != NULL)
		gp_pfunc_fill(&e->info, in);
}

GP_HIDDEN void gp_pfunc_set(uint64_t handle, uint32_t index, uint32_t offset, uint32_t one_in, uint32_t max_rate)
{
	int fresh;
	struct gp_pfunc *e = gp_pfunc_slot(handle, &fresh);
	const struct gp_pfunc_info in = {
		.index = index, .offset = offset, .one_in = one_in, .max_rate = max_rate, .state = GP_PF_READY};
	/* A handle looked up again keeps its entry (and its rate state),
	 * unless it was reset since (a swap, an unload). */
	if (e != NULL && (fresh || __atomic_load_n(&e->info.state, __ATOMIC_ACQUIRE) != GP_PF_READY ||
			  __atomic_load_n(&e->info.swap, __ATOMIC_RELAXED) != 0))
		gp_pfunc_fill(&e->info, &in);
}

GP_HIDDEN struct gp_pfunc_info *gp_pfunc_get(uint64_t handle)
{
	uint32_t h = gp_hash(handle);
	for (uint32_t i = 0; i < 64; i++) {
		struct gp_pfunc *e = &gp_pfuncs[(h + i) % GP_PFUNCS];
		uint64_t k = __atomic_load_n(&e->handle, __ATOMIC_ACQUIRE);
		if (k == handle)
			return &e->info;
		if (k == 0)
			return NULL;
	}
	return NULL;
}

GP_HIDDEN struct gp_pfunc_info *gp_pfunc_find(uint64_t handle)
{
	struct gp_pfunc_info *p = gp_pfunc_get(handle);
	if (p == NULL || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != GP_PF_READY ||
	    __atomic_load_n(&p->swap, __ATOMIC_RELAXED) != 0)
		return NULL;
	return p;
}
