/*
 * sass.h - what sass.c (the Sanitizer API, sampling, patching) and
 * sass_ctx.c (a context's patch image and record ring) share.
 */
#ifndef GPUPROBE_SHIM_SASS_H
#define GPUPROBE_SHIM_SASS_H

#include <pthread.h>

#include "gp.h"

/* The Sanitizer ABI the SASS route uses (sanitizer_callbacks.h and
 * sanitizer_patching.h of CUDA 11.8 to 13.0; scripts/gpu/sass.sh checks the
 * offsets against the header on the GPU machine). */
#define GP_SAN_DOMAIN_RESOURCE 3
#define GP_SAN_DOMAIN_LAUNCH 5
#define GP_SAN_CBID_CTX_DESTROY 4 /* SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING */
#define GP_SAN_CBID_LAUNCH_BEGIN 1
#define GP_SAN_BLOCK_ENTER 1
#define GP_SAN_BLOCK_EXIT 2
#define GP_SAN_GLOBAL_MEMORY_ACCESS 3
/* Sanitizer_LaunchData offsets. */
#define GP_SAN_LD_CONTEXT 0
#define GP_SAN_LD_HSTREAM 16
#define GP_SAN_LD_MODULE 24
#define GP_SAN_LD_FUNCTION 32
#define GP_SAN_LD_NAME 40
#define GP_SAN_LD_HLAUNCH 96
/* Sanitizer_ResourceContextData.context. (Resource callback ids past 7
 * moved in CUDA 13: MODULE_UNLOAD_STARTING is 9 in 11.8, 10 in 13.0, so
 * unloads are taken from the shim's own wrappers: gp_sass_unloaded.) */
#define GP_SAN_RC_CONTEXT 0

/* Layout shared with sass_phases.cu. */
#define GP_SP_SLOTS 256
#define GP_SP_STRIPES 32
#define GP_SP_RING 4096
#define GP_SP_SCRATCH_BYTES (256u * 64u * 16u)
#define GP_SP_TABLE_BYTES (GP_SP_SLOTS * (1u + GP_SP_STRIPES) * 32u)
#define GP_SP_RING_BYTES (64u + GP_SP_RING * 48u)
static const uint64_t gp_sp_magic[3] = {0x4750535053435230ull, 0x4750535053435231ull, 0x4750535053435232ull};

typedef void (*gp_san_cb)(void *ud, uint32_t domain, uint32_t cbid, const void *data);
/* libsanitizer-public.so's entry points (sass.c loads them). */
struct gp_san {
	void *lib, *sub;
	int (*subscribe)(void **sub, gp_san_cb cb, void *ud);
	int (*unsubscribe)(void *sub);
	int (*enable_domain)(uint32_t on, void *sub, uint32_t domain);
	int (*enable_callback)(uint32_t on, void *sub, uint32_t domain, uint32_t cbid);
	int (*alloc)(CUcontext ctx, void **p, size_t n);
	int (*alloc_host)(CUcontext ctx, void **p, size_t n);
	int (*memset)(void *p, int v, size_t n, void *stream);
	int (*add_patches)(const void *image, CUcontext ctx);
	int (*patch_instr)(uint32_t id, CUmodule m, const char *fn);
	int (*patch_module)(CUmodule m);
	int (*unpatch_module)(CUmodule m);
	int (*set_launch_data)(void *launch, CUfunction f, void *stream, const void *ud);
};
extern GP_HIDDEN struct gp_san gp_san;

/* Per context: the patch image (its globals bound to our allocations) is
 * added once; state 1 ready, -1 refused, 0 waiting for the collector's
 * module (user: 1 asked, the thread binds it; 2 bound, in uimg; -1 none:
 * the built-in image). */
#define GP_SASS_CTXS 16
struct gp_sass_ctx {
	CUcontext ctx;
	int state;
	int user;     /* atomic */
	uint8_t *uimg; /* the collector's module, bound (sass_user.c) */
	size_t un;
	int mem;    /* it has the memory-access function */
	const struct gp_sass_targets *targets; /* its programs' kernels */
	int custom; /* the context runs the collector's module */
	int asked;  /* the collector's module was asked for */
	void *mem_scratch, *mem_table, *mem_ring; /* sanitizerAlloc'd, once */
	volatile uint64_t *ring; /* host-pinned: [0] head, records from byte 64 */
	uint64_t tail;           /* drain thread only */
};
extern GP_HIDDEN struct gp_sass_ctx gp_sass_ctxs[GP_SASS_CTXS];
extern GP_HIDDEN pthread_mutex_t gp_sass_mu;       /* setup and patching, never the common path */
extern GP_HIDDEN pthread_mutex_t gp_sass_drain_mu; /* the drain thread and the exit drain */

extern GP_HIDDEN int gp_sass_user_wanted; /* ask for the collector's module (WELCOME's GP_SET_SASS_PROGRAMS; 0 once it has none) */
extern GP_HIDDEN uint32_t gp_sass_flush_us; /* how often the thread drains, µs */
/* Counted outcomes (GPUPROBE_TRACE prints them at exit). */
struct gp_sass_stats {
	uint64_t callbacks, sampled, patches, unpatches, refused, records, lost, torn;
	uint64_t filtered, allowed, excluded; /* launches the filter kept out; kernels the collector named and not */
};
extern GP_HIDDEN struct gp_sass_stats gp_sass_stats;

static inline void gp_sass_count(uint64_t *c, uint64_t n) { __atomic_fetch_add(c, n, __ATOMIC_RELAXED); }

/* sass_filter.c: the collector's kernel filter (GP_SET_SASS_FILTER). */
GP_HIDDEN void gp_sass_filter_set(int on);
GP_HIDDEN int gp_sass_filter(CUfunction f, const char *name, uint64_t id, uint32_t gen);
GP_HIDDEN void gp_sass_filter_pass(void);

/* sass_ctx.c */
GP_HIDDEN struct gp_sass_ctx *gp_sass_ctx(CUcontext ctx);
GP_HIDDEN void gp_sass_ctx_gone(CUcontext ctx);
GP_HIDDEN void *gp_sass_thread(void *arg);
GP_HIDDEN void gp_sass_exit(void);

#endif
