/*
 * capture.c - stream capture: cuStreamBeginCapture (v1 and _v2),
 * cuStreamBeginCaptureToGraph and cuStreamEndCapture, with their per-thread
 * variants.
 *
 * A launch into a stream that is capturing does not run: it becomes a node
 * of the graph the capture builds, and it runs at each cuGraphLaunch of that
 * graph, which writes its launch records (wrap_launch.c). So a captured
 * launch must write no launch record, or the collector would wait for a
 * device window that never comes and report a launch that never ran. It
 * still takes a launch id and, if the kernel is patched, passes it as the
 * hidden parameter: the node keeps it, and every run of the node carries it.
 *
 * The launch path cannot ask the driver about every launch (that would be a
 * call per launch, for the few launches that are captured). It asks only
 * while some capture is open: gp_captures counts the streams that began a
 * capture and have not ended it, and while it is 0 the check is one relaxed
 * load. A stream joined to a capture through an event is not in the table,
 * but its origin is, so its launches are asked about too.
 *
 * A capture that is never ended (its stream destroyed mid-capture, which is
 * an application error) keeps the count above 0: launches then ask the
 * driver each time, which costs time but stays correct.
 */
#define _GNU_SOURCE
#include "gp.h"

/* CUstreamCaptureStatus: CU_STREAM_CAPTURE_STATUS_NONE. */
#define GP_CAPTURE_NONE 0

/* Open captures' origin streams: 0 is a free slot (the legacy stream
 * cannot capture). More at once than this makes the count sticky. */
#define GP_CAPTURES 64
static uint64_t gp_capture_streams[GP_CAPTURES];
static int gp_capture_overflow;
/* The first of the hot variables (capture.c links first): it starts their
 * section on a cache line. */
GP_HOT_VAR GP_HIDDEN uint32_t gp_captures __attribute__((aligned(64)));

typedef CUresult (*gp_is_capturing_fn)(CUstream, int *);

/* gp_capture_status is stream's capture status, or -1 if the driver does
 * not say (no such call, or an error: the legacy stream while another
 * stream captures in global mode, for one). */
static int gp_capture_status(uint64_t stream)
{
	static void *is_capturing;
	static int looked;
	gp_is_capturing_fn fn = (gp_is_capturing_fn)gp_cuda_sym_once(&is_capturing, &looked, "cuStreamIsCapturing");
	int st = GP_CAPTURE_NONE;
	if (fn == NULL || fn((CUstream)stream, &st) != CUDA_SUCCESS)
		return -1;
	return st;
}

GP_HIDDEN int gp_captured_slow(uint64_t stream)
{
	int st = gp_capture_status(stream);
	/* Active or invalidated: either way the launch did not run. */
	if (st <= GP_CAPTURE_NONE)
		return 0;
	GP_COUNT(captured, 1);
	return 1;
}

