/*
 * patch.c - loading patched code (wire format: package gpuprobe/agentwire,
 * doc.go, "Patching").
 *
 * At a load of an in-memory image that may carry PTX, the shim sends the
 * image to the collector (PATCH: inline when small, else in a memfd) with
 * the device's SM number, and waits at most GPUPROBE_TIMEOUT_MS for the
 * answer. On PATCHED (its image memfd checked: trust.c) it loads the
 * patched PTX with the call the application made, sets each module global the answer describes (a WELCOME region's
 * device address, a constant, a ring's device reservation block, zeroed
 * device memory of the module, or a device map: mirror.c) and remembers which kernels of the module
 * take the hidden launch-id parameter, and where. Any failure unloads
 * what was loaded and loads the original image (fail open), logged once.
 *
 * Everything here runs at load time, under one lock; the launch path only
 * reads the patched-function table (gp_pfunc_find, lock-free).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gp.h"

#define GP_FRAME_PATCH 4u
#define GP_FRAME_PATCHED 5u
#define GP_FRAME_NOPATCH 6u
#define GP_INLINE_MAX (65536u - 24u)
#define GP_DEVATTR_CC_MAJOR 75
#define GP_DEVATTR_CC_MINOR 76

GP_HIDDEN pthread_mutex_t gp_patch_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t gp_req_id;
static int gp_warned;
GP_HOT_VAR GP_HIDDEN int gp_any_patched;

GP_HIDDEN struct gp_patch_drv gp_drv;

GP_HIDDEN void gp_drv_init(void)
{
	if (gp_drv.looked)
		return;
#define S(f, n) *(void **)&gp_drv.f = gp_cuda_sym(n)
	S(ctx_get_device, "cuCtxGetDevice");
	S(ctx_set, "cuCtxSetCurrent");
	S(dev_attr, "cuDeviceGetAttribute");
	S(host_register, "cuMemHostRegister_v2");
	if (gp_drv.host_register == NULL)
		S(host_register, "cuMemHostRegister");
	S(host_dev_ptr, "cuMemHostGetDevicePointer_v2");
	S(mem_alloc, "cuMemAlloc_v2");
	S(mem_free, "cuMemFree_v2");
	S(memset8, "cuMemsetD8_v2");
	S(htod, "cuMemcpyHtoD_v2");
	S(mod_global, "cuModuleGetGlobal_v2");
	S(lib_global, "cuLibraryGetGlobal");
	S(mod_unload, "cuModuleUnload");
	S(lib_unload, "cuLibraryUnload");
	S(ctx_get, "cuCtxGetCurrent");
	S(mod_load_data, "cuModuleLoadData");
	S(lib_load_data, "cuLibraryLoadData");
	S(mod_function, "cuModuleGetFunction");
	S(lib_kernel, "cuLibraryGetKernel");
#undef S
	gp_drv.looked = 1;
}


/* gp_fail logs a failed patch: the first always (when tracing), later
 * ones only when tracing. */
static void gp_fail(const char *api, const char *what, int code)
{
	if (!gp_warned) {
		gp_warned = 1;
		GP_TRACE("%s: patching failed (%s, %d); loading the original image (later failures are traced only)",
			 api, what, code);
		return;
	}
	GP_TRACE("%s: patching failed (%s, %d); loading the original image", api, what, code);
}

static uint32_t gp_hash(uint64_t h) { return (uint32_t)((h * 0x9E3779B97F4A7C15ull) >> 52); }

/* ---- patched modules ---------------------------------------------------- */

struct gp_pmod {
	uint64_t module; /* atomic */
	uint32_t n;
	struct gp_pkernel *k;
	uint32_t nallocs;     /* device memory of its device-only maps, */
	CUdeviceptr *allocs;  /* freed when the module is unloaded */
};
#define GP_PMODS 1024
static struct gp_pmod gp_pmods[GP_PMODS];

