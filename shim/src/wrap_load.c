/*
 * wrap_load.c - code loading and kernel lookup: cuModuleLoad*,
 * cuLibraryLoad*, cuModuleGetFunction, cuLibraryGetKernel,
 * cuKernelGetFunction, and the cuLink* family (recorded only).
 *
 * Every load classifies its image and passes it through gp_patch_image (the
 * hook where patched images will come from; today the original image).
 * Lookups record handle -> kernel name for the launch records.
 */
#define _GNU_SOURCE
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

/* ---- modules --------------------------------------------------------- */

#define GP_P_MOD_LOAD CUmodule *mod, const char *fname
#define GP_A_MOD_LOAD mod, fname
static CUresult gp_i_MOD_LOAD(struct gp_slot *s, GP_P_MOD_LOAD)
{
	CUresult (*real)(GP_P_MOD_LOAD) = GP_REAL(MOD_LOAD, s);
	struct gp_image img = {.kind = GP_IMG_FILE, .path = fname};
	GP_FORWARD_OR_FAIL(real);
	gp_session();
	CUresult r = real(mod, fname);
	gp_module_loaded("cuModuleLoad", (uint64_t)GP_OUT(r, mod), &img, r);
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
	if (r == CUDA_SUCCESS)
		gp_patch_unloaded(handle);
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

#define GP_P_LIB_LOAD_DATA                                                                          \
	CUlibrary *lib, const void *code, CUjit_option *jopts, void **jvals, unsigned int njopt,   \
		CUlibraryOption *lopts, void **lvals, unsigned int nlopt
#define GP_A_LIB_LOAD_DATA lib, code, jopts, jvals, njopt, lopts, lvals, nlopt
static CUresult gp_i_LIB_LOAD_DATA(struct gp_slot *s, GP_P_LIB_LOAD_DATA)
{
	CUresult (*real)(GP_P_LIB_LOAD_DATA) = GP_REAL(LIB_LOAD_DATA, s);
	GP_FORWARD_OR_FAIL(real);
	GP_LOAD("cuLibraryLoadData", 1, code, lib, lib, IMG, jopts, jvals, njopt, lopts, lvals, nlopt);
	gp_module_loaded("cuLibraryLoadData", (uint64_t)GP_OUT(r, lib), &img, r);
	return r;
}
GP_DEFINE_API(LIB_LOAD_DATA)
GP_EXPORT_AS(LIB_LOAD_DATA, 0, cuLibraryLoadData)

#define GP_P_LIB_LOAD_FILE                                                                          \
	CUlibrary *lib, const char *fname, CUjit_option *jopts, void **jvals, unsigned int njopt,  \
		CUlibraryOption *lopts, void **lvals, unsigned int nlopt
#define GP_A_LIB_LOAD_FILE lib, fname, jopts, jvals, njopt, lopts, lvals, nlopt
static CUresult gp_i_LIB_LOAD_FILE(struct gp_slot *s, GP_P_LIB_LOAD_FILE)
{
	CUresult (*real)(GP_P_LIB_LOAD_FILE) = GP_REAL(LIB_LOAD_FILE, s);
	struct gp_image img = {.kind = GP_IMG_FILE, .path = fname};
	GP_FORWARD_OR_FAIL(real);
	gp_session();
	CUresult r = real(lib, fname, jopts, jvals, njopt, lopts, lvals, nlopt);
	gp_module_loaded("cuLibraryLoadFromFile", (uint64_t)GP_OUT(r, lib), &img, r);
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

/* ---- cuLink* (recorded only: the linked cubin is loaded, and seen, by a
 * later cuModuleLoadData) -------------------------------------------------- */

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
