/*
 * patch_async.c - patching off the application's threads.
 *
 * With GPUPROBE_PATCH_WAIT_MS unset or 0 (the default) a load that may be
 * patched loads the application's image unchanged and returns at once:
 * gp_patch_begin keeps a copy of the image (gp_patch_keep) and
 * gp_module_loaded queues it with the module handle and the calling
 * thread's context (gp_patch_loaded). The shim's patch thread then asks
 * the collector (PATCH, as the synchronous path does), makes the context
 * current and loads the patched image there (the driver's JIT runs on this
 * thread; with GPUPROBE_CACHE_DIR the compiled image may come from the
 * node's cache instead: cache.c), binds its globals, looks its kernels
 * up, and swaps them in:
 * every handle of the application's module that the application looked up
 * (or looks up later: gp_async_lookup) gets a patched-function entry whose
 * swap is the patched kernel's handle. A launch reads that entry
 * lock-free (wrap_launch.c) and launches the patched kernel with the
 * hidden launch id. Until the swap the entry is PENDING: launches run the
 * original kernel and their records say so (GP_LAUNCH_F_PRESWAP with
 * UNPROBED: windows only). A failed patch or JIT turns the entries OFF
 * (fail open: windows only, as for a kernel that is not patched).
 *
 * The application's unload of its module (gp_async_unloaded) while the
 * job is queued or compiling marks it dropped under gp_swap_mu, which the
 * swap holds too, so the patch thread never swaps into a freed module: it
 * unloads the patched module instead. An unload after the swap unloads
 * the patched module with it.
 *
 * A nonzero GPUPROBE_PATCH_WAIT_MS patches in place on the loading thread
 * instead (patch.c: the patched image is loaded as the application's
 * module, so launches probe from the first), for checks that need it.
 *
 * Graph kernel nodes and the SASS route see swapped kernels as unpatched
 * (gp_pfunc_find): a node built from the original function runs it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gp.h"

struct gp_job {
	struct gp_job *next;
	const char *api;
	int lib;
	int dropped; /* gp_swap_mu: the application unloaded the module */
	uint32_t slot;
	uint16_t cache;               /* enum gp_patch_cache */
	uint64_t request_ns, compile_ns; /* for its Patch record */
	uint64_t module;
	CUcontext ctx;
	struct gp_image img; /* img.data: a copy, freed with the job */
};

struct gp_look {
	uint64_t handle;
	char *name;
};

/* One module of the application patched asynchronously; gp_swap_mu. */
struct gp_amod {
	uint64_t module; /* atomic: key */
	uint32_t state;  /* GP_PF_PENDING, READY (swapped) or OFF */
	int lib;
	struct gp_job *job;    /* in flight */
	uint64_t patched;      /* the patched module, once swapped */
	uint32_t nk;           /* its kernels (gp_patch_kernels) */
	const struct gp_pkernel *ks;
	uint64_t *fns;         /* their handles in the patched module */
	struct gp_look *looks; /* the application's handles of this module */
	uint32_t nlooks, cap;
};
#define GP_AMODS 1024
static struct gp_amod gp_amods[GP_AMODS];
static pthread_mutex_t gp_swap_mu = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t gp_q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gp_q_cv = PTHREAD_COND_INITIALIZER;
static struct gp_job *gp_q_head, **gp_q_tail = &gp_q_head;
static int gp_q_started;

static __thread struct gp_job *gp_kept;

static int gp_async_on;
static pthread_once_t gp_async_once = PTHREAD_ONCE_INIT;

/* Outcomes, for the trace summary and the tests. */
static uint64_t gp_n_swapped, gp_n_unpatched, gp_n_failed, gp_n_dropped;

static void gp_async_env(void)
{
	const char *w = getenv("GPUPROBE_PATCH_WAIT_MS");
	gp_async_on = w == NULL || w[0] == 0 || strtoul(w, NULL, 10) == 0;
}

GP_HIDDEN int gp_patch_async(void)
{
	pthread_once(&gp_async_once, gp_async_env);
	return gp_async_on;
}

static uint32_t gp_ahash(uint64_t h) { return (uint32_t)((h * 0x9E3779B97F4A7C15ull) >> 54); }

