/*
 * ctxgone.c - cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxReset and
 * cuCtxDestroy (v1 and _v2): the calls that may destroy a context.
 *
 * A device map's copy lives in the context current at its bind (mirror.c);
 * when that context dies, so does the copy, with the records the mirror
 * has not drained yet. An application that releases its context before
 * exit (a driver-API program ending with cuDevicePrimaryCtxRelease) would
 * lose them all, so before forwarding these calls run one final pass over
 * the maps in that context, bounded to about 100 ms. Afterwards the maps
 * are forgotten only if the context died: a release that leaves the
 * primary context referenced keeps them mirrored. A primary context is
 * known by its device (cuCtxGetDevice at bind), so maps in another context
 * of that device get the pass too, and stop with it (safe, not exact).
 * Fail open: with no device maps these only forward.
 */
#define _GNU_SOURCE
#include "gp.h"

typedef CUresult (*gp_pctx_state_fn)(CUdevice, unsigned *, int *);

/* gp_primary_gone reports whether dev's primary context is not active
 * (or the driver cannot say: then its maps are treated as gone). */
static int gp_primary_gone(CUdevice dev)
{
	static void *state;
	static int looked;
	gp_pctx_state_fn fn = (gp_pctx_state_fn)gp_cuda_sym_once(&state, &looked, "cuDevicePrimaryCtxGetState");
	unsigned flags = 0;
	int active = 0;
	return fn == NULL || fn(dev, &flags, &active) != CUDA_SUCCESS || !active;
}

/* GP_PRIMARY_WRAPPER(ID): a wrapper of a primary-context call taking a
 * CUdevice. */
#define GP_PRIMARY_WRAPPER(ID)                                           \
	static CUresult gp_i_##ID(struct gp_slot *s, GP_P_##ID)          \
	{                                                                \
		CUresult (*real)(GP_P_##ID) = GP_REAL(ID, s);            \
		GP_FORWARD_OR_FAIL(real);                                \
		int held = gp_devmap_ctx_ending(NULL, dev);              \
		CUresult r = real(dev);                                  \
		if (held)                                                \
			gp_devmap_ctx_ended(gp_primary_gone(dev));       \
		return r;                                                \
	}                                                                \
	GP_DEFINE_API(ID)

/* Releases destroy the primary context only when its count drops to 0. */
#define GP_P_PRIMARY_RELEASE CUdevice dev
#define GP_A_PRIMARY_RELEASE dev
GP_PRIMARY_WRAPPER(PRIMARY_RELEASE)
GP_EXPORT_AS(PRIMARY_RELEASE, 0, cuDevicePrimaryCtxRelease)
GP_EXPORT_AS(PRIMARY_RELEASE, 1, cuDevicePrimaryCtxRelease_v2)

#define GP_P_PRIMARY_RESET CUdevice dev
#define GP_A_PRIMARY_RESET dev
GP_PRIMARY_WRAPPER(PRIMARY_RESET)
GP_EXPORT_AS(PRIMARY_RESET, 0, cuDevicePrimaryCtxReset)
GP_EXPORT_AS(PRIMARY_RESET, 1, cuDevicePrimaryCtxReset_v2)

/* A context destroyed is gone when the call succeeds. */
#define GP_P_CTX_DESTROY CUcontext ctx
#define GP_A_CTX_DESTROY ctx
static CUresult gp_i_CTX_DESTROY(struct gp_slot *s, GP_P_CTX_DESTROY)
{
	CUresult (*real)(GP_P_CTX_DESTROY) = GP_REAL(CTX_DESTROY, s);
	GP_FORWARD_OR_FAIL(real);
	int held = ctx != NULL && gp_devmap_ctx_ending(ctx, 0);
	CUresult r = real(ctx);
	if (held)
		gp_devmap_ctx_ended(r == CUDA_SUCCESS);
	return r;
}
GP_DEFINE_API(CTX_DESTROY)
GP_EXPORT_AS(CTX_DESTROY, 0, cuCtxDestroy)
GP_EXPORT_AS(CTX_DESTROY, 1, cuCtxDestroy_v2)