/* gp_capture_begun adds stream, which has just begun a capture. */
static void gp_capture_begun(uint64_t stream)
{
	for (int i = 0; i < GP_CAPTURES; i++) {
		uint64_t free_slot = 0;
		if (__atomic_compare_exchange_n(&gp_capture_streams[i], &free_slot, stream, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			__atomic_add_fetch(&gp_captures, 1, __ATOMIC_RELEASE);
			GP_TRACE("stream %p: capture begun (launches in it write no launch records)", (void *)stream);
			return;
		}
	}
	int off = 0;
	if (__atomic_compare_exchange_n(&gp_capture_overflow, &off, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&gp_captures, 1, __ATOMIC_RELEASE);
		GP_TRACE("more than %d captures at once: every launch now asks the driver whether it is captured",
			 GP_CAPTURES);
	}
}

/* gp_capture_ended forgets stream after cuStreamEndCapture, unless the
 * driver says it still captures (an end from the wrong thread fails and
 * leaves the capture open). */
static void gp_capture_ended(uint64_t stream)
{
	if (gp_capture_status(stream) > GP_CAPTURE_NONE)
		return;
	for (int i = 0; i < GP_CAPTURES; i++) {
		uint64_t s = stream;
		if (__atomic_compare_exchange_n(&gp_capture_streams[i], &s, 0, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			__atomic_sub_fetch(&gp_captures, 1, __ATOMIC_RELEASE);
			GP_TRACE("stream %p: capture ended", (void *)stream);
			return;
		}
	}
}

/* GP_CAPTURE_WRAPPER(ID, stream-expression, condition, then): the body of
 * a wrapper whose parameters are GP_P_<ID>; then(stream) runs after the
 * call if the condition (which may test its result r) holds. */
#define GP_CAPTURE_WRAPPER(ID, ST, COND, THEN)                               \
	static CUresult gp_i_##ID(struct gp_slot *s, GP_P_##ID)              \
	{                                                                    \
		CUresult (*real)(GP_P_##ID) = GP_REAL(ID, s);                \
		GP_FORWARD_OR_FAIL(real);                                    \
		CUresult r = real(GP_A_##ID);                                \
		if (COND)                                                    \
			THEN(gp_stream(s, (ST)));                            \
		return r;                                                    \
	}                                                                    \
	GP_DEFINE_API(ID)

/* A capture begins only if the call succeeds. */
#define GP_BEGUN (r == CUDA_SUCCESS)

#define GP_P_CAPTURE_BEGIN CUstream st, int mode
#define GP_A_CAPTURE_BEGIN st, mode
GP_CAPTURE_WRAPPER(CAPTURE_BEGIN, st, GP_BEGUN, gp_capture_begun)
GP_EXPORT_AS(CAPTURE_BEGIN, 0, cuStreamBeginCapture_v2)
GP_EXPORT_AS(CAPTURE_BEGIN, 1, cuStreamBeginCapture_v2_ptsz)

/* CUDA 10.0's signature, before capture modes. */
#define GP_P_CAPTURE_BEGIN1 CUstream st
#define GP_A_CAPTURE_BEGIN1 st
GP_CAPTURE_WRAPPER(CAPTURE_BEGIN1, st, GP_BEGUN, gp_capture_begun)
GP_EXPORT_AS(CAPTURE_BEGIN1, 0, cuStreamBeginCapture)
GP_EXPORT_AS(CAPTURE_BEGIN1, 1, cuStreamBeginCapture_ptsz)

#define GP_P_CAPTURE_TO_GRAPH \
	CUstream st, CUgraph g, const CUgraphNode *deps, const void *edges, size_t ndeps, int mode
#define GP_A_CAPTURE_TO_GRAPH st, g, deps, edges, ndeps, mode
GP_CAPTURE_WRAPPER(CAPTURE_TO_GRAPH, st, GP_BEGUN, gp_capture_begun)
GP_EXPORT_AS(CAPTURE_TO_GRAPH, 0, cuStreamBeginCaptureToGraph)
GP_EXPORT_AS(CAPTURE_TO_GRAPH, 1, cuStreamBeginCaptureToGraph_ptsz)

/* cuStreamEndCapture: the capture ends even when it fails as invalidated,
 * so the stream is forgotten whatever the result, once the driver says it
 * no longer captures. */
#define GP_P_CAPTURE_END CUstream st, CUgraph *g
#define GP_A_CAPTURE_END st, g
GP_CAPTURE_WRAPPER(CAPTURE_END, st, __atomic_load_n(&gp_captures, __ATOMIC_ACQUIRE) != 0, gp_capture_ended)
GP_EXPORT_AS(CAPTURE_END, 0, cuStreamEndCapture)
GP_EXPORT_AS(CAPTURE_END, 1, cuStreamEndCapture_ptsz)

/* gp_capture_relax switches this thread to CU_STREAM_CAPTURE_MODE_RELAXED
 * (2) and returns 1, with the application's mode in *mode, or 0 when the
 * driver cannot. CUDA 13's runtime loads a module at its first launch,
 * which may be inside a global-mode stream capture; the shim's own driver
 * calls there (binding a patched module, calibrating) would otherwise
 * invalidate the application's capture. */
static void *gp_xmode;
static int gp_xmode_looked;

GP_HIDDEN int gp_capture_relax(int *mode)
{
	CUresult (*x)(int *) =
		(CUresult(*)(int *))gp_cuda_sym_once(&gp_xmode, &gp_xmode_looked, "cuThreadExchangeStreamCaptureMode");
	*mode = 2;
	return x != NULL && x(mode) == CUDA_SUCCESS;
}

/* gp_capture_restore gives the thread back the mode gp_capture_relax saved. */
GP_HIDDEN void gp_capture_restore(int relaxed, int mode)
{
	CUresult (*x)(int *) = (CUresult(*)(int *))__atomic_load_n(&gp_xmode, __ATOMIC_ACQUIRE);
	if (relaxed)
		x(&mode);
}