/* gp_amod_find returns module's slot (creating it when asked); gp_swap_mu. */
static struct gp_amod *gp_amod_find(uint64_t module, int create)
{
	uint32_t h = gp_ahash(module) % GP_AMODS;
	for (uint32_t i = 0; i < 64 && module; i++) {
		struct gp_amod *a = &gp_amods[(h + i) % GP_AMODS];
		if (a->module == module)
			return a;
		if (a->module != 0)
			continue;
		if (!create)
			return NULL;
		__atomic_store_n(&a->module, module, __ATOMIC_RELEASE);
		return a;
	}
	return NULL;
}

static void gp_job_free(struct gp_job *j)
{
	if (j != NULL)
		free((void *)j->img.data);
	free(j);
}

/* The driver's entry points, looked up once under patch.c's lock (before
 * the first job, so no request holds it yet). */
static pthread_once_t gp_drv_once = PTHREAD_ONCE_INIT;
static void gp_drv_locked(void)
{
	pthread_mutex_lock(&gp_patch_mu);
	gp_drv_init();
	pthread_mutex_unlock(&gp_patch_mu);
}

GP_HIDDEN void gp_patch_keep(const char *api, int lib, const struct gp_image *img)
{
	pthread_once(&gp_drv_once, gp_drv_locked);
	gp_job_free(gp_kept);
	gp_kept = NULL;
	struct gp_job *j = calloc(1, sizeof *j);
	void *copy = j ? malloc(img->size) : NULL;
	if (copy == NULL) {
		free(j);
		GP_TRACE("%s: no memory for a copy of the image (%zu bytes): not patched", api, img->size);
		return;
	}
	memcpy(copy, img->data, img->size);
	j->api = api, j->lib = lib, j->img = *img;
	j->img.ptr = j->img.data = copy, j->img.path = NULL;
	gp_kept = j;
}

static void *gp_patch_main(void *arg);

