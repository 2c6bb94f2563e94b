/*
 * wrap_load.c - code loading and kernel lookup: cuModuleLoad*,
 * cuLibraryLoad*, cuModuleGetFunction, cuLibraryGetKernel,
 * cuKernelGetFunction, and the cuLink* family (recorded only).
 *
 * Every in-memory load classifies its image and passes it through
 * gp_patch_begin (patch.c), which returns the patched image or the
 * original. File loads (cuModuleLoad, cuLibraryLoadFromFile) read the file
 * when the session may patch and go the same way (gp_fload_begin below).
 * Lookups record handle -> kernel name for the launch records.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gp.h"

/* GP_OUT(r, p): what a call that returned r wrote to its out parameter p,
 * or 0 when it failed or p is NULL. */
#define GP_OUT(r, p) ((r) == CUDA_SUCCESS && (p) ? *(p) : 0)

/* gp_load_image classifies the in-memory image a load through api was
 * given and returns what to pass the driver: the patched image (patch.c)
 * or the original. */
static const void *gp_load_image(const char *api, int lib, const void *image, struct gp_image *img,
				 struct gp_patch *pp)
{
	gp_session();
	gp_image_classify(image, img);
	return gp_patch_begin(api, lib, img, pp);
}

/* GP_LOAD(call_with_IMG, out): runs the load with the patched image, and
 * if that or the binding fails, again with the original (fail open). */
#define GP_LOAD(api, lib, image, out, ...)                                               \
	struct gp_image img;                                                             \
	struct gp_patch pp;                                                              \
	const void *IMG = gp_load_image(api, lib, image, &img, &pp);                     \
	CUresult r = real(__VA_ARGS__);                                                  \
	if (IMG != (image) && gp_patch_finish(&pp, r, (uint64_t)GP_OUT(r, out)) != 0) { \
		IMG = (image);                                                           \
		r = real(__VA_ARGS__);                                                   \
	}

/* gp_found records and traces what a kernel lookup through api returned:
 * handle (0 when there is none) is the kernel name of module (a CUmodule
 * or CUlibrary). */
static void gp_found(const char *api, CUresult r, uint64_t handle, uint64_t module, const char *name)
{
	if (handle && name) {
		gp_name_set(handle, module, name);
		gp_patch_lookup(handle, module, name);
	}
	GP_TRACE("%s(%p, \"%s\") = %d, %p", api, (void *)(uintptr_t)module, name ? name : "(null)", r,
		 (void *)(uintptr_t)handle);
}

/* ---- file loads ------------------------------------------------------- */

/* A file load (cuModuleLoad, cuLibraryLoadFromFile) is patched like a load
 * of the same bytes. When the session may patch, the shim reads the file
 * (gp_image_read_file: a regular file of 1..GP_IMAGE_MAX bytes) and
 * classifies it; PTX text or a fatbin goes to the collector, and patched
 * PTX is loaded with the data variant of the same family (cuModuleLoadData;
 * cuLibraryLoadData with the application's JIT and library options), so
 * kernel lookups, globals and unloads work on the handle the application
 * gets exactly as for a data load. Anything else (the file cannot be read,
 * is too large or bears no PTX; NOPATCH, no answer; a failed patched load
 * or binding) forwards the application's own call unchanged, and the
 * driver reads the file itself (its error, e.g. for a missing file, is what
 * the application sees). */
struct gp_fload {
	struct gp_image img;
	struct gp_patch pp;
	const void *patched; /* the patched PTX to load with the data variant, or NULL */
	void *data;          /* the driver's data variant */
};

/* gp_data_fn returns the driver's entry point name (cached in *cache). */
static void *gp_data_fn(void **cache, const char *name)
{
	void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (p == NULL && (p = gp_cuda_sym(name)) != NULL)
		__atomic_store_n(cache, p, __ATOMIC_RELEASE);
	return p;
}