static struct gp_pmod *gp_pmod_find(uint64_t module, int create)
{
	uint32_t h = gp_hash(module) % GP_PMODS;
	for (uint32_t i = 0; i < 64 && module; i++) {
		struct gp_pmod *m = &gp_pmods[(h + i) % GP_PMODS];
		uint64_t k = __atomic_load_n(&m->module, __ATOMIC_ACQUIRE);
		if (k == module)
			return m;
		if (k != 0)
			continue;
		if (!create)
			return NULL;
		if (__atomic_compare_exchange_n(&m->module, &k, module, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
		    k == module)
			return m;
	}
	return NULL;
}

/* gp_patch_lookup is called for every kernel lookup: a kernel of a patched
 * module gets its handle into the patched-function table. */
GP_HIDDEN void gp_patch_lookup(uint64_t handle, uint64_t module, const char *name)
{
	if (handle == 0 || name == NULL || gp_async_lookup(handle, module, name))
		return;
	struct gp_pmod *m = gp_pmod_find(module, 0);
	if (m == NULL)
		return;
	struct gp_pkernel *k = __atomic_load_n(&m->k, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; k && i < m->n; i++)
		if (strcmp(k[i].name, name) == 0) {
			gp_pfunc_set(handle, k[i].index, k[i].offset, k[i].one_in, k[i].max_rate);
			return;
		}
}

/* gp_patch_alias: handle to (a CUfunction of a CUkernel) launches like from. */
GP_HIDDEN void gp_patch_alias(uint64_t from, uint64_t to)
{
	if (gp_async_alias(from, to))
		return;
	const struct gp_pfunc_info *p = gp_pfunc_find(from);
	if (p != NULL)
		gp_pfunc_set(to, p->index, p->offset, p->one_in, p->max_rate);
}

/* ---- the exchange ------------------------------------------------------- */

/* gp_arch returns the current device's SM number (0: unknown). */
GP_HIDDEN uint32_t gp_arch(void)
{
	CUdevice d = 0;
	int maj = 0, min = 0;
	if (gp_drv.ctx_get_device == NULL || gp_drv.dev_attr == NULL || gp_drv.ctx_get_device(&d) != CUDA_SUCCESS ||
	    gp_drv.dev_attr(&maj, GP_DEVATTR_CC_MAJOR, d) != CUDA_SUCCESS ||
	    gp_drv.dev_attr(&min, GP_DEVATTR_CC_MINOR, d) != CUDA_SUCCESS || maj <= 0 || min < 0)
		return 0;
	return (uint32_t)(maj * 10 + min);
}

/* gp_request sends PATCH (load API code, device arch) for img and returns
 * the answer's payload (PATCHED only; NULL otherwise) and its image memfd. */
static uint8_t *gp_request(const char *api, uint32_t code, uint32_t arch, const struct gp_image *img, uint32_t *plen,
			   int *imgfd)
{
	if (arch == 0 && code != GP_API_SASS_KERNELS) {
		gp_fail(api, "device compute capability unknown", 0);
		return NULL;
	}
	uint32_t id = ++gp_req_id;
	int inl = img->size <= GP_INLINE_MAX, memfd = -1;
	size_t n = 12 + 24 + (inl ? img->size : 0);
	uint8_t *f = malloc(n), *payload = NULL;
	uint32_t type = 0;
	if (f == NULL)
		return NULL;
	uint32_t hdr[3] = {0x41425047u, GP_PROTO | GP_FRAME_PATCH << 16, (uint32_t)(n - 12)};
	uint32_t fix[4] = {id, arch, code, inl ? 0u : 1u};
	uint64_t size = img->size;
	memcpy(f, hdr, 12);
	memcpy(f + 12, fix, 16);
	memcpy(f + 28, &size, 8);
	if (inl) {
		memcpy(f + 36, img->data, img->size);
	} else {
		memfd = memfd_create("gpuprobe-image", MFD_CLOEXEC);
		const uint8_t *p = img->data;
		size_t left = img->size;
		while (memfd >= 0 && left > 0) {
			ssize_t w = write(memfd, p, left);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				close(memfd);
				memfd = -1;
				break;
			}
			p += w, left -= (size_t)w;
		}
		if (memfd < 0) {
			free(f);
			gp_fail(api, "memfd for the image", -errno);
			return NULL;
		}
	}
	int err = gp_agent_exchange(f, n, memfd, id, &type, &payload, plen, imgfd);
	free(f);
	if (memfd >= 0)
		close(memfd);
	if (err) {
		gp_fail(api, err == -ETIMEDOUT ? "no answer within GPUPROBE_TIMEOUT_MS" : "agent socket", err);
		return NULL;
	}
	if (type != GP_FRAME_PATCHED) {
		uint32_t code = type == GP_FRAME_NOPATCH && *plen >= 12 ? rd32(payload + 4) : 0;
		uint32_t ml = type == GP_FRAME_NOPATCH && *plen >= 12 ? rd32(payload + 8) : 0;
		if (ml > *plen - 12)
			ml = 0;
		GP_TRACE("%s: not patched (frame type %u, code %u: %.*s)", api, type, code, (int)ml,
			 ml ? (const char *)payload + 12 : "");
		free(payload);
		if (*imgfd >= 0)
			close(*imgfd), *imgfd = -1;
		return NULL;
	}
	if (*imgfd < 0) {
		free(payload);
		gp_fail(api, "PATCHED without its image", 0);
		return NULL;
	}
	return payload;
}

