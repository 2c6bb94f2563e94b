/*
 * wrap_misc.c - synchronisation and memory-copy records (the cuda.sync and
 * cuda.memcpy spans of docs/telemetry.md): cuStreamSynchronize, cuCtxSynchronize, cuMemcpy, cuMemcpyAsync and
 * the HtoD/DtoH/DtoD copies with their async and per-thread variants.
 */
#define _GNU_SOURCE
#include "gp.h"

static void gp_sync_record(void *ring, uint16_t kind, uint64_t stream, uint64_t t0, uint64_t t1)
{
	struct gp_rec_sync rec = {
		.h = {.type = GP_REC_SYNC, .version = GP_REC_VERSION, .size = sizeof rec},
		.start_ns = t0,
		.end_ns = t1,
		.stream = stream,
		.pid = gp_pid(),
		.tid = gp_tid(),
		.device = gp_rec_device(),
		.kind = kind,
	};
	gp_spanctx_emit(ring); /* before the record: the collector applies it to what follows */
	gp_produce(ring, GP_REC_SYNC, &rec, sizeof rec);
	GP_COUNT(syncs, 1);
}

#define GP_P_STREAM_SYNC CUstream st
#define GP_A_STREAM_SYNC st
static CUresult gp_i_STREAM_SYNC(struct gp_slot *s, GP_P_STREAM_SYNC)
{
	CUresult (*real)(GP_P_STREAM_SYNC) = GP_REAL(STREAM_SYNC, s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL)
		return real(st);
	struct gp_stamp ts;
	gp_stamp_begin(&ts);
	CUresult r = real(st);
	gp_stamp_end(&ts);
	gp_sync_record(ring, GP_SYNC_STREAM, gp_stream(s, st), ts.t0, ts.t1);
	return r;
}
GP_DEFINE_API(STREAM_SYNC)
GP_EXPORT_AS(STREAM_SYNC, 0, cuStreamSynchronize)
GP_EXPORT_AS(STREAM_SYNC, 1, cuStreamSynchronize_ptsz)

/* A parameter list must not be empty in these macros: cuCtxSynchronize's
 * wrappers take a dummy that is never passed on. */
#define GP_P_CTX_SYNC void
#define GP_A_CTX_SYNC
static CUresult gp_i_CTX_SYNC(struct gp_slot *s)
{
	CUresult (*real)(void) = (CUresult(*)(void))gp_real(s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL)
		return real();
	struct gp_stamp ts;
	gp_stamp_begin(&ts);
	CUresult r = real();
	gp_stamp_end(&ts);
	gp_sync_record(ring, GP_SYNC_CONTEXT, 0, ts.t0, ts.t1);
	return r;
}
static CUresult gp_w_CTX_SYNC_0(void);
static CUresult gp_w_CTX_SYNC_1(void);
static CUresult gp_w_CTX_SYNC_2(void);
static CUresult gp_w_CTX_SYNC_3(void);
GP_HIDDEN struct gp_slot gp_slots_CTX_SYNC[GP_NSLOTS] = {[0 ... GP_NSLOTS - 1] = {.api = GP_FN_CTX_SYNC}};
static CUresult gp_w_CTX_SYNC_0(void) { return gp_i_CTX_SYNC(&gp_slots_CTX_SYNC[GP_XSLOTS + 0]); }
static CUresult gp_w_CTX_SYNC_1(void) { return gp_i_CTX_SYNC(&gp_slots_CTX_SYNC[GP_XSLOTS + 1]); }
static CUresult gp_w_CTX_SYNC_2(void) { return gp_i_CTX_SYNC(&gp_slots_CTX_SYNC[GP_XSLOTS + 2]); }
static CUresult gp_w_CTX_SYNC_3(void) { return gp_i_CTX_SYNC(&gp_slots_CTX_SYNC[GP_XSLOTS + 3]); }
GP_HIDDEN void *const gp_wrappers_CTX_SYNC[GP_NDYN] = {(void *)gp_w_CTX_SYNC_0, (void *)gp_w_CTX_SYNC_1,
							(void *)gp_w_CTX_SYNC_2, (void *)gp_w_CTX_SYNC_3};
GP_EXPORT CUresult cuCtxSynchronize(void);
GP_EXPORT CUresult cuCtxSynchronize(void) { return gp_i_CTX_SYNC(&gp_slots_CTX_SYNC[0]); }

/* ---- memcpy ------------------------------------------------------------ */

static void gp_memcpy_record(void *ring, uint16_t kind, uint16_t flags, uint64_t bytes, uint64_t stream,
			     uint64_t t0, uint64_t t1)
{
	struct gp_rec_memcpy rec = {
		.h = {.type = GP_REC_MEMCPY, .version = GP_REC_VERSION, .size = sizeof rec},
		.bytes = bytes,
		.start_ns = t0,
		.end_ns = t1,
		.stream = stream,
		.pid = gp_pid(),
		.tid = gp_tid(),
		.device = gp_rec_device(),
		.kind = kind,
		.flags = flags,
	};
	gp_spanctx_emit(ring);
	gp_produce(ring, GP_REC_MEMCPY, &rec, sizeof rec);
	GP_COUNT(memcpys, 1);
}