static void gp_fload_begin(const char *api, int lib, const char *fname, void **cache, const char *data_name,
			   struct gp_fload *f)
{
	const char *why = NULL;
	int err = 0;
	memset(f, 0, sizeof *f);
	f->img.kind = GP_IMG_FILE, f->img.path = fname;
	gp_session();
	if (__atomic_load_n(&gp_state, __ATOMIC_ACQUIRE) != GP_READY || !gp_patch_enabled)
		return;
	if ((f->data = gp_data_fn(cache, data_name)) == NULL) {
		GP_TRACE("%s(\"%s\"): the driver has no %s: loading the file unpatched", api, fname ? fname : "(null)",
			 data_name);
		return;
	}
	void *copy = gp_image_read_file(fname, &f->img, &why, &err);
	if (copy == NULL) {
		GP_TRACE("%s(\"%s\"): not read for patching (%s, %d): the driver loads the file", api,
			 fname ? fname : "(null)", why, err);
		return;
	}
	if (f->img.size == 0 || (f->img.kind != GP_IMG_PTX && f->img.kind != GP_IMG_FATBIN))
		GP_TRACE("%s(\"%s\"): image kind %s (%zu bytes), no PTX to patch: the driver loads the file", api,
			 fname, gp_image_kind_name(f->img.kind), f->img.size);
	else {
		const void *p = gp_patch_begin(api, lib, &f->img, &f->pp);
		if (p != f->img.ptr)
			f->patched = p;
	}
	/* Sent (or not to be sent): the copy is not needed for the load. */
	free(copy);
	f->img.ptr = f->img.data = NULL;
}

/* ---- modules --------------------------------------------------------- */

#define GP_P_MOD_LOAD CUmodule *mod, const char *fname
#define GP_A_MOD_LOAD mod, fname
static void *gp_mod_load_data;
static CUresult gp_i_MOD_LOAD(struct gp_slot *s, GP_P_MOD_LOAD)
{
	CUresult (*real)(GP_P_MOD_LOAD) = GP_REAL(MOD_LOAD, s);
	struct gp_fload f;
	CUresult r;
	GP_FORWARD_OR_FAIL(real);
	gp_fload_begin("cuModuleLoad", 0, fname, &gp_mod_load_data, "cuModuleLoadData", &f);
	if (f.patched) {
		r = ((CUresult(*)(CUmodule *, const void *))f.data)(mod, f.patched);
		if (gp_patch_finish(&f.pp, r, (uint64_t)GP_OUT(r, mod)) == 0)
			goto loaded;
	}
	r = real(mod, fname);
loaded:
	gp_module_loaded("cuModuleLoad", (uint64_t)GP_OUT(r, mod), &f.img, r);
	return r;
}
GP_DEFINE_API(MOD_LOAD)
GP_EXPORT_AS(MOD_LOAD, 0, cuModuleLoad)

#define GP_P_MOD_LOAD_DATA CUmodule *mod, const void *image
#define GP_A_MOD_LOAD_DATA mod, image
static CUresult gp_i_MOD_LOAD_DATA(struct gp_slot *s, GP_P_MOD_LOAD_DATA)
{
	CUresult (*real)(GP_P_MOD_LOAD_DATA) = GP_REAL(MOD_LOAD_DATA, s);
	GP_FORWARD_OR_FAIL(real);
	GP_LOAD("cuModuleLoadData", 0, image, mod, mod, IMG);
	gp_module_loaded("cuModuleLoadData", (uint64_t)GP_OUT(r, mod), &img, r);
	return r;
}
GP_DEFINE_API(MOD_LOAD_DATA)
GP_EXPORT_AS(MOD_LOAD_DATA, 0, cuModuleLoadData)

#define GP_P_MOD_LOAD_DATA_EX \
	CUmodule *mod, const void *image, unsigned int nopt, CUjit_option *opts, void **vals