/* gp_bind sets the globals of a loaded patched module and records its
 * kernels; returns 0, or nonzero with what in *why. */
static int gp_bind(struct gp_patch *pp, uint64_t module, const char **why)
{
	const uint8_t *p = pp->payload, *end = pp->payload + pp->plen;
	uint32_t nk = rd32(p + 4), ng = rd32(p + 8);
	struct gp_allocs allocs = {0};
	struct gp_pkernel *ks = NULL;
	int err = 0;
	p += 32;
	if (nk == 0 || nk > 65536 || (ks = calloc(nk, sizeof *ks)) == NULL)
		return *why = "kernel descriptors", -EINVAL;
	for (uint32_t i = 0; i < nk; i++) {
		if (end - p < 12 || rd32(p + 8) == 0 || rd32(p + 8) > (uint64_t)(end - p - 12)) {
			*why = "PATCHED kernel descriptor out of bounds", err = -EPROTO;
			goto fail;
		}
		uint32_t nl = rd32(p + 8);
		ks[i].index = rd32(p), ks[i].offset = rd32(p + 4), ks[i].one_in = rd32(pp->payload + 12);
		ks[i].max_rate = rd32(pp->payload + 24);
		if (ks[i].index >= GP_MAX_PARAMS || (uint64_t)ks[i].offset + 8 > GP_XBUF) {
			*why = "hidden parameter past the shim's launch buffers", err = -E2BIG;
			goto fail;
		}
		ks[i].name = strndup((const char *)p + 12, nl);
		if (ks[i].name == NULL) {
			*why = "malloc", err = -ENOMEM;
			goto fail;
		}
		p += 12 + nl;
	}
	for (uint32_t i = 0; i < ng; i++) {
		struct gp_gdesc g;
		uint64_t v = 0;
		if ((err = gp_global_next(&p, end, &g, why)) != 0 ||
		    (err = gp_global_value(pp->api, &g, &allocs, &v, why)) != 0)
			goto fail;
		CUdeviceptr gd = 0;
		size_t gsz = 0;
		CUresult c = pp->lib ? (gp_drv.lib_global ? gp_drv.lib_global(&gd, &gsz, (CUlibrary)module, g.name) : -1)
				     : (gp_drv.mod_global ? gp_drv.mod_global(&gd, &gsz, (CUmodule)module, g.name) : -1);
		if (c != CUDA_SUCCESS || gsz != 8) {
			*why = "module global lookup (cuModuleGetGlobal)", err = c ? c : -EINVAL;
			goto fail;
		}
		if (gp_drv.htod == NULL || (c = gp_drv.htod(gd, &v, 8)) != CUDA_SUCCESS) {
			*why = "setting a module global (cuMemcpyHtoD)", err = c ? c : -ENOENT;
			goto fail;
		}
		GP_TRACE("%s: global %s (kind %u) = %#llx", pp->api, g.name, g.kind, (unsigned long long)v);
	}
	struct gp_pmod *m = gp_pmod_find(module, 1);
	if (m == NULL) {
		*why = "patched-module table full", err = -ENOSPC;
		goto fail;
	}
	/* A reused handle: the old kernel list is leaked (a lookup may read it). */
	m->n = 0;
	__atomic_store_n(&m->k, ks, __ATOMIC_RELEASE);
	__atomic_store_n(&m->n, nk, __ATOMIC_RELEASE);
	__atomic_store_n(&gp_any_patched, 1, __ATOMIC_RELEASE);
	m->allocs = allocs.n ? calloc(allocs.n, sizeof *m->allocs) : NULL;
	if (m->allocs != NULL) {
		memcpy(m->allocs, allocs.dev, allocs.n * sizeof *m->allocs);
		m->nallocs = allocs.n;
	}
	return 0;
fail:
	for (uint32_t i = 0; i < allocs.n; i++)
		if (gp_drv.mem_free)
			gp_drv.mem_free(allocs.dev[i]);
	for (uint32_t i = 0; ks && i < nk; i++)
		free(ks[i].name);
	free(ks);
	return err ? err : -EINVAL;
}