/* gp_enqueue hands j to the patch thread, starting it at the first job. */
static int gp_enqueue(struct gp_job *j)
{
	pthread_mutex_lock(&gp_q_mu);
	if (!gp_q_started) {
		pthread_attr_t a;
		pthread_t t;
		sigset_t all, old;
		sigfillset(&all);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_sigmask(SIG_SETMASK, &all, &old); /* no signal of the application lands there */
		if (pthread_create(&t, &a, gp_patch_main, NULL) == 0) {
			gp_q_started = 1;
			pthread_setname_np(t, "gpuprobe-patch");
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
		if (!gp_q_started) {
			pthread_mutex_unlock(&gp_q_mu);
			return -1;
		}
	}
	j->next = NULL;
	*gp_q_tail = j;
	gp_q_tail = &j->next;
	pthread_cond_signal(&gp_q_cv);
	pthread_mutex_unlock(&gp_q_mu);
	return 0;
}

/* gp_looks_off turns every looked-up handle of a off; gp_swap_mu. */
static void gp_looks_off(struct gp_amod *a)
{
	const struct gp_pfunc_info off = {.state = GP_PF_OFF};
	for (uint32_t i = 0; i < a->nlooks; i++)
		gp_pfunc_put(a->looks[i].handle, &off);
}

static void gp_amod_reset(struct gp_amod *a)
{
	gp_looks_off(a);
	for (uint32_t i = 0; i < a->nlooks; i++)
		free(a->looks[i].name);
	free(a->looks);
	free(a->fns);
	a->looks = NULL, a->nlooks = a->cap = 0, a->fns = NULL, a->ks = NULL, a->nk = 0;
	a->patched = 0, a->state = GP_PF_OFF;
	if (a->job != NULL)
		a->job->dropped = 1;
	a->job = NULL;
}

GP_HIDDEN void gp_patch_loaded(uint64_t module, CUresult r)
{
	struct gp_job *j = gp_kept;
	gp_kept = NULL;
	if (j == NULL)
		return;
	CUcontext ctx = NULL;
	if (r != CUDA_SUCCESS || module == 0 || gp_drv.ctx_get == NULL || gp_drv.ctx_get(&ctx) != CUDA_SUCCESS ||
	    ctx == NULL) {
		gp_job_free(j);
		return;
	}
	j->module = module, j->ctx = ctx;
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = gp_amod_find(module, 1);
	if (a != NULL) {
		gp_amod_reset(a); /* a handle the driver reused */
		a->state = GP_PF_PENDING, a->lib = j->lib, a->job = j;
		j->slot = (uint32_t)(a - gp_amods);
	}
	pthread_mutex_unlock(&gp_swap_mu);
	if (a == NULL) {
		GP_TRACE("%s: asynchronous-patch table full: module %p not patched", j->api, (void *)module);
		gp_job_free(j);
		return;
	}
	__atomic_store_n(&gp_any_patched, 1, __ATOMIC_RELEASE);
	const char *api = j->api; /* once queued, j is the patch thread's to free */
	if (gp_enqueue(j) != 0) {
		pthread_mutex_lock(&gp_swap_mu);
		gp_amod_reset(a);
		pthread_mutex_unlock(&gp_swap_mu);
		GP_TRACE("%s: no patch thread: module %p not patched", j->api, (void *)module);
		gp_job_free(j);
		return;
	}
	GP_TRACE("%s: module %p loaded as it is; its patched image compiles on the patch thread", api,
		 (void *)module);
}

/* gp_apply sets handle's entry from a's state for kernel name; gp_swap_mu. */
static void gp_apply(struct gp_amod *a, uint64_t handle, const char *name)
{
	struct gp_pfunc_info in = {.state = GP_PF_OFF, .amod = (uint32_t)(a - gp_amods) + 1};
	if (a->state == GP_PF_PENDING)
		in.state = GP_PF_PENDING;
	for (uint32_t i = 0; a->state == GP_PF_READY && i < a->nk; i++)
		if (a->fns[i] != 0 && strcmp(a->ks[i].name, name) == 0) {
			in.index = a->ks[i].index, in.offset = a->ks[i].offset;
			in.one_in = a->ks[i].one_in, in.max_rate = a->ks[i].max_rate;
			in.swap = a->fns[i], in.state = GP_PF_READY;
			/* Launch records name the handle launched. */
			gp_name_copy(handle, a->fns[i]);
			break;
		}
	gp_pfunc_put(handle, &in);
}

/* gp_look_add remembers handle as name of a (once); gp_swap_mu. */
static void gp_look_add(struct gp_amod *a, uint64_t handle, const char *name)
{
	for (uint32_t i = 0; i < a->nlooks; i++)
		if (a->looks[i].handle == handle && strcmp(a->looks[i].name, name) == 0)
			return;
	if (a->nlooks == a->cap) {
		uint32_t cap = a->cap ? a->cap * 2 : 8;
		struct gp_look *l = realloc(a->looks, cap * sizeof *l);
		if (l == NULL)
			return;
		a->looks = l, a->cap = cap;
	}
	char *n = strdup(name);
	if (n != NULL)
		a->looks[a->nlooks++] = (struct gp_look){handle, n};
}

GP_HIDDEN int gp_async_lookup(uint64_t handle, uint64_t module, const char *name)
{
	if (!gp_patch_async())
		return 0;
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = gp_amod_find(module, 0);
	int mine = a != NULL && a->state != GP_PF_OFF;
	if (mine) {
		gp_look_add(a, handle, name);
		gp_apply(a, handle, name);
	}
	pthread_mutex_unlock(&gp_swap_mu);
	return mine;
}

GP_HIDDEN int gp_async_alias(uint64_t from, uint64_t to)
{
	if (!gp_patch_async())
		return 0;
	const struct gp_pfunc_info *p = gp_pfunc_get(from);
	uint32_t slot = p ? __atomic_load_n(&p->amod, __ATOMIC_ACQUIRE) : 0;
	if (slot == 0)
		return 0;
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = &gp_amods[slot - 1];
	const char *name = NULL;
	for (uint32_t i = 0; i < a->nlooks && name == NULL; i++)
		if (a->looks[i].handle == from)
			name = a->looks[i].name;
	if (name != NULL && a->state != GP_PF_OFF) {
		char *n = strdup(name); /* gp_look_add may move the list */
		if (n != NULL) {
			gp_look_add(a, to, n);
			gp_apply(a, to, n);
			free(n);
		}
	}
	pthread_mutex_unlock(&gp_swap_mu);
	return name != NULL;
}

/* gp_unload_patched unloads a patched module of the patch thread's. */
static void gp_unload_patched(uint64_t m, int lib)
{
	if (lib && gp_drv.lib_unload)
		gp_drv.lib_unload((CUlibrary)m);
	else if (!lib && gp_drv.mod_unload)
		gp_drv.mod_unload((CUmodule)m);
	gp_patch_unloaded(m); /* its device-only map memory */
}

GP_HIDDEN void gp_async_unloaded(uint64_t module)
{
	if (!gp_patch_async())
		return;
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = gp_amod_find(module, 0);
	uint64_t patched = a ? a->patched : 0;
	int lib = a ? a->lib : 0, inflight = a && a->job != NULL;
	if (a != NULL)
		gp_amod_reset(a);
	pthread_mutex_unlock(&gp_swap_mu);
	if (inflight)
		GP_TRACE("module %p unloaded while its patched image compiles: the swap is dropped", (void *)module);
	if (patched != 0) {
		gp_unload_patched(patched, lib);
		GP_TRACE("module %p unloaded: its patched module %p with it", (void *)module, (void *)patched);
	}
}

/* gp_job_record writes j's Patch record (record/patch.go): the
 * collector's cost and the JIT's, per module, for the self-metrics. */
static void gp_job_record(const struct gp_job *j, uint16_t outcome, uint32_t kernels)
{
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (ring == NULL)
		return;
	struct gp_rec_patch r = {
		.h = {.type = GP_REC_PATCH, .version = GP_REC_VERSION, .size = sizeof r},
		.module = j->module,
		.request_ns = j->request_ns,
		.compile_ns = j->compile_ns,
		.pid = gp_pid(),
		.kernels = kernels,
		.outcome = outcome,
		.cache = j->cache,
	};
	gp_produce(ring, GP_REC_PATCH, &r, sizeof r);
}

/* gp_job_fail turns j's module off (fail open), counted in *n; gp_swap_mu
 * not held. */
static void gp_job_fail(struct gp_job *j, uint64_t *n, const char *why, int code)
{
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = &gp_amods[j->slot];
	if (!j->dropped && a->job == j) {
		gp_looks_off(a);
		a->state = GP_PF_OFF, a->job = NULL;
	}
	pthread_mutex_unlock(&gp_swap_mu);
	__atomic_fetch_add(n, 1, __ATOMIC_RELAXED);
	gp_job_record(j, n == &gp_n_failed ? GP_PATCH_FAILED : GP_PATCH_UNPATCHED, 0);
	GP_TRACE("%s: module %p: %s (%s, %d): its kernels run unpatched (windows only)", j->api, (void *)j->module,
		 n == &gp_n_failed ? "asynchronous patch failed" : "not patched", why, code);
}

/* gp_job_swap publishes patched module m's kernels for j's module, unless
 * it was unloaded meanwhile; 0 when swapped. */
static int gp_job_swap(struct gp_job *j, uint64_t m, uint64_t *fns, uint32_t nk, const struct gp_pkernel *ks)
{
	pthread_mutex_lock(&gp_swap_mu);
	struct gp_amod *a = &gp_amods[j->slot];
	int ok = !j->dropped && a->job == j;
	if (ok) {
		a->patched = m, a->fns = fns, a->nk = nk, a->ks = ks;
		a->state = GP_PF_READY, a->job = NULL;
		for (uint32_t i = 0; i < a->nlooks; i++)
			gp_apply(a, a->looks[i].handle, a->looks[i].name);
	}
	pthread_mutex_unlock(&gp_swap_mu);
	return ok ? 0 : -1;
}

/* gp_job_run patches j's module: see the top of the file. */
static void gp_job_run(struct gp_job *j)
{
	struct gp_patch pp;
	uint64_t t0 = gp_now(), m = 0;
	pthread_mutex_lock(&gp_swap_mu);
	int dropped = j->dropped;
	pthread_mutex_unlock(&gp_swap_mu);
	if (dropped) {
		__atomic_fetch_add(&gp_n_dropped, 1, __ATOMIC_RELAXED);
		gp_job_record(j, GP_PATCH_DROPPED, 0);
		GP_TRACE("%s: module %p unloaded before its patch began: dropped", j->api, (void *)j->module);
		return;
	}
	CUresult r = gp_drv.ctx_set ? gp_drv.ctx_set(j->ctx) : (CUresult)-1;
	if (r != CUDA_SUCCESS)
		return gp_job_fail(j, &gp_n_failed, "making the module's context current", r);
	int asked = gp_patch_request(j->api, j->lib, &j->img, &pp);
	uint64_t t1 = gp_now();
	j->request_ns = t1 - t0;
	if (asked != 0)
		return gp_job_fail(j, &gp_n_unpatched, "the collector sent no patched image", 0);
	r = gp_cache_load(j->lib, pp.image, pp.image_size, &m, &j->cache);
	uint64_t t2 = gp_now();
	j->compile_ns = t2 - t1;
	munmap(pp.image, pp.image_size);
	const char *why = "loading the patched image (JIT)";
	uint32_t nk = 0;
	uint64_t *fns = NULL;
	const struct gp_pkernel *ks = NULL;
	if (r == CUDA_SUCCESS && m != 0 && (r = gp_patch_bind(&pp, m, &why)) == 0 &&
	    (ks = gp_patch_kernels(m, &nk)) != NULL && (fns = calloc(nk, sizeof *fns)) != NULL) {
		for (uint32_t i = 0; i < nk; i++) {
			CUresult c = (CUresult)-1;
			if (j->lib && gp_drv.lib_kernel)
				c = gp_drv.lib_kernel((CUkernel *)&fns[i], (CUlibrary)m, ks[i].name);
			else if (!j->lib && gp_drv.mod_function)
				c = gp_drv.mod_function((CUfunction *)&fns[i], (CUmodule)m, ks[i].name);
			if (c != CUDA_SUCCESS)
				fns[i] = 0;
		}
	}
	free(pp.payload);
	if (fns == NULL) {
		if (r == CUDA_SUCCESS && m != 0)
			gp_unload_patched(m, j->lib); /* loaded, not bound */
		return gp_job_fail(j, &gp_n_failed, ks == NULL && r == CUDA_SUCCESS ? "no kernels" : why, r);
	}
	if (gp_job_swap(j, m, fns, nk, ks) != 0) {
		free(fns);
		gp_unload_patched(m, j->lib);
		__atomic_fetch_add(&gp_n_dropped, 1, __ATOMIC_RELAXED);
		gp_job_record(j, GP_PATCH_DROPPED, 0);
		GP_TRACE("%s: module %p was unloaded while its patched image compiled: swap dropped", j->api,
			 (void *)j->module);
		return;
	}
	__atomic_fetch_add(&gp_n_swapped, 1, __ATOMIC_RELAXED);
	gp_job_record(j, GP_PATCH_SWAPPED, nk);
	GP_TRACE("%s: module %p: patched module %p swapped in (%u kernels; collector %.1f ms, JIT %.1f ms)", j->api,
		 (void *)j->module, (void *)m, nk, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
}

static void *gp_patch_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&gp_q_mu);
		while (gp_q_head == NULL)
			pthread_cond_wait(&gp_q_cv, &gp_q_mu);
		struct gp_job *j = gp_q_head;
		gp_q_head = j->next;
		if (gp_q_head == NULL)
			gp_q_tail = &gp_q_head;
		pthread_mutex_unlock(&gp_q_mu);
		gp_job_run(j);
		gp_job_free(j);
		GP_TRACE("patch thread: %llu swapped, %llu not patched, %llu failed, %llu dropped",
			 (unsigned long long)__atomic_load_n(&gp_n_swapped, __ATOMIC_RELAXED),
			 (unsigned long long)__atomic_load_n(&gp_n_unpatched, __ATOMIC_RELAXED),
			 (unsigned long long)__atomic_load_n(&gp_n_failed, __ATOMIC_RELAXED),
			 (unsigned long long)__atomic_load_n(&gp_n_dropped, __ATOMIC_RELAXED));
	}
	return NULL;
}