/* GP_MEMCPY(ID, kind, async, n, stream-expression): the body of a memcpy
 * wrapper whose parameters are GP_P_<ID>. */
#define GP_MEMCPY(ID, KIND, FLAGS, N, STREAM)                                        \
	static CUresult gp_i_##ID(struct gp_slot *s, GP_P_##ID)                      \
	{                                                                            \
		CUresult (*real)(GP_P_##ID) = GP_REAL(ID, s);                        \
		GP_FORWARD_OR_FAIL(real);                                            \
		void *ring = gp_session();                                           \
		if (ring == NULL)                                                    \
			return real(GP_A_##ID);                                      \
		struct gp_stamp ts;                                                  \
		gp_stamp_begin(&ts);                                                 \
		CUresult r = real(GP_A_##ID);                                        \
		gp_stamp_end(&ts);                                                   \
		uint64_t stream = (uint64_t)(STREAM);                                \
		if (stream == 0 && s->ptsz && (FLAGS))                               \
			stream = GP_CU_STREAM_PER_THREAD;                            \
		if (r == CUDA_SUCCESS)                                               \
			gp_memcpy_record(ring, KIND, FLAGS, (uint64_t)(N), stream, ts.t0, ts.t1); \
		return r;                                                            \
	}                                                                            \
	GP_DEFINE_API(ID)

#define GP_P_MEMCPY CUdeviceptr dst, CUdeviceptr src, size_t n
#define GP_A_MEMCPY dst, src, n
GP_MEMCPY(MEMCPY, GP_MEMCPY_UNKNOWN, 0, n, 0)
GP_EXPORT_AS(MEMCPY, 0, cuMemcpy)
GP_EXPORT_AS(MEMCPY, 1, cuMemcpy_ptds)

#define GP_P_MEMCPY_ASYNC CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st
#define GP_A_MEMCPY_ASYNC dst, src, n, st
GP_MEMCPY(MEMCPY_ASYNC, GP_MEMCPY_UNKNOWN, GP_MEMCPY_ASYNC, n, st)
GP_EXPORT_AS(MEMCPY_ASYNC, 0, cuMemcpyAsync)
GP_EXPORT_AS(MEMCPY_ASYNC, 1, cuMemcpyAsync_ptsz)

#define GP_P_MEMCPY_HTOD CUdeviceptr dst, const void *src, size_t n
#define GP_A_MEMCPY_HTOD dst, src, n
GP_MEMCPY(MEMCPY_HTOD, GP_MEMCPY_HTOD, 0, n, 0)
GP_EXPORT_AS(MEMCPY_HTOD, 0, cuMemcpyHtoD_v2)
GP_EXPORT_AS(MEMCPY_HTOD, 1, cuMemcpyHtoD_v2_ptds)

#define GP_P_MEMCPY_DTOH void *dst, CUdeviceptr src, size_t n
#define GP_A_MEMCPY_DTOH dst, src, n
GP_MEMCPY(MEMCPY_DTOH, GP_MEMCPY_DTOH, 0, n, 0)
GP_EXPORT_AS(MEMCPY_DTOH, 0, cuMemcpyDtoH_v2)
GP_EXPORT_AS(MEMCPY_DTOH, 1, cuMemcpyDtoH_v2_ptds)

#define GP_P_MEMCPY_DTOD CUdeviceptr dst, CUdeviceptr src, size_t n
#define GP_A_MEMCPY_DTOD dst, src, n
GP_MEMCPY(MEMCPY_DTOD, GP_MEMCPY_DTOD, 0, n, 0)
GP_EXPORT_AS(MEMCPY_DTOD, 0, cuMemcpyDtoD_v2)
GP_EXPORT_AS(MEMCPY_DTOD, 1, cuMemcpyDtoD_v2_ptds)

#define GP_P_MEMCPY_HTOD_ASYNC CUdeviceptr dst, const void *src, size_t n, CUstream st
#define GP_A_MEMCPY_HTOD_ASYNC dst, src, n, st
GP_MEMCPY(MEMCPY_HTOD_ASYNC, GP_MEMCPY_HTOD, GP_MEMCPY_ASYNC, n, st)
GP_EXPORT_AS(MEMCPY_HTOD_ASYNC, 0, cuMemcpyHtoDAsync_v2)
GP_EXPORT_AS(MEMCPY_HTOD_ASYNC, 1, cuMemcpyHtoDAsync_v2_ptsz)

#define GP_P_MEMCPY_DTOH_ASYNC void *dst, CUdeviceptr src, size_t n, CUstream st
#define GP_A_MEMCPY_DTOH_ASYNC dst, src, n, st
GP_MEMCPY(MEMCPY_DTOH_ASYNC, GP_MEMCPY_DTOH, GP_MEMCPY_ASYNC, n, st)
GP_EXPORT_AS(MEMCPY_DTOH_ASYNC, 0, cuMemcpyDtoHAsync_v2)
GP_EXPORT_AS(MEMCPY_DTOH_ASYNC, 1, cuMemcpyDtoHAsync_v2_ptsz)
