/*
 * intercept.c - how calls reach the shim: dlsym and cuGetProcAddress
 * interposition, the table of wrapped driver entry points, and the wrapper
 * slots each returned pointer is bound to.
 *
 * CUDA runtimes (static and shared cudart, PyTorch) dlopen libcuda.so.1 and
 * either dlsym the cu* names or dlsym cuGetProcAddress(_v2) and ask it for
 * everything else. Both answers pass through here: where the name is one we
 * wrap, the caller gets a wrapper bound to the exact pointer the driver
 * returned (so _ptsz/_ptds variants and per-version ABIs keep their
 * semantics: each wrapper calls its own real pointer).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

#include "gp.h"

/* ---- the real dlsym -------------------------------------------------- */

GP_HIDDEN void *(*gp_real_dlsym_fn)(void *, const char *);

/* gp_init_real_dlsym finds glibc's dlsym (the next one after us). */
GP_HIDDEN void *gp_init_real_dlsym(void)
{
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (p == NULL)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n((void **)&gp_real_dlsym_fn, p, __ATOMIC_RELEASE);
	return p;
}

GP_HIDDEN void *gp_real_dlsym(void *handle, const char *name)
{
	void *(*fn)(void *, const char *) = __atomic_load_n(&gp_real_dlsym_fn, __ATOMIC_ACQUIRE);
	if (fn == NULL)
		fn = (void *(*)(void *, const char *))gp_init_real_dlsym();
	return fn ? fn(handle, name) : NULL;
}

GP_HIDDEN void *gp_dlsym_c(void *handle, const char *name);

#if defined(__x86_64__)
/*
 * dlsym itself. dlsym(RTLD_NEXT, ...) depends on its caller's address, so
 * that case tail-jumps to glibc's dlsym with the caller's return address
 * untouched (other interposers that use RTLD_NEXT keep working; such
 * lookups are not wrapped). Every other handle goes to gp_dlsym_c.
 */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	".p2align 4\n"
	"dlsym:\n"
	"\tendbr64\n"
	"\tcmpq $-1, %rdi\n"
	"\tje 1f\n"
	"\tjmp gp_dlsym_c\n"
	"1:\n"
	"\tmovq gp_real_dlsym_fn(%rip), %rax\n"
	"\ttestq %rax, %rax\n"
	"\tjz 2f\n"
	"\tjmp *%rax\n"
	"2:\n"
	"\tpushq %rdi\n"
	"\tpushq %rsi\n"
	"\tsubq $8, %rsp\n"
	"\tcall gp_init_real_dlsym\n"
	"\taddq $8, %rsp\n"
	"\tpopq %rsi\n"
	"\tpopq %rdi\n"
	"\ttestq %rax, %rax\n"
	"\tjz 3f\n"
	"\tjmp *%rax\n"
	"3:\n"
	"\tret\n"
	".size dlsym, .-dlsym\n");
#else
/* Other architectures: RTLD_NEXT is resolved relative to the shim, which
 * is right for callers loaded after it (the usual case). */
GP_EXPORT void *dlsym(void *handle, const char *name)
{
	return gp_dlsym_c(handle, name);
}
#endif

/* ---- the API table -------------------------------------------------- */