/* gp_take_image maps a PATCHED answer's sealed image memfd (closing it):
 * NULL with *why when it is not a NUL-terminated image of 1..GP_IMAGE_MAX
 * bytes. */
static void *gp_take_image(int fd, const uint8_t *payload, uint32_t plen, size_t *size, const char **why)
{
	uint64_t n = plen >= 32 ? rd64(payload + 16) : 0;
	void *m = MAP_FAILED;
	*why = "PATCHED image size";
	/* Sealed, so that the bytes checked (size, NUL) are the bytes loaded
	 * and a shorter file cannot SIGBUS the load. */
	if (n > 0 && n <= GP_IMAGE_MAX && gp_fd_check(fd, n, F_SEAL_WRITE | F_SEAL_SHRINK, 0, why) == 0 &&
	    (m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0)) != MAP_FAILED && ((const char *)m)[n - 1] != 0)
		*why = "PATCHED image not NUL-terminated";
	close(fd);
	if (m == MAP_FAILED || ((const char *)m)[n - 1] != 0) {
		if (m != MAP_FAILED)
			munmap(m, n);
		return NULL;
	}
	*size = n;
	return m;
}

GP_HIDDEN const void *gp_patch_begin(const char *api, int lib, struct gp_image *img, struct gp_patch *pp)
{
	memset(pp, 0, sizeof *pp);
	pp->api = api, pp->lib = lib;
	if (__atomic_load_n(&gp_state, __ATOMIC_ACQUIRE) != GP_READY || !gp_patch_enabled || img->size == 0 ||
	    (img->kind != GP_IMG_PTX && img->kind != GP_IMG_FATBIN && img->kind != GP_IMG_FATBIN_WRAPPER))
		return img->ptr;
	if (gp_patch_async()) {
		gp_patch_keep(api, lib, img);
		return img->ptr;
	}
	pthread_mutex_lock(&gp_patch_mu);
	gp_drv_init();
	int fd = -1;
	uint8_t *payload = gp_request(api, lib ? 2u : 1u, gp_arch(), img, &pp->plen, &fd);
	if (payload == NULL) {
		pthread_mutex_unlock(&gp_patch_mu);
		return img->ptr;
	}
	const char *why;
	void *m = gp_take_image(fd, payload, pp->plen, &pp->image_size, &why);
	if (m == NULL) {
		free(payload);
		gp_fail(api, why, 0);
		pthread_mutex_unlock(&gp_patch_mu);
		return img->ptr;
	}
	pp->payload = payload, pp->image = m, pp->active = 1;
	return m;
}

/* gp_patch_fetch asks for the SASS route's patch module (PATCH with load
 * API 3, no image) of a device of SM arch: the PATCHED payload, with the
 * module's PTX mapped in *image (munmap *size bytes); NULL when the
 * collector sent none (no programs for the route) or it was unusable.
 * Takes gp_patch_mu; never from a driver callback. */
GP_HIDDEN uint8_t *gp_patch_fetch(uint32_t arch, uint32_t *plen, void **image, size_t *size)
{
	static const struct gp_image none = {.kind = GP_IMG_PTX};
	if (__atomic_load_n(&gp_state, __ATOMIC_ACQUIRE) != GP_READY)
		return NULL;
	pthread_mutex_lock(&gp_patch_mu);
	int fd = -1;
	uint8_t *payload = gp_request("sass", GP_API_SASS, arch, &none, plen, &fd);
	const char *why = "";
	if (payload != NULL && (*image = gp_take_image(fd, payload, *plen, size, &why)) == NULL) {
		GP_TRACE("sass: the collector's patch module: %s", why);
		free(payload);
		payload = NULL;
	}
	pthread_mutex_unlock(&gp_patch_mu);
	return payload;
}

/* gp_patch_query asks which of the kernels in q the SASS route may probe
 * (PATCH with load API 4, the names inline): the PATCHED payload, NULL
 * when no answer came. Takes gp_patch_mu; never from a driver callback. */