#define GP_A_MOD_LOAD_DATA_EX mod, image, nopt, opts, vals
static CUresult gp_i_MOD_LOAD_DATA_EX(struct gp_slot *s, GP_P_MOD_LOAD_DATA_EX)
{
	CUresult (*real)(GP_P_MOD_LOAD_DATA_EX) = GP_REAL(MOD_LOAD_DATA_EX, s);
	GP_FORWARD_OR_FAIL(real);
	GP_LOAD("cuModuleLoadDataEx", 0, image, mod, mod, IMG, nopt, opts, vals);
	gp_module_loaded("cuModuleLoadDataEx", (uint64_t)GP_OUT(r, mod), &img, r);
	return r;
}
GP_DEFINE_API(MOD_LOAD_DATA_EX)
GP_EXPORT_AS(MOD_LOAD_DATA_EX, 0, cuModuleLoadDataEx)

#define GP_P_MOD_LOAD_FATBIN CUmodule *mod, const void *fatbin
#define GP_A_MOD_LOAD_FATBIN mod, fatbin
static CUresult gp_i_MOD_LOAD_FATBIN(struct gp_slot *s, GP_P_MOD_LOAD_FATBIN)
{
	CUresult (*real)(GP_P_MOD_LOAD_FATBIN) = GP_REAL(MOD_LOAD_FATBIN, s);
	GP_FORWARD_OR_FAIL(real);
	GP_LOAD("cuModuleLoadFatBinary", 0, fatbin, mod, mod, IMG);
	gp_module_loaded("cuModuleLoadFatBinary", (uint64_t)GP_OUT(r, mod), &img, r);
	return r;
}
GP_DEFINE_API(MOD_LOAD_FATBIN)
GP_EXPORT_AS(MOD_LOAD_FATBIN, 0, cuModuleLoadFatBinary)

#define GP_P_MOD_GET_FUNCTION CUfunction *fn, CUmodule mod, const char *name
#define GP_A_MOD_GET_FUNCTION fn, mod, name
static CUresult gp_i_MOD_GET_FUNCTION(struct gp_slot *s, GP_P_MOD_GET_FUNCTION)
{
	CUresult (*real)(GP_P_MOD_GET_FUNCTION) = GP_REAL(MOD_GET_FUNCTION, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(fn, mod, name);
	gp_found("cuModuleGetFunction", r, (uint64_t)GP_OUT(r, fn), (uint64_t)mod, name);
	return r;
}
GP_DEFINE_API(MOD_GET_FUNCTION)
GP_EXPORT_AS(MOD_GET_FUNCTION, 0, cuModuleGetFunction)

/* Unloads: a patched module's device-only map memory is freed with it. */
static CUresult gp_unloaded(CUresult r, uint64_t handle)
{
	if (r == CUDA_SUCCESS) {
		gp_patch_unloaded(handle);
		gp_sass_unloaded();
	}
	return r;
}

#define GP_P_MOD_UNLOAD CUmodule mod
#define GP_A_MOD_UNLOAD mod
static CUresult gp_i_MOD_UNLOAD(struct gp_slot *s, GP_P_MOD_UNLOAD)
{
	CUresult (*real)(GP_P_MOD_UNLOAD) = GP_REAL(MOD_UNLOAD, s);
	GP_FORWARD_OR_FAIL(real);
	return gp_unloaded(real(mod), (uint64_t)mod);
}
GP_DEFINE_API(MOD_UNLOAD)
GP_EXPORT_AS(MOD_UNLOAD, 0, cuModuleUnload)

#define GP_P_LIB_UNLOAD CUlibrary lib
#define GP_A_LIB_UNLOAD lib
static CUresult gp_i_LIB_UNLOAD(struct gp_slot *s, GP_P_LIB_UNLOAD)
{
	CUresult (*real)(GP_P_LIB_UNLOAD) = GP_REAL(LIB_UNLOAD, s);
	GP_FORWARD_OR_FAIL(real);
	return gp_unloaded(real(lib), (uint64_t)lib);
}
GP_DEFINE_API(LIB_UNLOAD)
GP_EXPORT_AS(LIB_UNLOAD, 0, cuLibraryUnload)

/* ---- libraries (CUDA 12+) -------------------------------------------- */

/* CU_LIBRARY_BINARY_IS_PRESERVED: the driver may read the code it was
 * given until cuLibraryUnload instead of copying it. A patched image is
 * unmapped once loaded, so the patched load of cuLibraryLoadData is given
 * the application's library options without it (the option is only a
 * memory hint); with cuLibraryLoadFromFile it is invalid
 * (CUDA_ERROR_INVALID_VALUE), so such a file load is not patched and the
 * driver answers the application's call. */
#define GP_LIB_BINARY_IS_PRESERVED 1
#define GP_LIB_OPTS 8

static int gp_lib_preserved(const CUlibraryOption *o, unsigned n)
{
	for (unsigned i = 0; o != NULL && i < n; i++)
		if (o[i] == GP_LIB_BINARY_IS_PRESERVED)
			return 1;
	return 0;
}

/* gp_lib_unpreserved copies the n options o/v without
 * CU_LIBRARY_BINARY_IS_PRESERVED into o2/v2 (GP_LIB_OPTS entries) and
 * returns how many are left; -1 when they do not fit (then the load is
 * not patched). */
static int gp_lib_unpreserved(const CUlibraryOption *o, void **v, unsigned n, CUlibraryOption *o2, void **v2)
{
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++) {
		if (o[i] == GP_LIB_BINARY_IS_PRESERVED)
			continue;
		if (k == GP_LIB_OPTS)
			return -1;
		o2[k] = o[i], v2[k++] = v ? v[i] : NULL;
	}
	return (int)k;
}