GP_HIDDEN const struct gp_api gp_apis[GP_FN_COUNT] = {
#define GP_X_TABLE(ID, base, n0, n1, mask, minv, maxv) \
	[GP_FN_##ID] = {base, {n0, n1}, mask, minv, maxv, gp_slots_##ID, gp_wrappers_##ID},
	GP_APIS(GP_X_TABLE)
#undef GP_X_TABLE
};

static void *gp_cuda_handle;
static pthread_once_t gp_cuda_once = PTHREAD_ONCE_INIT;

static void gp_cuda_open(void)
{
	gp_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
}

/* gp_libcuda returns a handle of the libcuda.so.1 the process loaded, or
 * NULL when it has none (the shim never loads the driver by itself). */
GP_HIDDEN void *gp_libcuda(void)
{
	if (gp_cuda_handle == NULL) {
		pthread_once(&gp_cuda_once, gp_cuda_open);
		if (gp_cuda_handle == NULL)
			gp_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	}
	return gp_cuda_handle;
}

GP_HIDDEN void *gp_cuda_sym(const char *name)
{
	void *h = gp_libcuda();
	return h ? gp_real_dlsym(h, name) : NULL;
}

/* gp_cuda_sym_once returns *slot, which it sets to gp_cuda_sym(name) the
 * first time (*looked then 1): a driver entry point looked up once, also
 * when the driver lacks it (NULL). */
GP_HIDDEN void *gp_cuda_sym_once(void **slot, int *looked, const char *name)
{
	if (!__atomic_load_n(looked, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(slot, gp_cuda_sym(name), __ATOMIC_RELEASE);
		__atomic_store_n(looked, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

/* The exported-name addresses inside libcuda, to recognise what
 * cuGetProcAddress returns. */
static void *gp_known[GP_FN_COUNT][GP_XSLOTS];
static int gp_known_ok;
static pthread_once_t gp_known_once = PTHREAD_ONCE_INIT;

static void gp_known_init(void)
{
	void *h = gp_libcuda();
	if (h == NULL)
		return;
	for (int a = 0; a < GP_FN_COUNT; a++)
		for (int i = 0; i < GP_XSLOTS; i++)
			if (gp_apis[a].names[i])
				gp_known[a][i] = gp_real_dlsym(h, gp_apis[a].names[i]);
	gp_known_ok = 1;
}

static const void *gp_self_base;

/* gp_is_ours reports whether p is inside libgpuprobe.so (e.g. dlsym with
 * RTLD_DEFAULT found our exported cuLaunchKernel). */
static int gp_is_ours(void *p)
{
	Dl_info info;
	if (gp_self_base == NULL && dladdr((void *)gp_is_ours, &info))
		gp_self_base = info.dli_fbase;
	return dladdr(p, &info) && info.dli_fbase == gp_self_base;
}

static const char *gp_slot_name(const struct gp_slot *s)
{
	const struct gp_api *a = &gp_apis[s->api];
	long i = s - a->slots;
	if (i >= 0 && i < GP_XSLOTS && a->names[i])
		return a->names[i];
	return a->names[0];
}

/* gp_resolve_export finds the real function behind an exported wrapper:
 * the next definition after the shim, else libcuda's. */
GP_HIDDEN void *gp_resolve_export(struct gp_slot *s)
{
	const struct gp_api *a = &gp_apis[s->api];
	long i = s - a->slots;
	void *p;

	if (i < 0 || i >= GP_XSLOTS || a->names[i] == NULL)
		return NULL;
	p = gp_real_dlsym(RTLD_NEXT, a->names[i]);
	if (p == NULL || gp_is_ours(p)) {
		void *h = gp_libcuda();
		if (h == NULL)
			h = dlopen("libcuda.so.1", RTLD_NOW);
		p = h ? gp_real_dlsym(h, a->names[i]) : NULL;
	}
	if (p != NULL && gp_is_ours(p))
		p = NULL;
	GP_TRACE("exported %s -> real %p", a->names[i], p);
	if (p != NULL) {
		s->ptsz = (uint8_t)((a->ptsz_mask >> i) & 1);
		__atomic_store_n(&s->real, p, __ATOMIC_RELEASE);
	}
	return p;
}

GP_HIDDEN void gp_first_call(struct gp_slot *s)
{
	const struct gp_api *a = &gp_apis[s->api];
	long i = s - a->slots;
	if (__atomic_exchange_n(&s->called, 1, __ATOMIC_RELAXED))
		return;
	GP_TRACE("first call: %s%s (%s slot %ld, real %p)", gp_slot_name(s),
		 (i >= GP_XSLOTS && s->ptsz) ? " [per-thread stream]" : "",
		 i < GP_XSLOTS ? "exported" : "dynamic", i < GP_XSLOTS ? i : i - GP_XSLOTS,
		 __atomic_load_n(&s->real, __ATOMIC_RELAXED));
}

/* gp_bind returns the wrapper of API a bound to real pointer p (reusing the
 * slot already bound to p), or p itself when all slots are taken. */
static void *gp_bind(int a, void *p, int ptsz, const char *via)
{
	const struct gp_api *api = &gp_apis[a];
	for (int i = 0; i < GP_NDYN; i++) {
		struct gp_slot *s = &api->slots[GP_XSLOTS + i];
		void *r = __atomic_load_n(&s->real, __ATOMIC_ACQUIRE);
		if (r == p)
			return api->wrappers[i];
		if (r != NULL)
			continue;
		if (__atomic_exchange_n(&s->claim, 1, __ATOMIC_ACQ_REL))
			continue; /* being bound by another thread */
		s->ptsz = (uint8_t)ptsz;
		__atomic_store_n(&s->real, p, __ATOMIC_RELEASE);
		GP_TRACE("wrap %s%s via %s: real %p -> wrapper %d", api->names[0],
			 ptsz ? " [per-thread stream]" : "", via, p, i);
		return api->wrappers[i];
	}
	GP_TRACE("not wrapped: %s %p via %s (all %d slots taken)", api->base, p, via, GP_NDYN);
	return p;
}

/* gp_lookup_dlsym: dlsym found p for name. */
static void *gp_lookup_dlsym(const char *name, void *p)
{
	if (gp_is_ours(p))
		return p;
	for (int a = 0; a < GP_FN_COUNT; a++)
		for (int i = 0; i < GP_XSLOTS; i++)
			if (gp_apis[a].names[i] && strcmp(gp_apis[a].names[i], name) == 0)
				return gp_bind(a, p, (gp_apis[a].ptsz_mask >> i) & 1, "dlsym");
	return p;
}

/* gp_lookup_proc: cuGetProcAddress answered p for (symbol, version,
 * flags). The pointer is recognised among the exported names first; else
 * the name and version decide, where the signature is known to be stable. */
static void *gp_lookup_proc(const char *symbol, void *p, int ver, cuuint64_t flags)
{
	if (gp_is_ours(p))
		return p;
	pthread_once(&gp_known_once, gp_known_init);
	for (int a = 0; a < GP_FN_COUNT; a++) {
		const struct gp_api *api = &gp_apis[a];
		if (strcmp(api->base, symbol) != 0)
			continue;
		for (int i = 0; i < GP_XSLOTS; i++)
			if (gp_known[a][i] == p)
				return gp_bind(a, p, (api->ptsz_mask >> i) & 1, "cuGetProcAddress");
	}
	for (int a = 0; a < GP_FN_COUNT; a++) {
		const struct gp_api *api = &gp_apis[a];
		if (strcmp(api->base, symbol) != 0 || api->min_ver < 0 || ver < api->min_ver ||
		    (api->max_ver && ver >= api->max_ver))
			continue;
		return gp_bind(a, p,
			       api->ptsz_mask && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
			       "cuGetProcAddress (by name)");
	}
	for (int a = 0; a < GP_FN_COUNT; a++)
		if (strcmp(gp_apis[a].base, symbol) == 0) {
			GP_TRACE("not wrapped: %s %p for version %d (not an ABI the shim knows)",
				 symbol, p, ver);
			break;
		}
	return p;
}

static const char *gp_handle_desc(void *h, char *buf, size_t n)
{
	Dl_info info;
	if (h == RTLD_DEFAULT)
		return "RTLD_DEFAULT";
	if (h == RTLD_NEXT)
		return "RTLD_NEXT";
	struct link_map *lm = h;
	/* A dlopen handle is the object's link_map in glibc. */
	if (lm->l_name && lm->l_name[0])
		return lm->l_name;
	if (dladdr(h, &info) && info.dli_fname)
		return info.dli_fname;
	snprintf(buf, n, "%p", h);
	return buf;
}

GP_HIDDEN void *gp_dlsym_c(void *handle, const char *name)
{
	void *p = gp_real_dlsym(handle, name);
	if (GP_UNLIKELY(gp_trace_fd >= 0)) {
		char buf[32];
		GP_TRACE("dlsym(%s, \"%s\") = %p", gp_handle_desc(handle, buf, sizeof buf),
			 name ? name : "(null)", p);
	}
	if (p == NULL || name == NULL || name[0] != 'c' || name[1] != 'u')
		return p;
	return gp_lookup_dlsym(name, p);
}

/* ---- cuGetProcAddress ------------------------------------------------- */

#define GP_P_GETPROC const char *symbol, void **pfn, int ver, cuuint64_t flags
#define GP_A_GETPROC symbol, pfn, ver, flags
static CUresult gp_i_GETPROC(struct gp_slot *s, GP_P_GETPROC)
{
	CUresult (*real)(GP_P_GETPROC) = (CUresult(*)(GP_P_GETPROC))gp_real(s);
	CUresult r;
	if (real == NULL)
		return CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
	r = real(symbol, pfn, ver, flags);
	GP_TRACE("cuGetProcAddress(\"%s\", version %d, flags %llu) = %d, %p", symbol ? symbol : "(null)",
		 ver, (unsigned long long)flags, r, pfn ? *pfn : NULL);
	if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
		*pfn = gp_lookup_proc(symbol, *pfn, ver, flags);
	return r;
}
GP_DEFINE_API(GETPROC)
GP_EXPORT_AS(GETPROC, 0, cuGetProcAddress)

#define GP_P_GETPROC2 \
	const char *symbol, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *status
#define GP_A_GETPROC2 symbol, pfn, ver, flags, status
static CUresult gp_i_GETPROC2(struct gp_slot *s, GP_P_GETPROC2)
{
	CUresult (*real)(GP_P_GETPROC2) = (CUresult(*)(GP_P_GETPROC2))gp_real(s);
	CUresult r;
	if (real == NULL)
		return CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
	r = real(symbol, pfn, ver, flags, status);
	GP_TRACE("cuGetProcAddress_v2(\"%s\", version %d, flags %llu) = %d, %p, status %d",
		 symbol ? symbol : "(null)", ver, (unsigned long long)flags, r, pfn ? *pfn : NULL,
		 status ? *status : -1);
	if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
		*pfn = gp_lookup_proc(symbol, *pfn, ver, flags);
	return r;
}
GP_DEFINE_API(GETPROC2)
GP_EXPORT_AS(GETPROC2, 0, cuGetProcAddress_v2)