GP_HIDDEN uint8_t *gp_patch_query(const char *q, size_t n, uint32_t *plen)
{
	const struct gp_image img = {.kind = GP_IMG_PTX, .data = q, .size = n};
	if (__atomic_load_n(&gp_state, __ATOMIC_ACQUIRE) != GP_READY || n > GP_INLINE_MAX)
		return NULL;
	pthread_mutex_lock(&gp_patch_mu);
	int fd = -1;
	uint8_t *payload = gp_request("sass", GP_API_SASS_KERNELS, 0, &img, plen, &fd);
	pthread_mutex_unlock(&gp_patch_mu);
	if (fd >= 0)
		close(fd); /* its image is empty */
	if (payload != NULL && *plen < 32) {
		free(payload);
		payload = NULL;
	}
	return payload;
}

GP_HIDDEN int gp_patch_finish(struct gp_patch *pp, CUresult r, uint64_t module)
{
	if (!pp->active)
		return 0;
	const char *why = "loading the patched PTX";
	int err = r;
	/* Binding (host registration, allocations, copies) may run inside an
	 * application's stream capture (see gp_capture_relax). */
	int mode, relaxed = gp_capture_relax(&mode);
	if (r == CUDA_SUCCESS && module != 0 && (err = gp_bind(pp, module, &why)) == 0)
		GP_TRACE("%s: loaded the patched image (%zu bytes), handle %p", pp->api, pp->image_size, (void *)module);
	else if (r == CUDA_SUCCESS && module != 0) {
		if (pp->lib && gp_drv.lib_unload)
			gp_drv.lib_unload((CUlibrary)module);
		else if (!pp->lib && gp_drv.mod_unload)
			gp_drv.mod_unload((CUmodule)module);
	}
	gp_capture_restore(relaxed, mode);
	if (err)
		gp_fail(pp->api, why, err);
	munmap(pp->image, pp->image_size);
	free(pp->payload);
	pp->active = 0;
	pthread_mutex_unlock(&gp_patch_mu);
	return err ? -1 : 0;
}


/* gp_patch_unloaded forgets a patched module the application unloaded
 * (cuModuleUnload, cuLibraryUnload): its kernels are no longer looked up
 * and the device memory of its device-only maps is freed. Not the launch
 * path. */
GP_HIDDEN void gp_patch_unloaded(uint64_t module)
{
	gp_async_unloaded(module);
	pthread_mutex_lock(&gp_patch_mu);
	struct gp_pmod *m = gp_pmod_find(module, 0);
	if (m != NULL) {
		__atomic_store_n(&m->n, 0, __ATOMIC_RELEASE); /* the list itself is leaked: a lookup may read it */
		for (uint32_t i = 0; i < m->nallocs; i++)
			if (gp_drv.mem_free)
				gp_drv.mem_free(m->allocs[i]);
		GP_TRACE("module %p unloaded: %u device allocations freed", (void *)module, m->nallocs);
		free(m->allocs);
		m->allocs = NULL, m->nallocs = 0;
	}
	pthread_mutex_unlock(&gp_patch_mu);
}

/* ---- for the patch thread (patch_async.c) ------------------------------- */

GP_HIDDEN int gp_patch_request(const char *api, int lib, const struct gp_image *img, struct gp_patch *pp)
{
	memset(pp, 0, sizeof *pp);
	pp->api = api, pp->lib = lib;
	pthread_mutex_lock(&gp_patch_mu);
	gp_drv_init();
	int fd = -1;
	uint8_t *payload = gp_request(api, lib ? 2u : 1u, gp_arch(), img, &pp->plen, &fd);
	const char *why = "";
	void *m = payload ? gp_take_image(fd, payload, pp->plen, &pp->image_size, &why) : NULL;
	pthread_mutex_unlock(&gp_patch_mu);
	if (m == NULL) {
		if (payload != NULL)
			gp_fail(api, why, 0);
		free(payload);
		return -1;
	}
	pp->payload = payload, pp->image = m, pp->active = 1;
	return 0;
}

GP_HIDDEN int gp_patch_bind(struct gp_patch *pp, uint64_t module, const char **why)
{
	pthread_mutex_lock(&gp_patch_mu);
	int err = gp_bind(pp, module, why);
	pthread_mutex_unlock(&gp_patch_mu);
	return err;
}

GP_HIDDEN const struct gp_pkernel *gp_patch_kernels(uint64_t module, uint32_t *n)
{
	struct gp_pmod *m = gp_pmod_find(module, 0);
	*n = m ? __atomic_load_n(&m->n, __ATOMIC_ACQUIRE) : 0;
	return m && *n ? __atomic_load_n(&m->k, __ATOMIC_ACQUIRE) : NULL;
}