#define GP_P_LIB_LOAD_DATA                                                                          \
	CUlibrary *lib, const void *code, CUjit_option *jopts, void **jvals, unsigned int njopt,   \
		CUlibraryOption *lopts, void **lvals, unsigned int nlopt
#define GP_A_LIB_LOAD_DATA lib, code, jopts, jvals, njopt, lopts, lvals, nlopt
static CUresult gp_i_LIB_LOAD_DATA(struct gp_slot *s, GP_P_LIB_LOAD_DATA)
{
	CUresult (*real)(GP_P_LIB_LOAD_DATA) = GP_REAL(LIB_LOAD_DATA, s);
	CUlibraryOption lo[GP_LIB_OPTS];
	void *lv[GP_LIB_OPTS];
	int nl = -2; /* the patched load's library options: the application's */
	GP_FORWARD_OR_FAIL(real);
	if (gp_lib_preserved(lopts, nlopt) && (nl = gp_lib_unpreserved(lopts, lvals, nlopt, lo, lv)) < 0) {
		/* Too many options to copy: no patching (rare enough). */
		gp_session();
		struct gp_image img;
		gp_image_classify(code, &img);
		GP_TRACE("cuLibraryLoadData: %u library options with CU_LIBRARY_BINARY_IS_PRESERVED: not patched", nlopt);
		CUresult r = real(lib, code, jopts, jvals, njopt, lopts, lvals, nlopt);
		gp_module_loaded("cuLibraryLoadData", (uint64_t)GP_OUT(r, lib), &img, r);
		return r;
	}
	GP_LOAD("cuLibraryLoadData", 1, code, lib, lib, IMG, jopts, jvals, njopt, IMG != code && nl >= 0 ? lo : lopts,
		IMG != code && nl >= 0 ? lv : lvals, IMG != code && nl >= 0 ? (unsigned)nl : nlopt);
	gp_module_loaded("cuLibraryLoadData", (uint64_t)GP_OUT(r, lib), &img, r);
	return r;
}
GP_DEFINE_API(LIB_LOAD_DATA)
GP_EXPORT_AS(LIB_LOAD_DATA, 0, cuLibraryLoadData)

#define GP_P_LIB_LOAD_FILE                                                                          \
	CUlibrary *lib, const char *fname, CUjit_option *jopts, void **jvals, unsigned int njopt,  \
		CUlibraryOption *lopts, void **lvals, unsigned int nlopt
