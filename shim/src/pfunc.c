/*
 * pfunc.c - the patched-function table: which function handles launch
 * with the hidden launch-id parameter, and where it goes. Filled at kernel
 * lookups (patch.c, under its lock); read lock-free at every launch
 * (gp_pfunc_find). Entries are never removed: a concurrent launch may read
 * one.
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

GP_HIDDEN void gp_pfunc_set(uint64_t handle, uint32_t index, uint32_t offset, uint32_t one_in, uint32_t max_rate)
{
	uint32_t h = gp_hash(handle);
	for (uint32_t i = 0; i < 64 && handle; i++) {
		struct gp_pfunc *e = &gp_pfuncs[(h + i) % GP_PFUNCS];
		uint64_t k = __atomic_load_n(&e->handle, __ATOMIC_ACQUIRE);
		if (k != handle && k != 0)
			continue;
		if (k == 0) {
			/* Fill the entry before publishing its handle. */
			uint64_t zero = 0;
			e->info.index = index, e->info.offset = offset, e->info.one_in = one_in;
			e->info.max_rate = max_rate, e->info.gap_ns = max_rate ? 1000000000u / max_rate : 0;
			__atomic_store_n(&e->info.next_ns, 0, __ATOMIC_RELAXED);
			if (!__atomic_compare_exchange_n(&e->handle, &zero, handle, 0, __ATOMIC_ACQ_REL,
							 __ATOMIC_ACQUIRE) &&
			    zero != handle)
				continue;
		}
		return;
	}
	GP_TRACE("patched-function table full: %p launches without its launch id", (void *)handle);
}

GP_HIDDEN struct gp_pfunc_info *gp_pfunc_find(uint64_t handle)
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
