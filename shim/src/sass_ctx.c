/*
 * sass_ctx.c - the SASS route per CUDA context (sass.c samples and
 * patches): the patch image added once (the built-in one, or the
 * collector's module once sass_user.c has bound it), its globals bound to
 * our allocations, and the thread that copies the records its host-pinned
 * ring receives into the launch ring, as record.Exec.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sass.h"
#include "sass_image.h"

static void gp_sass_drain(struct gp_sass_ctx *c, void *out);

/* gp_sass_poke writes v over every 8-aligned magic in a patch image (a
 * global's initial value): the hits. */
GP_HIDDEN int gp_sass_poke(uint8_t *img, size_t n, uint64_t magic, uint64_t v)
{
	int hits = 0;
	for (size_t i = 0; i + 8 <= n; i += 8)
		if (memcmp(img + i, &magic, 8) == 0)
			memcpy(img + i, &v, 8), hits++;
	return hits;
}

/* gp_sass_bind writes the three allocations into a copy of the image:
 * every cubin of the fatbin holds each magic once. -1 when one is missing. */
static int gp_sass_bind(uint8_t *img, size_t n, const uint64_t val[3])
{
	for (int k = 0; k < 3; k++)
		if (gp_sass_poke(img, n, gp_sp_magic[k], val[k]) == 0)
			return -1;
	return 0;
}

/* gp_sass_image_copy returns a copy of the patch image (GPUPROBE_SASS_IMAGE,
 * at most 16 MiB, or the built-in one) for gp_sass_bind to write into. */
static uint8_t *gp_sass_image_copy(size_t *n)
{
	const char *path = getenv("GPUPROBE_SASS_IMAGE");
	if (path == NULL || path[0] == 0) {
		uint8_t *img = malloc(sizeof gp_sass_image);
		if (img != NULL)
			memcpy(img, gp_sass_image, sizeof gp_sass_image), *n = sizeof gp_sass_image;
		return img;
	}
	FILE *f = fopen(path, "rbe");
	uint8_t *img = f ? malloc(16u << 20) : NULL;
	*n = img ? fread(img, 1, 16u << 20, f) : 0;
	if (f)
		fclose(f);
	if (*n == 0 || *n == 16u << 20) {
		GP_TRACE("sass: GPUPROBE_SASS_IMAGE %s: unreadable, empty or over 16 MiB", path);
		free(img);
		return NULL;
	}
	return img;
}

static int gp_sass_setup(struct gp_sass_ctx *c)
{
	/* Made once per context: a second image (after a refused one) reuses them. */
	void **scratch = &c->mem_scratch, **table = &c->mem_table, **ring = &c->mem_ring;
	if ((*scratch == NULL && gp_san.alloc(c->ctx, scratch, GP_SP_SCRATCH_BYTES)) ||
	    (*table == NULL && gp_san.alloc(c->ctx, table, GP_SP_TABLE_BYTES)) ||
	    (*ring == NULL && gp_san.alloc_host(c->ctx, ring, GP_SP_RING_BYTES))) {
		GP_TRACE("sass: allocation in context %p failed", (void *)c->ctx);
		return -1;
	}
	if (gp_san.memset(*scratch, 0, GP_SP_SCRATCH_BYTES, NULL) || gp_san.memset(*table, 0, GP_SP_TABLE_BYTES, NULL)) {
		GP_TRACE("sass: clearing the tables failed");
		return -1;
	}
	memset(*ring, 0, GP_SP_RING_BYTES);
	size_t n = c->un;
	uint8_t *img = c->user == 2 ? c->uimg : gp_sass_image_copy(&n);
	c->custom = c->user == 2, c->uimg = NULL;
	if (img == NULL)
		return -1;
	const uint64_t val[3] = {(uint64_t)(uintptr_t)*scratch, (uint64_t)(uintptr_t)*table, (uint64_t)(uintptr_t)*ring};
	int r = gp_sass_bind(img, n, val) ? -1 : gp_san.add_patches(img, c->ctx);
	free(img); /* the driver copied the module */
	if (r != 0) {
		/* A device the image has no cubin for (sm_100 and newer) lands here. */
		GP_TRACE("sass: sanitizerAddPatches refused the %s patch image (%d) in context %p",
			 c->custom ? "collector's" : "built-in", r, (void *)c->ctx);
		return -1;
	}
	c->ring = *ring;
	return 0;
}

