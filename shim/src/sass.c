/*
 * sass.c - the SASS route: device windows measured by probes inside kernels
 * that ship as machine code only (cuBLAS, cuDNN, PyTorch and Triton cubins),
 * patched in through NVIDIA's Compute Sanitizer API (libsanitizer-public.so).
 *
 * The patch functions (shim/patch/sass_phases.cu, built ahead of time for
 * sm_70..sm_90 into sass_image.h) run at every block's entry and exit; the
 * launch id is their userdata (0: not sampled, they return at once). They
 * aggregate the launch on the GPU and write one record per launch into a
 * ring in host-pinned memory; a thread of ours copies each into the launch
 * ring as a record.Exec (type 11), and the launch record carries
 * GP_LAUNCH_F_SASS so that the collector waits for it.
 *
 * Cost control: a module is patched only for a burst of its launches
 * (sanitizerPatchModule before the burst's first launch,
 * sanitizerUnpatchModule at the module's first launch after it), and the
 * process starts at most rate / GP_SASS_BURST bursts a second, so at most
 * rate launches a second are sampled in all: rate is sampling::
 * device_max_per_second (WELCOME settings, 0: no limit), a cap per kernel
 * that the whole process thus keeps too. A patch and unpatch cost about 0.5 ms
 * of the launching thread, and patched short kernels run 2-6x slower;
 * unpatched they run as they were. Patching around every sampled launch,
 * 100 a second per module, made a PyTorch training step 2.13x slower
 * (measured on an H200): bursts bound the toggles. When the collector filters
 * kernels (kernels::include/exclude, device_one_in: sass_filter.c), only the
 * launches it lets through are sampled; one it keeps out inside a burst
 * runs in the patched module with its probes skipped.
 *
 * The Sanitizer API must be subscribed before the application's first CUDA
 * call (subscribed later, it never calls back), so a process opts in with
 * GPUPROBE_SASS=1 (the constructor subscribes) and the collector's
 * probes::sass turns it on; otherwise the subscription is released at the
 * handshake (no more callbacks). The Sanitizer API holds the driver's one
 * callback subscriber, and releasing it does not give it back: in a process
 * that opted in, CUPTI's device windows (cupti.c) are unavailable
 * (cuptiSubscribe fails with 39, seen on an H200). The route pauses
 * when the collector goes away (gp_sass_pause: modules are unpatched at
 * their next launch) and resumes when a reconnect's collector asks for it.
 *
 * GPUPROBE_SASS_IMAGE=FILE replaces the built-in patch image (a fatbin or
 * cubin built from shim/patch/sass_phases.cu, e.g. for an architecture the
 * built-in one lacks).
 *
 * Fails open: no library, no cubin for the device, a refused patch or
 * allocation leaves the kernel unpatched, logged once (GP_TRACE) and counted
 * in gp_sass_stats. Kernels the PTX route patched (gp_pfunc_find), the
 * shim's own (__gpuprobe_*) and graph launches are never sampled here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp.h"
#include "sass.h"

/* Sanitizer state shared with sass_ctx.c (sass.h). */
GP_HIDDEN struct gp_san gp_san;
GP_HIDDEN struct gp_sass_ctx gp_sass_ctxs[GP_SASS_CTXS];
GP_HIDDEN pthread_mutex_t gp_sass_mu = PTHREAD_MUTEX_INITIALIZER;
GP_HIDDEN pthread_mutex_t gp_sass_drain_mu = PTHREAD_MUTEX_INITIALIZER;
GP_HIDDEN int gp_sass_user_wanted;
GP_HIDDEN uint32_t gp_sass_flush_us = 50000;
GP_HIDDEN struct gp_sass_stats gp_sass_stats;

/* Per module: patched or not, and what is left of its burst; gen is
 * gp_sass_gen when that was last known (an unload anywhere makes every
 * module's state unknown: its handle may now name another module). */
#define GP_SASS_MODS 4096
struct gp_sass_mod {
	uint64_t mod; /* CUmodule, 0 = free (atomic) */
	int64_t left; /* launches left in its burst (atomic) */
	int patched;  /* under gp_sass_mu; read relaxed */
	int refused;
	uint32_t gen; /* atomic */
};
static uint32_t gp_sass_gen; /* atomic: bumped by every module or library unload */
static struct gp_sass_mod gp_sass_mods[GP_SASS_MODS];

/* Launches sampled in a burst. */
#define GP_SASS_BURST 10

