/*
 * spanctx.c - the application's span context: the launches a thread makes
 * under one of its spans become that span's children in the collector's
 * traces (record type 14, gp_rec_span_context).
 *
 * The application hands its current span to the shim with
 * gpuprobe_set_span_context (../include/gpuprobe_shim.h): a copy into the
 * thread's own storage and a generation bump, nothing shared. The record
 * paths (gp_spanctx_emit, from gp_launch_record and wrap_misc.c's copy and
 * sync records) compare that generation with the one last written and,
 * when they differ, write one span_context record into the launch ring
 * before their own: the collector applies it to the thread's following
 * launches, copies and syncs. A process that never
 * sets a context pays one predictable branch per launch.
 *
 * TRACEPARENT (W3C) in the environment is the context of every thread that
 * has none of its own, read once when the session starts; an invalid value
 * is ignored and said once in the GPUPROBE_TRACE log.
 *
 * A thread's first launch of a session writes its context even when it is
 * none (once the process uses contexts at all): the collector keys
 * contexts by thread id, and a new thread may reuse a dead one's id; a new
 * session (collector restart, fork child) starts with no contexts, so each
 * thread writes its own again.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gp.h"
#include "../include/gpuprobe_shim.h"

/* gp_spanctx_used: some thread set a context, or TRACEPARENT is valid. */
GP_HOT_VAR GP_HIDDEN int gp_spanctx_used;

/* A thread's context and what of it the current session has. */
struct gp_spanctx {
	uint8_t trace[16];
	uint8_t span[8];
	uint8_t flags;
	uint8_t own;     /* set by gpuprobe_set_span_context (else TRACEPARENT's or none) */
	uint8_t written; /* some record was written in session `session` */
	uint32_t gen;    /* bumped at each set and clear */
	uint32_t wgen;   /* gen at the latest record */
	uint32_t session; /* gp_gen at the latest record */
};
static __thread struct gp_spanctx gp_sc __attribute__((tls_model("initial-exec")));

/* The process's TRACEPARENT context (valid: parsed and usable). */
static struct {
	uint8_t trace[16];
	uint8_t span[8];
	uint8_t flags;
	int valid;
} gp_env_ctx;

static int gp_all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

GP_EXPORT int gpuprobe_set_span_context(const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags)
{
	if (trace_id == NULL || span_id == NULL || gp_all_zero(trace_id, 16) || gp_all_zero(span_id, 8))
		return -1;
	memcpy(gp_sc.trace, trace_id, 16);
	memcpy(gp_sc.span, span_id, 8);
	gp_sc.flags = flags;
	gp_sc.own = 1;
	gp_sc.gen++;
	if (GP_UNLIKELY(!__atomic_load_n(&gp_spanctx_used, __ATOMIC_RELAXED)))
		__atomic_store_n(&gp_spanctx_used, 1, __ATOMIC_RELAXED);
	return 0;
}

GP_EXPORT void gpuprobe_clear_span_context(void)
{
	if (!gp_sc.own)
		return;
	gp_sc.own = 0;
	gp_sc.gen++;
}

/* gp_hexval: the value of lowercase hex digit c, -1 for anything else (W3C
 * traceparent is lowercase). */
static int gp_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* gp_hex reads n bytes from 2n hex digits at s; 0 on success. */
static int gp_hex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = gp_hexval(s[2 * i]), lo = gp_hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* gp_traceparent_parse reads a W3C traceparent
 * ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"): NULL on
 * success, else why it is not one. A version above 00 (not ff) may carry
 * more fields after a '-', which are ignored, as the recommendation asks. */
GP_HIDDEN const char *gp_traceparent_parse(const char *s, uint8_t trace[16], uint8_t span[8], uint8_t *flags)
{
	uint8_t ver;
	size_t n = strlen(s);
	if (n < 55)
		return "shorter than 55 characters";
	if (gp_hex(s, &ver, 1) || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return "not version-traceid-spanid-flags";
	if (ver == 0xff)
		return "version ff is invalid";
	if (n > 55 && (ver == 0 || s[55] != '-'))
		return "unexpected characters after the flags";
	if (gp_hex(s + 3, trace, 16) || gp_hex(s + 36, span, 8) || gp_hex(s + 53, flags, 1))
		return "not lowercase hex";
	if (gp_all_zero(trace, 16))
		return "all-zero trace id";
	if (gp_all_zero(span, 8))
		return "all-zero span id";
	return NULL;
}

GP_HIDDEN void gp_spanctx_env(void)
{
	static int said; /* inherited by a fork child: said once per process tree */
	const char *tp = getenv("TRACEPARENT");
	if (tp == NULL || tp[0] == 0)
		return;
	const char *why = gp_traceparent_parse(tp, gp_env_ctx.trace, gp_env_ctx.span, &gp_env_ctx.flags);
	if (why != NULL) {
		if (!said)
			GP_TRACE("TRACEPARENT=%.64s ignored: %s", tp, why);
		said = 1;
		return;
	}
	gp_env_ctx.valid = 1;
	__atomic_store_n(&gp_spanctx_used, 1, __ATOMIC_RELAXED);
	if (!said)
		GP_TRACE("TRACEPARENT: launches of threads without a span context of their own join trace %.32s",
			 tp + 3);
	said = 1;
}

/* gp_spanctx_write writes the thread's current context (its own, else
 * TRACEPARENT's, else none) into ring; a full ring leaves it unwritten,
 * to be tried again at the next launch. */
static __attribute__((noinline)) void gp_spanctx_write(void *ring, uint32_t session)
{
	uint64_t ticket;
	struct gpbr_slot *slot = gp_reserve(ring, sizeof(struct gp_rec_span_context), &ticket);
	if (slot == NULL)
		return;
	struct gp_rec_span_context *rec = gpbr_ring_payload(slot);
	memset(rec, 0, sizeof *rec);
	rec->h.type = GP_REC_SPAN_CONTEXT;
	rec->h.version = GP_REC_VERSION;
	rec->h.size = sizeof *rec;
	rec->pid = gp_pid();
	rec->tid = gp_tid();
	if (gp_sc.own) {
		memcpy(rec->trace_id, gp_sc.trace, 16);
		memcpy(rec->span_id, gp_sc.span, 8);
		rec->flags = gp_sc.flags;
		rec->source = GP_SPANCTX_THREAD;
	} else if (gp_env_ctx.valid) {
		memcpy(rec->trace_id, gp_env_ctx.trace, 16);
		memcpy(rec->span_id, gp_env_ctx.span, 8);
		rec->flags = gp_env_ctx.flags;
		rec->source = GP_SPANCTX_ENV;
	}
	gp_ring_commit(slot, ticket, GP_REC_SPAN_CONTEXT, sizeof *rec);
	gp_sc.written = 1;
	gp_sc.wgen = gp_sc.gen;
	gp_sc.session = session;
}

GP_HIDDEN void gp_spanctx_check(void *ring)
{
	uint32_t session = __atomic_load_n(&gp_gen, __ATOMIC_RELAXED);
	if (GP_LIKELY(gp_sc.written && gp_sc.wgen == gp_sc.gen && gp_sc.session == session))
		return;
	gp_spanctx_write(ring, session);
}