#define GP_A_LIB_LOAD_FILE lib, fname, jopts, jvals, njopt, lopts, lvals, nlopt
static void *gp_lib_load_data;
static CUresult gp_i_LIB_LOAD_FILE(struct gp_slot *s, GP_P_LIB_LOAD_FILE)
{
	CUresult (*real)(GP_P_LIB_LOAD_FILE) = GP_REAL(LIB_LOAD_FILE, s);
	struct gp_fload f;
	CUresult r;
	GP_FORWARD_OR_FAIL(real);
	if (gp_lib_preserved(lopts, nlopt)) {
		/* Invalid with a file: the driver says so (not patched). */
		gp_session();
		memset(&f, 0, sizeof f);
		f.img.kind = GP_IMG_FILE, f.img.path = fname;
		GP_TRACE("cuLibraryLoadFromFile(\"%s\"): CU_LIBRARY_BINARY_IS_PRESERVED: not patched",
			 fname ? fname : "(null)");
	} else
		gp_fload_begin("cuLibraryLoadFromFile", 1, fname, &gp_lib_load_data, "cuLibraryLoadData", &f);
	if (f.patched) {
		r = ((CUresult(*)(GP_P_LIB_LOAD_DATA))f.data)(lib, f.patched, jopts, jvals, njopt, lopts, lvals, nlopt);
		if (gp_patch_finish(&f.pp, r, (uint64_t)GP_OUT(r, lib)) == 0)
			goto loaded;
	}
	r = real(lib, fname, jopts, jvals, njopt, lopts, lvals, nlopt);
loaded:
	gp_module_loaded("cuLibraryLoadFromFile", (uint64_t)GP_OUT(r, lib), &f.img, r);
	return r;
}
GP_DEFINE_API(LIB_LOAD_FILE)
GP_EXPORT_AS(LIB_LOAD_FILE, 0, cuLibraryLoadFromFile)