/* gp_sass_ctx returns the context's state, setting it up at its first
 * sampled launch (the collector's module, once sass.c's thread has bound
 * it for the context: the launches before are not sampled; else the
 * built-in image); under gp_sass_mu. */
GP_HIDDEN struct gp_sass_ctx *gp_sass_ctx(CUcontext ctx)
{
	for (int i = 0; i < GP_SASS_CTXS; i++) {
		struct gp_sass_ctx *c = &gp_sass_ctxs[i];
		if (c->ctx == NULL) {
			c->ctx = ctx, c->user = -1;
			if (__atomic_load_n(&gp_sass_user_wanted, __ATOMIC_RELAXED)) {
				c->asked = 1;
				__atomic_store_n(&c->user, 1, __ATOMIC_RELEASE); /* the thread binds it */
				return NULL;
			}
		}
		if (c->ctx != ctx)
			continue;
		if (c->state == 0 && __atomic_load_n(&c->user, __ATOMIC_ACQUIRE) != 1) {
			int r = gp_sass_setup(c);
			if (r != 0 && !c->custom && !c->asked) {
				/* The built-in image was refused (no cubin for this
				 * device, e.g. Blackwell): the collector's module,
				 * kernel_phases alone if it has no programs, is
				 * assembled for the device instead. */
				GP_TRACE("sass: asking the collector for kernel_phases' module for this device");
				c->asked = 1;
				__atomic_store_n(&c->user, 1, __ATOMIC_RELEASE);
				return NULL;
			}
			__atomic_store_n(&c->state, r == 0 ? 1 : -1, __ATOMIC_RELEASE);
		}
		return c->state > 0 ? c : NULL;
	}
	return NULL;
}

/* gp_sass_user_pass binds the collector's module for the contexts that
 * wait for it (sass.c's thread: driver calls are not allowed in the
 * Sanitizer's callbacks). The context may die meanwhile: the result is
 * kept only if the slot still holds it and still waits. */