GP_HIDDEN int gp_sass_on;
static int gp_sass_app; /* atomic: the application's profiler holds CUPTI (gp_sass_aside) */
static uint64_t gp_sass_gap_ns = 100000000; /* between bursts: 10 a second (rate 100) */
static uint64_t gp_sass_next_ns;            /* the next burst may start at or after this (atomic) */

/* ---- loading the library --------------------------------------------- */

static int gp_sass_try(const char *path)
{
	gp_san.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return gp_san.lib != NULL;
}

static int gp_sass_load(const char **why)
{
	const char *env = getenv("GPUPROBE_SANITIZER");
	if (env && env[0])
		return gp_sass_try(env) ? 0 : (*why = "GPUPROBE_SANITIZER could not be loaded", -1);
	static const char *const paths[] = {"libsanitizer-public.so",
					    "/usr/local/cuda/compute-sanitizer/libsanitizer-public.so"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		if (gp_sass_try(paths[i]))
			return 0;
	/* Beside libgpuprobe.so (gpuprobe install-shim can put it there). */
	Dl_info di;
	char path[512];
	const char *slash;
	if (dladdr((void *)gp_sass_load, &di) && di.dli_fname && (slash = strrchr(di.dli_fname, '/')) != NULL) {
		snprintf(path, sizeof path, "%.*s/libsanitizer-public.so", (int)(slash - di.dli_fname), di.dli_fname);
		if (gp_sass_try(path))
			return 0;
	}
	*why = "no libsanitizer-public.so (set GPUPROBE_SANITIZER to its path)";
	return -1;
}

#define GP_SAN_SYM(field, name) (*(void **)&gp_san.field = gp_real_dlsym(gp_san.lib, name))

static int gp_sass_syms(void)
{
	GP_SAN_SYM(subscribe, "sanitizerSubscribe");
	GP_SAN_SYM(unsubscribe, "sanitizerUnsubscribe");
	GP_SAN_SYM(enable_domain, "sanitizerEnableDomain");
	GP_SAN_SYM(enable_callback, "sanitizerEnableCallback");
	GP_SAN_SYM(alloc, "sanitizerAlloc");
	GP_SAN_SYM(alloc_host, "sanitizerAllocHost");
	GP_SAN_SYM(memset, "sanitizerMemset");
	GP_SAN_SYM(add_patches, "sanitizerAddPatches");
	GP_SAN_SYM(patch_instr, "sanitizerPatchInstructions");
	GP_SAN_SYM(patch_module, "sanitizerPatchModule");
	GP_SAN_SYM(unpatch_module, "sanitizerUnpatchModule");
	GP_SAN_SYM(set_launch_data, "sanitizerSetLaunchCallbackData");
	return gp_san.subscribe && gp_san.unsubscribe && gp_san.enable_domain && gp_san.enable_callback &&
			       gp_san.alloc && gp_san.alloc_host &&
			       gp_san.memset && gp_san.add_patches && gp_san.patch_instr && gp_san.patch_module &&
			       gp_san.unpatch_module && gp_san.set_launch_data
		       ? 0
		       : -1;
}






/* ---- per module ------------------------------------------------------- */

static struct gp_sass_mod *gp_sass_mod(uint64_t mod)
{
	uint32_t h = (uint32_t)((mod * 0x9E3779B97F4A7C15ull) >> 52);
	for (uint32_t i = 0; i < 64; i++) {
		struct gp_sass_mod *m = &gp_sass_mods[(h + i) % GP_SASS_MODS];
		uint64_t k = __atomic_load_n(&m->mod, __ATOMIC_ACQUIRE);
		if (k == mod)
			return m;
		if (k == 0 && __atomic_compare_exchange_n(&m->mod, &k, mod, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return m;
		if (k == mod)
			return m;
	}
	return NULL;
}

/* gp_sass_burst says whether a launch of module m is in its burst (and
 * counts it); gp_sass_sample whether it is sampled: in its burst, or when
 * it starts one (the process's first launch at or
 * after gp_sass_next_ns does, and moves it one gap on: of threads
 * launching at once exactly one wins). */
static int gp_sass_burst(struct gp_sass_mod *m)
{
	return __atomic_load_n(&m->left, __ATOMIC_RELAXED) > 0 && __atomic_sub_fetch(&m->left, 1, __ATOMIC_RELAXED) >= 0;
}

static int gp_sass_sample(struct gp_sass_mod *m)
{
	if (gp_sass_burst(m))
		return 1;
	uint64_t now = gp_now(), next = __atomic_load_n(&gp_sass_next_ns, __ATOMIC_RELAXED);
	if (now < next || !__atomic_compare_exchange_n(&gp_sass_next_ns, &next, now + gp_sass_gap_ns, 0,
						      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return 0;
	__atomic_store_n(&m->left, GP_SASS_BURST - 1, __ATOMIC_RELAXED);
	return 1;
}

/* gp_sass_patch patches or unpatches a module (with context c's patch
 * functions); under gp_sass_mu. */
static int gp_sass_patch(const struct gp_sass_ctx *c, struct gp_sass_mod *m, CUmodule mod, int on)
{
	if (m->patched == on)
		return 0;
	if (!on) {
		gp_san.unpatch_module(mod);
		m->patched = 0;
		gp_sass_count(&gp_sass_stats.unpatches, 1);
		return 0;
	}
	int custom = c != NULL && c->custom;
	int r = gp_san.patch_instr(GP_SAN_BLOCK_ENTER, mod, custom ? "__gpuprobe_sp_enter" : "gp_sp_enter");
	if (r == 0)
		r = gp_san.patch_instr(GP_SAN_BLOCK_EXIT, mod, custom ? "__gpuprobe_sp_exit" : "gp_sp_exit");
	if (r == 0 && custom && c->mem)
		r = gp_san.patch_instr(GP_SAN_GLOBAL_MEMORY_ACCESS, mod, "__gpuprobe_sp_mem");
	if (r == 0)
		r = gp_san.patch_module(mod);
	if (r != 0) {
		m->refused = 1;
		gp_sass_count(&gp_sass_stats.refused, 1);
		GP_TRACE("sass: module %p refused (%d): left unpatched", (void *)mod, r);
		gp_san.unpatch_module(mod);
		return -1;
	}
	m->patched = 1;
	gp_sass_count(&gp_sass_stats.patches, 1);
	return 0;
}

static const void *gp_rdp(const uint8_t *d, size_t off)
{
	const void *p;
	memcpy(&p, d + off, sizeof p);
	return p;
}

/* gp_sass_forget resets a module's state after an unload (an unpatch of
 * a module that is not patched does nothing). */
static void gp_sass_forget(struct gp_sass_mod *m, CUmodule mod)
{
	pthread_mutex_lock(&gp_sass_mu);
	uint32_t g = __atomic_load_n(&gp_sass_gen, __ATOMIC_RELAXED);
	if (m->gen != g) {
		if (m->patched)
			gp_san.unpatch_module(mod);
		m->patched = 0, m->refused = 0;
		__atomic_store_n(&m->left, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&m->gen, g, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&gp_sass_mu);
}

/* gp_sass_unloaded: the application unloaded a module or library
 * (wrap_load.c); every module's state is checked at its next launch. */
GP_HIDDEN void gp_sass_unloaded(void) { __atomic_fetch_add(&gp_sass_gen, 1, __ATOMIC_RELAXED); }


/* The launch callback, in the launching thread inside the driver's launch
 * call. Launches of unpatched modules that are not sampled return after
 * one table lookup. */
static void gp_sass_cb(void *ud, uint32_t domain, uint32_t cbid, const void *data)
{
	(void)ud;
	if (domain == GP_SAN_DOMAIN_RESOURCE && data != NULL) {
		if (cbid == GP_SAN_CBID_CTX_DESTROY)
			gp_sass_ctx_gone((CUcontext)gp_rdp(data, GP_SAN_RC_CONTEXT));
		return;
	}
	if (domain != GP_SAN_DOMAIN_LAUNCH || cbid != GP_SAN_CBID_LAUNCH_BEGIN || data == NULL)
		return;
	const uint8_t *d = data;
	uint64_t id = gp_self.pending;
	if (GP_UNLIKELY(gp_trace_fd >= 0)) /* only the trace's summary reads it: no shared write per launch */
		gp_sass_count(&gp_sass_stats.callbacks, 1);
	CUmodule mod = (CUmodule)gp_rdp(d, GP_SAN_LD_MODULE);
	struct gp_sass_mod *m = gp_sass_mod((uint64_t)mod);
	if (m == NULL)
		return;
	if (GP_UNLIKELY(__atomic_load_n(&m->gen, __ATOMIC_RELAXED) != __atomic_load_n(&gp_sass_gen, __ATOMIC_RELAXED)))
		gp_sass_forget(m, mod);
	if (m->refused)
		return;
	CUfunction f = (CUfunction)gp_rdp(d, GP_SAN_LD_FUNCTION);
	const char *name = gp_rdp(d, GP_SAN_LD_NAME);
	uint32_t gen = __atomic_load_n(&gp_sass_gen, __ATOMIC_RELAXED);
	int eligible = id != 0 && !gp_self.in_graph && __atomic_load_n(&gp_sass_on, __ATOMIC_RELAXED) &&
		       !__atomic_load_n(&gp_sass_app, __ATOMIC_RELAXED) &&
		       !(name && strncmp(name, "__gpuprobe", 10) == 0) && gp_pfunc_find((uint64_t)f) == NULL;
	int allowed = eligible && gp_sass_filter(f, name, id, gen);
	int take = allowed && gp_sass_sample(m);
	/* A launch the collector's filter keeps out, in a patched module's
	 * burst, runs patched with userdata 0 (its probes return at once):
	 * cheaper than an unpatch and a patch for the burst's next launch. */
	int skip = eligible && !allowed && __atomic_load_n(&m->patched, __ATOMIC_RELAXED) && gp_sass_burst(m);
	if (!take && !skip && !__atomic_load_n(&m->patched, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&gp_sass_mu);
	struct gp_sass_ctx *c = take ? gp_sass_ctx((CUcontext)gp_rdp(d, GP_SAN_LD_CONTEXT)) : NULL;
	if (take && (c == NULL || gp_sass_patch(c, m, mod, 1) != 0))
		take = 0;
	uint64_t udata = take ? id : 0;
	if (take && c->custom && c->targets)
		udata |= gp_sass_user_mask(c->targets, f, name, gen);
	if (!take && !(skip && m->patched))
		gp_sass_patch(NULL, m, mod, 0), skip = 0;
	pthread_mutex_unlock(&gp_sass_mu);
	if (!take && !skip)
		return;
	if (gp_san.set_launch_data((void *)gp_rdp(d, GP_SAN_LD_HLAUNCH), f, (void *)gp_rdp(d, GP_SAN_LD_HSTREAM),
				   (const void *)(uintptr_t)udata) != 0 ||
	    !take)
		return;
	gp_sass_count(&gp_sass_stats.sampled, 1);
	gp_self.sass = 1;
}





/* ---- start ------------------------------------------------------------ */

static int gp_sass_subscribed;

static int gp_sass_ever; /* subscribed once: CUPTI cannot subscribe in this process any more */

GP_HIDDEN int gp_sass_holds_callbacks(void) { return __atomic_load_n(&gp_sass_ever, __ATOMIC_ACQUIRE); }

/* gp_sass_release gives the subscription back (the collector did not ask
 * for the route): CUPTI's device windows can then subscribe. */
static void gp_sass_release(void)
{
	if (__atomic_exchange_n(&gp_sass_subscribed, 0, __ATOMIC_ACQ_REL) && gp_san.unsubscribe(gp_san.sub) == 0)
		GP_TRACE("sass: the collector did not ask for SASS probes: Sanitizer API released");
}

/* gp_sass_subscribe loads the library and subscribes (once); early, from
 * the constructor with GPUPROBE_SASS=1, or at the handshake. */
static int gp_sass_subscribe(void)
{
	static int done = 0, ok = 0;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return ok ? 0 : -1;
	const char *why = "";
	if (getenv("CUDA_INJECTION64_PATH") && getenv("CUDA_INJECTION64_PATH")[0]) {
		/* compute-sanitizer, nsys and ncu inject themselves: the
		 * Sanitizer API takes one subscriber, and it is theirs. */
		GP_TRACE("sass: a tool is injected (CUDA_INJECTION64_PATH): no SASS probes");
		return -1;
	}
	if (gp_sass_load(&why) != 0 || gp_sass_syms() != 0) {
		GP_TRACE("sass: %s", gp_san.lib ? "libsanitizer-public.so lacks an entry point" : why);
		return -1;
	}
	int r = gp_san.subscribe(&gp_san.sub, gp_sass_cb, NULL);
	if (r == 0)
		r = gp_san.enable_domain(1, gp_san.sub, GP_SAN_DOMAIN_LAUNCH);
	if (r == 0)
		r = gp_san.enable_callback(1, gp_san.sub, GP_SAN_DOMAIN_RESOURCE, GP_SAN_CBID_CTX_DESTROY);
	if (r != 0) {
		GP_TRACE("sass: sanitizerSubscribe failed (%d): another tool holds the Sanitizer API?", r);
		return -1;
	}
	ok = 1;
	__atomic_store_n(&gp_sass_subscribed, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&gp_sass_ever, 1, __ATOMIC_RELEASE);
	return 0;
}

/* gp_sass_start turns the route on (the collector's settings, after the
 * handshake): on, the WELCOME's GP_SET_SASS (off: the subscription is
 * released); rate, sampling::device_max_per_second (0: no limit), spent
 * as rate / GP_SASS_BURST bursts a second; flush_us how often records are
 * copied out (0: the default); settings: the WELCOME's flags, which say
 * whether it has GPU programs for the route (sass_user.c) and filters its
 * kernels (sass_filter.c). */
GP_HIDDEN void gp_sass_start(int on, uint32_t rate, uint32_t flush_us, uint32_t settings)
{
	__atomic_store_n(&gp_sass_user_wanted, (settings & GP_SET_SASS_PROGRAMS) != 0, __ATOMIC_RELAXED);
	gp_sass_filter_set((settings & GP_SET_SASS_FILTER) != 0);
	if (!on || !__atomic_load_n(&gp_sass_subscribed, __ATOMIC_ACQUIRE)) {
		gp_sass_release();
		return;
	}
	gp_sass_gap_ns = rate == 0 ? 0 : 1000000000ull * GP_SASS_BURST / rate;
	if (flush_us != 0)
		gp_sass_flush_us = flush_us;
	GP_TRACE("sass: settings: at most %u launches a second (0: no limit), records every %u us", rate,
		 gp_sass_flush_us);
	if (gp_sass_subscribe() != 0)
		return;
	static int started;
	if (__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) {
		/* A reconnect: the route resumes where gp_sass_pause left it;
		 * the new collector may filter kernels otherwise, so every
		 * kernel's verdict is asked again (a new generation). */
		gp_sass_unloaded();
		__atomic_store_n(&gp_sass_on, 1, __ATOMIC_RELEASE);
		GP_TRACE("sass: resumed");
		return;
	}
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, gp_sass_thread, NULL) == 0) {
		pthread_setname_np(t, "gpuprobe-sass");
		__atomic_store_n(&gp_sass_on, 1, __ATOMIC_RELEASE);
		atexit(gp_sass_exit);
		GP_TRACE("sass: on, bursts of %d launches every %llu us", GP_SASS_BURST,
			 (unsigned long long)(gp_sass_gap_ns / 1000));
	}
	pthread_attr_destroy(&a);
}

/* GPUPROBE_SASS=1 subscribes before the application's first CUDA call, in
 * case the Sanitizer API needs to see contexts created. */
__attribute__((constructor)) static void gp_sass_init(void)
{
	const char *e = getenv("GPUPROBE_SASS");
	if (e && e[0] == '1')
		gp_sass_subscribe();
}

/* gp_sass_aside steps the route aside while the application's profiler
 * holds CUPTI (on) and back when it is done (cupti.c): no launch is
 * sampled meanwhile, and patched modules are unpatched at their next
 * launch. 0 when that changed the route's state. */
GP_HIDDEN int gp_sass_aside(int on, const char *what)
{
	if (__atomic_exchange_n(&gp_sass_app, on, __ATOMIC_ACQ_REL) == on)
		return 1;
	if (on)
		GP_TRACE("sass: stepped aside: the application's profiler called %s", what);
	else
		GP_TRACE("sass: back on: the application's profiler is done");
	return 0;
}

/* gp_sass_pause stops sampling (the collector went away, session.c):
 * patched modules are unpatched at their next launch. */
GP_HIDDEN void gp_sass_pause(void)
{
	if (__atomic_exchange_n(&gp_sass_on, 0, __ATOMIC_ACQ_REL))
		GP_TRACE("sass: paused: the collector went away");
}

/* gp_sass_summary logs the route's counts (GPUPROBE_TRACE, at exit). */
GP_HIDDEN void gp_sass_summary(void)
{
	if (!__atomic_load_n(&gp_sass_subscribed, __ATOMIC_ACQUIRE))
		return;
	const struct gp_sass_stats *st = &gp_sass_stats;
	GP_TRACE("sass: callbacks=%llu sampled=%llu patches=%llu unpatches=%llu refused=%llu records=%llu lost=%llu "
		 "torn=%llu filtered=%llu kernels_probed=%llu kernels_excluded=%llu",
		 (unsigned long long)st->callbacks, (unsigned long long)st->sampled, (unsigned long long)st->patches,
		 (unsigned long long)st->unpatches, (unsigned long long)st->refused, (unsigned long long)st->records,
		 (unsigned long long)st->lost, (unsigned long long)st->torn, (unsigned long long)st->filtered,
		 (unsigned long long)st->allowed, (unsigned long long)st->excluded);
}