#define GP_P_LIB_GET_KERNEL CUkernel *k, CUlibrary lib, const char *name
#define GP_A_LIB_GET_KERNEL k, lib, name
static CUresult gp_i_LIB_GET_KERNEL(struct gp_slot *s, GP_P_LIB_GET_KERNEL)
{
	CUresult (*real)(GP_P_LIB_GET_KERNEL) = GP_REAL(LIB_GET_KERNEL, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(k, lib, name);
	gp_found("cuLibraryGetKernel", r, (uint64_t)GP_OUT(r, k), (uint64_t)lib, name);
	return r;
}
GP_DEFINE_API(LIB_GET_KERNEL)
GP_EXPORT_AS(LIB_GET_KERNEL, 0, cuLibraryGetKernel)

#define GP_P_KERNEL_GET_FUNCTION CUfunction *fn, CUkernel k
#define GP_A_KERNEL_GET_FUNCTION fn, k
static CUresult gp_i_KERNEL_GET_FUNCTION(struct gp_slot *s, GP_P_KERNEL_GET_FUNCTION)
{
	CUresult (*real)(GP_P_KERNEL_GET_FUNCTION) = GP_REAL(KERNEL_GET_FUNCTION, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(fn, k);
	if (r == CUDA_SUCCESS && fn && *fn) {
		gp_name_copy((uint64_t)k, (uint64_t)*fn);
		gp_patch_alias((uint64_t)k, (uint64_t)*fn);
	}
	GP_TRACE("cuKernelGetFunction(%p) = %d, %p (%s)", (void *)k, r, (void *)GP_OUT(r, fn),
		 gp_name_of((uint64_t)k) ? gp_name_of((uint64_t)k) : "unnamed");
	return r;
}
GP_DEFINE_API(KERNEL_GET_FUNCTION)
GP_EXPORT_AS(KERNEL_GET_FUNCTION, 0, cuKernelGetFunction)

/* ---- cuLink* (traced only) ----------------------------------------------
 * cuLinkComplete's output is a cubin (SASS, no PTX): the application loads
 * it with cuModuleLoadData(Ex) or cuLibraryLoadData, where it is recorded
 * like any image (kind elf) and not patched, as there is no PTX to patch.
 * PTX given to the linker (cuLinkAddData/cuLinkAddFile, CU_JIT_INPUT_PTX)
 * is compiled into that cubin and never reaches a load. */

static const char *gp_jit_input(CUjitInputType t)
{
	static const char *const n[] = {"cubin", "ptx", "fatbin", "object", "library", "nvvm"};
	return t >= 0 && t < (int)(sizeof n / sizeof n[0]) ? n[t] : "unknown";
}

#define GP_P_LINK_CREATE unsigned int nopt, CUjit_option *opts, void **vals, CUlinkState *state
#define GP_A_LINK_CREATE nopt, opts, vals, state
static CUresult gp_i_LINK_CREATE(struct gp_slot *s, GP_P_LINK_CREATE)
{
	CUresult (*real)(GP_P_LINK_CREATE) = GP_REAL(LINK_CREATE, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(nopt, opts, vals, state);
	GP_TRACE("cuLinkCreate(%u options) = %d, state %p", nopt, r, (void *)GP_OUT(r, state));
	return r;
}
GP_DEFINE_API(LINK_CREATE)
GP_EXPORT_AS(LINK_CREATE, 0, cuLinkCreate)
GP_EXPORT_AS(LINK_CREATE, 1, cuLinkCreate_v2)

#define GP_P_LINK_ADD_DATA                                                                          \
	CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,         \
		unsigned int nopt, CUjit_option *opts, void **vals
#define GP_A_LINK_ADD_DATA state, type, data, size, name, nopt, opts, vals
static CUresult gp_i_LINK_ADD_DATA(struct gp_slot *s, GP_P_LINK_ADD_DATA)
{
	CUresult (*real)(GP_P_LINK_ADD_DATA) = GP_REAL(LINK_ADD_DATA, s);
	GP_FORWARD_OR_FAIL(real);
	gp_session();
	CUresult r = real(state, type, data, size, name, nopt, opts, vals);
	GP_TRACE("cuLinkAddData(state %p, %s, %zu bytes, \"%s\") = %d", (void *)state, gp_jit_input(type), size,
		 name ? name : "", r);
	return r;
}
GP_DEFINE_API(LINK_ADD_DATA)
GP_EXPORT_AS(LINK_ADD_DATA, 0, cuLinkAddData)
GP_EXPORT_AS(LINK_ADD_DATA, 1, cuLinkAddData_v2)

#define GP_P_LINK_ADD_FILE \
	CUlinkState state, CUjitInputType type, const char *path, unsigned int nopt, CUjit_option *opts, void **vals
#define GP_A_LINK_ADD_FILE state, type, path, nopt, opts, vals
static CUresult gp_i_LINK_ADD_FILE(struct gp_slot *s, GP_P_LINK_ADD_FILE)
{
	CUresult (*real)(GP_P_LINK_ADD_FILE) = GP_REAL(LINK_ADD_FILE, s);
	GP_FORWARD_OR_FAIL(real);
	gp_session();
	CUresult r = real(state, type, path, nopt, opts, vals);
	GP_TRACE("cuLinkAddFile(state %p, %s, \"%s\") = %d", (void *)state, gp_jit_input(type), path ? path : "", r);
	return r;
}
GP_DEFINE_API(LINK_ADD_FILE)
GP_EXPORT_AS(LINK_ADD_FILE, 0, cuLinkAddFile)
GP_EXPORT_AS(LINK_ADD_FILE, 1, cuLinkAddFile_v2)

#define GP_P_LINK_COMPLETE CUlinkState state, void **cubin, size_t *size
#define GP_A_LINK_COMPLETE state, cubin, size
static CUresult gp_i_LINK_COMPLETE(struct gp_slot *s, GP_P_LINK_COMPLETE)
{
	CUresult (*real)(GP_P_LINK_COMPLETE) = GP_REAL(LINK_COMPLETE, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(state, cubin, size);
	GP_TRACE("cuLinkComplete(state %p) = %d, cubin %p, %zu bytes", (void *)state, r, GP_OUT(r, cubin), GP_OUT(r, size));
	return r;
}
GP_DEFINE_API(LINK_COMPLETE)
GP_EXPORT_AS(LINK_COMPLETE, 0, cuLinkComplete)