static void gp_sass_user_pass(void)
{
	for (int i = 0; i < GP_SASS_CTXS; i++) {
		struct gp_sass_ctx *c = &gp_sass_ctxs[i];
		if (__atomic_load_n(&c->user, __ATOMIC_ACQUIRE) != 1)
			continue;
		pthread_mutex_lock(&gp_sass_mu);
		CUcontext ctx = c->user == 1 ? c->ctx : NULL;
		pthread_mutex_unlock(&gp_sass_mu);
		uint8_t *img = NULL;
		size_t n = 0;
		const struct gp_sass_targets *tg = NULL;
		int mem = 0, r = ctx ? gp_sass_user_bind(ctx, &img, &n, &mem, &tg) : -1;
		if (r != 0)
			__atomic_store_n(&gp_sass_user_wanted, 0, __ATOMIC_RELAXED);
		pthread_mutex_lock(&gp_sass_mu);
		if (c->ctx == ctx && c->user == 1) {
			c->uimg = img, c->un = n, c->mem = mem, c->targets = tg, img = NULL;
			__atomic_store_n(&c->user, r == 0 ? 2 : -1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&gp_sass_mu);
		free(img);
	}
}

/* gp_sass_ctx_gone forgets a context that dies (CONTEXT_DESTROY_STARTING):
 * its pinned ring is freed with it, so the drain thread must never read it
 * again: the ring is drained one last time and dropped under the drain
 * lock. */
GP_HIDDEN void gp_sass_ctx_gone(CUcontext ctx)
{
	pthread_mutex_lock(&gp_sass_mu);
	pthread_mutex_lock(&gp_sass_drain_mu);
	for (int i = 0; i < GP_SASS_CTXS; i++) {
		struct gp_sass_ctx *c = &gp_sass_ctxs[i];
		if (c->ctx != ctx)
			continue;
		void *out = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
		if (c->state > 0 && out != NULL)
			gp_sass_drain(c, out);
		__atomic_store_n(&c->state, 0, __ATOMIC_RELEASE);
		free(c->uimg);
		c->ring = NULL, c->tail = 0, c->ctx = NULL, c->uimg = NULL, c->custom = 0, c->asked = 0;
		c->mem_scratch = c->mem_table = c->mem_ring = NULL; /* freed with the context */
		__atomic_store_n(&c->user, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&gp_sass_drain_mu);
	pthread_mutex_unlock(&gp_sass_mu);
}

/* gp_sass_drain copies a context's finished records into the launch ring
 * as Exec records. A record is whole when its seq word is its index + 1;
 * one the GPU overwrote (the ring lapped) is counted lost. */
static void gp_sass_drain(struct gp_sass_ctx *c, void *out)
{
	volatile uint64_t *ring = c->ring;
	uint64_t head = __atomic_load_n((uint64_t *)&ring[0], __ATOMIC_ACQUIRE);
	if (head - c->tail > GP_SP_RING) {
		gp_sass_count(&gp_sass_stats.lost, head - c->tail - GP_SP_RING);
		c->tail = head - GP_SP_RING;
	}
	for (; c->tail < head; c->tail++) {
		volatile uint64_t *r = ring + 8 + 6 * (c->tail % GP_SP_RING);
		if (__atomic_load_n((uint64_t *)&r[5], __ATOMIC_ACQUIRE) != c->tail + 1)
			break; /* reserved, not written yet */
		struct gp_rec_exec e = {
			.h = {.type = GP_REC_EXEC, .version = GP_REC_VERSION, .size = sizeof e},
			.launch_id = r[0],
			.start_ns = r[1],
			.end_ns = r[2],
			.blocks = r[3],
			.threads = r[4],
		};
		if (__atomic_load_n((uint64_t *)&r[5], __ATOMIC_ACQUIRE) != c->tail + 1 || e.blocks == 0 ||
		    e.end_ns < e.start_ns) {
			gp_sass_count(&gp_sass_stats.torn, 1);
			continue;
		}
		gp_produce(out, GP_REC_EXEC, &e, sizeof e);
		gp_sass_count(&gp_sass_stats.records, 1);
	}
}

/* gp_sass_drain_all drains every context (the drain thread, the exit). */
static void gp_sass_drain_all(void *out)
{
	pthread_mutex_lock(&gp_sass_drain_mu);
	for (int i = 0; i < GP_SASS_CTXS; i++) {
		struct gp_sass_ctx *c = &gp_sass_ctxs[i];
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) > 0)
			gp_sass_drain(c, out);
	}
	pthread_mutex_unlock(&gp_sass_drain_mu);
}

GP_HIDDEN void *gp_sass_thread(void *arg)
{
	(void)arg;
	struct timespec ts = {.tv_sec = gp_sass_flush_us / 1000000, .tv_nsec = (long)(gp_sass_flush_us % 1000000) * 1000L};
	for (;;) {
		nanosleep(&ts, NULL);
		void *out = gp_session();
		if (out == NULL)
			continue;
		gp_sass_filter_pass();
		gp_sass_user_pass();
		gp_sass_drain_all(out);
	}
	return NULL;
}

/* gp_sass_exit drains what finished kernels wrote since the last pass
 * (atexit: an application that synchronized before exit loses nothing). */
GP_HIDDEN void gp_sass_exit(void)
{
	void *out = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (out != NULL)
		gp_sass_drain_all(out);
	/* CUDA tears its contexts down after this (its atexit handler was
	 * registered first, its destructors run later), freeing the rings:
	 * the drain thread must not read them again. */
	pthread_mutex_lock(&gp_sass_drain_mu);
	for (int i = 0; i < GP_SASS_CTXS; i++)
		__atomic_store_n(&gp_sass_ctxs[i].state, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&gp_sass_drain_mu);
}
