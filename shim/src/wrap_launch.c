/*
 * wrap_launch.c - kernel launches: cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel (with their _ptsz variants) and cuGraphLaunch,
 * plus graph instantiation (to know the kernel nodes a graph launch runs).
 *
 * The hot path: two TSC reads, the real call, a lookup of the function's
 * name entry (lock-free), one launch record produced into the shared ring
 * (one atomic add on its head, a release store). No syscalls, locks or
 * allocations; with no session it only forwards.
 *
 * What keeps it cheap (the budget: 100 ns added per launch):
 *   - the gp_i_* launch bodies are always inlined into each wrapper, so a
 *     wrapper's slot is a constant and its arguments are not shifted by one
 *     register (and stack slot) to make room for the slot pointer; the
 *     forwarding path ends in a tail jump to the driver;
 *   - a process that sees one device never asks the driver for the device
 *     of a launch (gp_rec_device);
 *   - the launch ring's pages are faulted in at the handshake
 *     (gp_ring_prefault), not one page fault every few launches during the
 *     ring's first lap.
 *
 * Self-timing (GP_SELFTIME=1, bin/libgpuprobe-selftime.so; selftime.c):
 * each launch body reads the TSC at its start (GP_ST_BEGIN), just before
 * and just after the forwarded call (GP_ST_CALL) and at its end
 * (GP_ST_END, or GP_ST_FORWARD on the forward-only path), so the shim's
 * own instructions around the real call are measured on every launch.
 * Outside the stamps: the application's call into the wrapper, its
 * prologue and epilogue, and the few moves and pushes that set up the
 * driver call's arguments (the compiler places them after the stamp); the
 * stamps also make the compiler spill a few more registers, which is
 * timed. In production builds the macros are nothing, and the forward-only
 * path is still a tail jump.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gp.h"

/* Always inlined into the wrappers (see above). */
#define GP_HOT static inline __attribute__((always_inline))

#if GP_SELFTIME
/* The stamps of one launch: entry, before the call, after it. */
#define GP_ST_BEGIN() uint64_t gp_st_e = gp_st_now(), gp_st_c = 0, gp_st_r = 0
/* GP_ST_CALL(call): the forwarded call, stamped just before and after. */
#define GP_ST_CALL(call)                         \
	({                                       \
		gp_st_c = gp_st_now();           \
		CUresult gp_st_v_ = (call);      \
		gp_st_r = gp_st_now();           \
		gp_st_v_;                        \
	})
/* GP_ST_END(recorded): the exit stamp, then the accounting. */
#define GP_ST_END(recorded)                                                  \
	do {                                                                 \
		uint64_t gp_st_x = gp_st_now();                              \
		gp_st_done(gp_st_e, gp_st_c, gp_st_r, gp_st_x, (recorded)); \
	} while (0)
/* GP_ST_FORWARD(call): the forward-only path's call, stamped and counted. */
#define GP_ST_FORWARD(call)                            \
	({                                             \
		CUresult gp_st_f_ = GP_ST_CALL(call);  \
		GP_ST_END(0);                          \
		gp_st_f_;                              \
	})
#else
#define GP_ST_BEGIN() do { } while (0)
#define GP_ST_CALL(call) (call)
#define GP_ST_END(recorded) do { } while (0)
#define GP_ST_FORWARD(call) (call)
#endif

/* ---- the device of a record -------------------------------------------- */

/* gp_ndev: 0 not known yet, 1 the process sees one device (cuDeviceGetCount
 * is fixed for the life of a process, CUDA_VISIBLE_DEVICES applied), 2
 * several or unknown: ask cuCtxGetDevice per record. */
GP_HOT_VAR GP_HIDDEN int gp_ndev;

GP_HIDDEN uint32_t gp_device_slow(void)
{
	static void *count;
	static int looked;
	int n = __atomic_load_n(&gp_ndev, __ATOMIC_ACQUIRE);
	if (n == 0) {
		int c = 0;
		CUresult (*fn)(int *) = (CUresult(*)(int *))gp_cuda_sym_once(&count, &looked, "cuDeviceGetCount");
		if (fn == NULL)
			n = 2;
		else if (fn(&c) == CUDA_SUCCESS)
			n = c == 1 ? 1 : 2;
		/* else: not initialised yet; ask again at the next record */
		if (n != 0) {
			__atomic_store_n(&gp_ndev, n, __ATOMIC_RELEASE);
			GP_TRACE("devices: %s", n == 1 ? "one (records say device 0 without asking the driver)"
							: "several or unknown (cuCtxGetDevice per record)");
		}
	}
	return n == 1 ? 0 : gp_device();
}

/* ---- the launch ring's pages ------------------------------------------- */

/* At most this much of a ring is faulted in ahead (bytes). */
#define GP_PREFAULT_MAX ((uint64_t)256 << 20)

/* gp_ring_prefault faults in the pages of the session's launch ring, once
 * per session (handshake), so that the ring's first lap does not take a
 * page fault (about a microsecond) every 4096/slot-size records. A kernel
 * without MADV_POPULATE_WRITE (before 5.14) keeps faulting lazily. */
GP_HIDDEN void gp_ring_prefault(void)
{
	static uint32_t done_gen;
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	uint32_t g = __atomic_load_n(&gp_gen, __ATOMIC_ACQUIRE), d = __atomic_load_n(&done_gen, __ATOMIC_ACQUIRE);
	if (ring == NULL || d == g || !__atomic_compare_exchange_n(&done_gen, &d, g, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	/* The mapping's size: the header is the server's to rewrite. */
	uint64_t size = __atomic_load_n(&gp_ring_size, __ATOMIC_RELAXED);
	if (size > GP_PREFAULT_MAX)
		size = GP_PREFAULT_MAX;
#ifdef MADV_POPULATE_WRITE
	int r = madvise(ring, size, MADV_POPULATE_WRITE);
	GP_TRACE("launch ring: %llu bytes faulted in%s", (unsigned long long)size, r ? " (failed: lazily)" : "");
#else
	(void)size;
#endif
}

/* gp_launch_record writes the launch record (and, first, the function's
 * name record if this session has not had it). */
GP_HOT void gp_launch_record(void *ring, uint32_t api, uint64_t id, uint64_t t0, uint64_t t1,
				    uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				    unsigned by, unsigned bz, unsigned shmem, uint64_t stream, CUresult r,
				    uint32_t device)
{
	if (GP_UNLIKELY(!gx || !gy || !gz || !bx || !by || !bz))
		return; /* an invalid launch: the driver refused it */
	if (gp_captured(stream))
		return; /* captured into a graph: it runs at cuGraphLaunch */
	gp_name_emit_fast(f);
	gp_spanctx_emit(ring); /* before the launch: the collector applies it to what follows */
	gp_stack_emit(ring, id, t1);
	/* Written in place in the ring's slot: no copy from the stack. */
	uint64_t ticket;
	struct gpbr_slot *slot = gp_reserve(ring, sizeof(struct gp_rec_launch), &ticket);
	if (GP_UNLIKELY(slot == NULL))
		return;
	struct gp_rec_launch *rec = gpbr_ring_payload(slot);
	rec->h.type = GP_REC_LAUNCH;
	rec->h.version = GP_REC_VERSION;
	rec->h.size = sizeof *rec;
	rec->launch_id = id;
	rec->pid = gp_pid();
	rec->tid = gp_tid();
	rec->enqueue_ns = t0;
	rec->return_ns = t1;
	rec->stream = stream;
	rec->function = f;
	rec->device = device;
	rec->shared_mem = shmem;
	rec->grid[0] = gx, rec->grid[1] = gy, rec->grid[2] = gz;
	rec->block[0] = bx, rec->block[1] = by, rec->block[2] = bz;
	rec->result = (uint32_t)r;
	rec->api = api;
	gp_ring_commit(slot, ticket, GP_REC_LAUNCH, sizeof *rec);
	GP_COUNT(launches, 1);
}

/* Per-thread launch buffers of patched launches: kernelParams with the
 * launch id appended, and a copy of a CU_LAUNCH_PARAM_BUFFER_POINTER
 * buffer with the launch id written at its offset. */
static __thread void *gp_pbuf[GP_MAX_PARAMS + 1];
static __thread uint64_t gp_plid;
static __thread uint64_t gp_xbuf[GP_XBUF / 8];
static __thread size_t gp_xsize;
static __thread void *gp_xextra[5];

/* gp_rate_keep: whether a launch of pf's kernel keeps its id under
 * device_max_per_second: the first launch at or after next_ns does, and
 * moves next_ns one gap past now (a compare-and-swap, so of threads
 * launching at once exactly one wins). Only patched launches with a rate
 * set come here, and it reads the clock once. */
static int gp_rate_keep(struct gp_pfunc_info *pf)
{
	if (pf->max_rate == 0)
		return 1;
	uint64_t now = gp_now(), next = __atomic_load_n(&pf->next_ns, __ATOMIC_RELAXED);
	return now >= next && __atomic_compare_exchange_n(&pf->next_ns, &next, now + pf->gap_ns, 0,
							  __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* gp_patch_args_slow rewrites *params or *extra of a launch of *f when it
 * is a patched kernel: its hidden parameter gets the launch id, and *f
 * becomes the patched kernel swapped in for it (patch_async.c) if any. It
 * returns GP_LAUNCH_F_UNPROBED unless it did (the launch then runs no
 * probe), with GP_LAUNCH_F_PRESWAP while the patched image is not ready. */
static __attribute__((noinline)) uint32_t gp_patch_args_slow(CUfunction *f, uint64_t id, void ***params,
								 void ***extra, uint64_t stream)
{
#if GP_SELFTIME
	GP_ST_ADD(slow, 1);
#endif
	struct gp_pfunc_info *pf = gp_pfunc_get((uint64_t)*f);
	if (pf == NULL)
		return GP_LAUNCH_F_UNPROBED;
	uint32_t st = __atomic_load_n(&pf->state, __ATOMIC_ACQUIRE);
	if (GP_UNLIKELY(st != GP_PF_READY))
		return st == GP_PF_PENDING ? GP_LAUNCH_F_UNPROBED | GP_LAUNCH_F_PRESWAP : GP_LAUNCH_F_UNPROBED;
	uint64_t sw = __atomic_load_n(&pf->swap, __ATOMIC_RELAXED);
	if (sw != 0)
		*f = (CUfunction)sw;
	/* Device sampling: launch id 0, which the probes skip, to all but one
	 * launch in one_in (gp_sample_keep), and of those to all but max_rate
	 * a second (gp_rate_keep). A launch captured into a graph keeps its
	 * id: every replay of its node runs with it. */
	uint32_t fl = 0;
	gp_plid = id;
	if (GP_UNLIKELY(pf->one_in > 1 || pf->max_rate) && !gp_captured(stream) &&
	    ((pf->one_in > 1 && !gp_sample_keep(id, pf->one_in)) || !gp_rate_keep(pf)))
		gp_plid = 0, fl = GP_LAUNCH_F_UNPROBED;
	if (*params != NULL || (*extra == NULL && pf->index == 0)) {
		void **in = *params;
		for (uint32_t i = 0; i < pf->index; i++)
			gp_pbuf[i] = in[i];
		gp_pbuf[pf->index] = &gp_plid;
		*params = gp_pbuf;
		return fl;
	}
	void **e = *extra, *buf = NULL;
	size_t *size = NULL;
	for (int i = 0; e != NULL && i < 64 && e[i] != (void *)0; i += 2) {
		if (e[i] == (void *)1)
			buf = e[i + 1];
		else if (e[i] == (void *)2)
			size = e[i + 1];
		else
			return GP_LAUNCH_F_UNPROBED; /* an unknown key: leave the launch alone */
	}
	if (buf == NULL || size == NULL || *size > GP_XBUF)
		return GP_LAUNCH_F_UNPROBED;
	size_t n = *size > (size_t)pf->offset + 8 ? *size : (size_t)pf->offset + 8;
	memcpy(gp_xbuf, buf, *size);
	memcpy((uint8_t *)gp_xbuf + pf->offset, &gp_plid, 8);
	gp_xsize = n;
	gp_xextra[0] = (void *)1, gp_xextra[1] = gp_xbuf;
	gp_xextra[2] = (void *)2, gp_xextra[3] = &gp_xsize;
	gp_xextra[4] = (void *)0;
	*extra = gp_xextra;
	return fl;
}

/* gp_patch_args: inlined check, the copy out of line (patched launches
 * only); GP_LAUNCH_F_UNPROBED for a launch that runs no device probe, for
 * its launch record. */
GP_HOT uint32_t gp_patch_args(CUfunction *f, uint64_t id, void ***params, void ***extra, uint64_t stream)
{
	if (GP_UNLIKELY(__atomic_load_n(&gp_any_patched, __ATOMIC_ACQUIRE)))
		return gp_patch_args_slow(f, id, params, extra, stream);
	return GP_LAUNCH_F_UNPROBED;
}

#define GP_P_LAUNCH                                                                                 \
	CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
		unsigned shmem, CUstream st, void **params, void **extra
#define GP_A_LAUNCH f, gx, gy, gz, bx, by, bz, shmem, st, params, extra
GP_HOT CUresult gp_i_LAUNCH(struct gp_slot *s, GP_P_LAUNCH)
{
	GP_ST_BEGIN();
	CUresult (*real)(GP_P_LAUNCH) = GP_REAL(LAUNCH, s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL)
		return GP_ST_FORWARD(real(GP_A_LAUNCH));
	uint64_t id = gp_next_launch_id();
	uint64_t stream = gp_stream(s, st);
	uint32_t fl = gp_patch_args(&f, id, &params, &extra, stream);
	gp_ring_prefetch(ring, sizeof(struct gp_rec_launch));
	struct gp_stamp ts;
	gp_win_expect(id);
	gp_stamp_begin(&ts);
	CUresult r = GP_ST_CALL(real(GP_A_LAUNCH));
	gp_stamp_end(&ts);
	fl = gp_sass_note(fl | gp_win_note());
	gp_launch_record(ring, GP_API_LAUNCH_KERNEL | fl, id, ts.t0, ts.t1, (uint64_t)f, gx, gy, gz, bx,
			 by, bz, shmem, stream, r, gp_rec_device());
	GP_ST_END(1);
	return r;
}
GP_DEFINE_API(LAUNCH)
GP_EXPORT_AS(LAUNCH, 0, cuLaunchKernel)
GP_EXPORT_AS(LAUNCH, 1, cuLaunchKernel_ptsz)

/* gp_ex_kind: the launch-kind flags of a cuLaunchKernelEx config (its
 * attributes, a handful at most: read in place). */
static inline uint32_t gp_ex_kind(const CUlaunchConfig *cfg)
{
	uint32_t fl = 0;
	const unsigned char *a = cfg->attrs;
	for (unsigned int i = 0; a != NULL && i < cfg->numAttrs && i < 16; i++) {
		uint32_t id;
		memcpy(&id, a + (size_t)i * GP_CU_LAUNCH_ATTR_SIZE, sizeof id);
		if (id == GP_CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
			uint32_t on; /* the value's first int: cooperative */
			memcpy(&on, a + (size_t)i * GP_CU_LAUNCH_ATTR_SIZE + 8, sizeof on);
			fl |= on ? GP_LAUNCH_F_COOPERATIVE : 0;
		} else if (id == GP_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
			fl |= GP_LAUNCH_F_CLUSTER;
	}
	return fl;
}

#define GP_P_LAUNCH_EX const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra
#define GP_A_LAUNCH_EX cfg, f, params, extra
GP_HOT CUresult gp_i_LAUNCH_EX(struct gp_slot *s, GP_P_LAUNCH_EX)
{
	GP_ST_BEGIN();
	CUresult (*real)(GP_P_LAUNCH_EX) = GP_REAL(LAUNCH_EX, s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL || cfg == NULL)
		return GP_ST_FORWARD(real(GP_A_LAUNCH_EX));
	uint64_t id = gp_next_launch_id();
	uint64_t stream = gp_stream(s, cfg->hStream);
	uint32_t fl = gp_patch_args(&f, id, &params, &extra, stream);
	gp_ring_prefetch(ring, sizeof(struct gp_rec_launch));
	struct gp_stamp ts;
	gp_win_expect(id);
	gp_stamp_begin(&ts);
	CUresult r = GP_ST_CALL(real(GP_A_LAUNCH_EX));
	gp_stamp_end(&ts);
	fl = gp_sass_note(fl | gp_win_note() | gp_ex_kind(cfg));
	gp_launch_record(ring, GP_API_LAUNCH_KERNEL_EX | fl, id, ts.t0, ts.t1, (uint64_t)f, cfg->gridDimX,
			 cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ,
			 cfg->sharedMemBytes, stream, r, gp_rec_device());
	GP_ST_END(1);
	return r;
}
GP_DEFINE_API(LAUNCH_EX)
GP_EXPORT_AS(LAUNCH_EX, 0, cuLaunchKernelEx)
GP_EXPORT_AS(LAUNCH_EX, 1, cuLaunchKernelEx_ptsz)

#define GP_P_LAUNCH_COOP                                                                            \
	CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
		unsigned shmem, CUstream st, void **params
#define GP_A_LAUNCH_COOP f, gx, gy, gz, bx, by, bz, shmem, st, params
GP_HOT CUresult gp_i_LAUNCH_COOP(struct gp_slot *s, GP_P_LAUNCH_COOP)
{
	GP_ST_BEGIN();
	CUresult (*real)(GP_P_LAUNCH_COOP) = GP_REAL(LAUNCH_COOP, s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL)
		return GP_ST_FORWARD(real(GP_A_LAUNCH_COOP));
	uint64_t id = gp_next_launch_id();
	void **extra = NULL;
	uint64_t stream = gp_stream(s, st);
	uint32_t fl = gp_patch_args(&f, id, &params, &extra, stream);
	gp_ring_prefetch(ring, sizeof(struct gp_rec_launch));
	struct gp_stamp ts;
	gp_win_expect(id);
	gp_stamp_begin(&ts);
	CUresult r = GP_ST_CALL(real(GP_A_LAUNCH_COOP));
	gp_stamp_end(&ts);
	fl = gp_sass_note(fl | gp_win_note());
	gp_launch_record(ring, GP_API_LAUNCH_COOPERATIVE_KERNEL | fl, id, ts.t0, ts.t1, (uint64_t)f, gx,
			 gy, gz, bx, by, bz, shmem, stream, r, gp_rec_device());
	GP_ST_END(1);
	return r;
}
GP_DEFINE_API(LAUNCH_COOP)
GP_EXPORT_AS(LAUNCH_COOP, 0, cuLaunchCooperativeKernel)
GP_EXPORT_AS(LAUNCH_COOP, 1, cuLaunchCooperativeKernel_ptsz)

/* ---- graphs ------------------------------------------------------------ */

struct gp_gnode {
	uint64_t node;
	uint64_t func, id; /* atomic: cuGraphExec*NodeSetParams may change them */
	unsigned grid[3], block[3], shmem;
};
struct gp_graph {
	uint32_t n;
	struct gp_gnode nodes[];
};
struct gp_gentry {
	uint64_t exec; /* atomic */
	struct gp_graph *graph;
};
#define GP_GRAPHS 4096
#define GP_GRAPH_NODES_MAX 65536
static struct gp_gentry gp_graphs[GP_GRAPHS];

static struct gp_gentry *gp_graph_find(uint64_t exec, int create)
{
	uint32_t h = (uint32_t)((exec * 0x9E3779B97F4A7C15ull) >> 52);
	for (uint32_t i = 0; i < 64 && exec; i++) {
		struct gp_gentry *e = &gp_graphs[(h + i) % GP_GRAPHS];
		uint64_t k = __atomic_load_n(&e->exec, __ATOMIC_ACQUIRE);
		if (k == exec)
			return e;
		if (k != 0)
			continue;
		if (!create)
			return NULL;
		if (__atomic_compare_exchange_n(&e->exec, &k, exec, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
		    k == exec)
			return e;
	}
	return NULL;
}

struct gp_graph_api {
	CUresult (*get_nodes)(CUgraph, CUgraphNode *, size_t *);
	CUresult (*node_type)(CUgraphNode, int *);
	CUresult (*kparams)(CUgraphNode, GPkernelNodeParams *);
	CUresult (*child)(CUgraphNode, CUgraph *);
};

/* gp_graph_collect appends the kernel nodes of g (and of its child graphs,
 * to depth 8) to out. */
static void gp_graph_collect(const struct gp_graph_api *api, CUgraph g, struct gp_graph *out, uint32_t cap,
			     int depth)
{
	size_t n = 0;
	if (depth > 8 || api->get_nodes(g, NULL, &n) != CUDA_SUCCESS || n == 0 || n > GP_GRAPH_NODES_MAX)
		return;
	CUgraphNode *nodes = calloc(n, sizeof *nodes);
	if (nodes == NULL)
		return;
	if (api->get_nodes(g, nodes, &n) == CUDA_SUCCESS) {
		for (size_t i = 0; i < n && out->n < cap; i++) {
			int type = -1;
			if (api->node_type(nodes[i], &type) != CUDA_SUCCESS)
				continue;
			if (type == GP_CU_GRAPH_NODE_TYPE_KERNEL) {
				GPkernelNodeParams p;
				memset(&p, 0, sizeof p);
				if (api->kparams(nodes[i], &p) != CUDA_SUCCESS)
					continue;
				struct gp_gnode *k = &out->nodes[out->n++];
				k->node = (uint64_t)nodes[i];
				/* A node captured from a launch through a CUkernel (the
				 * CUDA 12+ runtime's way) reports the context's
				 * CUfunction and the CUkernel: the patched-kernel table
				 * and the name records know the CUkernel. */
				k->func = p.kern ? (uint64_t)p.kern : (uint64_t)p.func;
				k->id = gp_graph_node_id(k->func, p.kernelParams, p.extra);
				if (k->id == 0 && p.kern && p.func) {
					k->func = (uint64_t)p.func;
					k->id = gp_graph_node_id(k->func, p.kernelParams, p.extra);
				}
				k->grid[0] = p.gridDimX, k->grid[1] = p.gridDimY, k->grid[2] = p.gridDimZ;
				k->block[0] = p.blockDimX, k->block[1] = p.blockDimY, k->block[2] = p.blockDimZ;
				k->shmem = p.sharedMemBytes;
			} else if (type == GP_CU_GRAPH_NODE_TYPE_GRAPH && api->child) {
				CUgraph c;
				if (api->child(nodes[i], &c) == CUDA_SUCCESS)
					gp_graph_collect(api, c, out, cap, depth + 1);
			}
		}
	}
	free(nodes);
}

/* gp_graph_instantiated records the kernel nodes of a new executable graph
 * (cuGraphExec*Update is not followed; cuGraphExec*NodeSetParams of a
 * kernel node is, see wrap_graph.c). */
static void gp_graph_instantiated(CUgraphExec exec, CUgraph g)
{
	static struct gp_graph_api api;
	static int looked;
	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		api.get_nodes = (CUresult(*)(CUgraph, CUgraphNode *, size_t *))gp_cuda_sym("cuGraphGetNodes");
		api.node_type = (CUresult(*)(CUgraphNode, int *))gp_cuda_sym("cuGraphNodeGetType");
		api.kparams = (CUresult(*)(CUgraphNode, GPkernelNodeParams *))gp_cuda_sym("cuGraphKernelNodeGetParams_v2");
		if (api.kparams == NULL) /* v1 fills the same leading fields */
			api.kparams = (CUresult(*)(CUgraphNode, GPkernelNodeParams *))gp_cuda_sym("cuGraphKernelNodeGetParams");
		api.child = (CUresult(*)(CUgraphNode, CUgraph *))gp_cuda_sym("cuGraphChildGraphNodeGetGraph");
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	if (exec == NULL || api.get_nodes == NULL || api.node_type == NULL || api.kparams == NULL)
		return;
	uint32_t cap = 4096;
	struct gp_graph *gr = calloc(1, sizeof *gr + cap * sizeof gr->nodes[0]);
	if (gr == NULL)
		return;
	gp_graph_collect(&api, g, gr, cap, 0);
	struct gp_gentry *e = gp_graph_find((uint64_t)exec, 1);
	if (e == NULL) {
		free(gr);
		return;
	}
	/* An old graph of a reused handle is leaked, not freed: a concurrent
	 * cuGraphLaunch may still read it. */
	__atomic_store_n(&e->graph, gr, __ATOMIC_RELEASE);
	GP_TRACE("graph exec %p instantiated with %u kernel nodes", (void *)exec, gr->n);
}

/* gp_graph_exec_node_set follows cuGraphExec*NodeSetParams of a kernel
 * node: its function and launch id (0: none) in the executable graph. */
GP_HIDDEN void gp_graph_exec_node_set(uint64_t exec, uint64_t node, uint64_t func, uint64_t id)
{
	struct gp_gentry *e = gp_graph_find(exec, 0);
	struct gp_graph *g = e ? __atomic_load_n(&e->graph, __ATOMIC_ACQUIRE) : NULL;
	for (uint32_t i = 0; g != NULL && i < g->n; i++)
		if (g->nodes[i].node == node) {
			__atomic_store_n(&g->nodes[i].func, func, __ATOMIC_RELEASE);
			__atomic_store_n(&g->nodes[i].id, id, __ATOMIC_RELEASE);
		}
}

#define GP_P_GRAPH_INST_FLAGS CUgraphExec *exec, CUgraph g, unsigned long long flags
#define GP_A_GRAPH_INST_FLAGS exec, g, flags
static CUresult gp_i_GRAPH_INST_FLAGS(struct gp_slot *s, GP_P_GRAPH_INST_FLAGS)
{
	CUresult (*real)(GP_P_GRAPH_INST_FLAGS) = GP_REAL(GRAPH_INST_FLAGS, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(GP_A_GRAPH_INST_FLAGS);
	if (r == CUDA_SUCCESS && exec && gp_session())
		gp_graph_instantiated(*exec, g);
	return r;
}
GP_DEFINE_API(GRAPH_INST_FLAGS)
GP_EXPORT_AS(GRAPH_INST_FLAGS, 0, cuGraphInstantiateWithFlags)

#define GP_P_GRAPH_INST_PARAMS CUgraphExec *exec, CUgraph g, void *params
#define GP_A_GRAPH_INST_PARAMS exec, g, params
static CUresult gp_i_GRAPH_INST_PARAMS(struct gp_slot *s, GP_P_GRAPH_INST_PARAMS)
{
	CUresult (*real)(GP_P_GRAPH_INST_PARAMS) = GP_REAL(GRAPH_INST_PARAMS, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(GP_A_GRAPH_INST_PARAMS);
	if (r == CUDA_SUCCESS && exec && gp_session())
		gp_graph_instantiated(*exec, g);
	return r;
}
GP_DEFINE_API(GRAPH_INST_PARAMS)
GP_EXPORT_AS(GRAPH_INST_PARAMS, 0, cuGraphInstantiateWithParams)
GP_EXPORT_AS(GRAPH_INST_PARAMS, 1, cuGraphInstantiateWithParams_ptsz)

#define GP_P_GRAPH_INST_V2 CUgraphExec *exec, CUgraph g, CUgraphNode *err, char *log, size_t logsz
#define GP_A_GRAPH_INST_V2 exec, g, err, log, logsz
static CUresult gp_i_GRAPH_INST_V2(struct gp_slot *s, GP_P_GRAPH_INST_V2)
{
	CUresult (*real)(GP_P_GRAPH_INST_V2) = GP_REAL(GRAPH_INST_V2, s);
	GP_FORWARD_OR_FAIL(real);
	CUresult r = real(GP_A_GRAPH_INST_V2);
	if (r == CUDA_SUCCESS && exec && gp_session())
		gp_graph_instantiated(*exec, g);
	return r;
}
GP_DEFINE_API(GRAPH_INST_V2)
GP_EXPORT_AS(GRAPH_INST_V2, 0, cuGraphInstantiate)
GP_EXPORT_AS(GRAPH_INST_V2, 1, cuGraphInstantiate_v2)

/* cuGraphLaunch: one launch record per kernel node of the graph, all with
 * the graph launch call's timestamps and stream. */
#define GP_P_GRAPH_LAUNCH CUgraphExec exec, CUstream st
#define GP_A_GRAPH_LAUNCH exec, st
GP_HOT CUresult gp_i_GRAPH_LAUNCH(struct gp_slot *s, GP_P_GRAPH_LAUNCH)
{
	GP_ST_BEGIN();
	CUresult (*real)(GP_P_GRAPH_LAUNCH) = GP_REAL(GRAPH_LAUNCH, s);
	GP_FORWARD_OR_FAIL(real);
	void *ring = gp_session();
	if (ring == NULL)
		return GP_ST_FORWARD(real(GP_A_GRAPH_LAUNCH));
	gp_ring_prefetch(ring, sizeof(struct gp_rec_launch));
	/* The graph is known before the call (instantiation recorded it): its
	 * first node's launch id is the one its device windows are filed
	 * under (cupti.c; the collector matches them to nodes by name). */
	struct gp_gentry *e = gp_graph_find((uint64_t)exec, 0);
	const struct gp_graph *g = e ? __atomic_load_n(&e->graph, __ATOMIC_ACQUIRE) : NULL;
	uint64_t first = 0;
	if (g != NULL && g->n > 0) {
		first = __atomic_load_n(&g->nodes[0].id, __ATOMIC_ACQUIRE);
		if (first == 0)
			first = gp_next_launch_id();
		gp_win_expect(first);
	}
	struct gp_stamp ts;
	gp_self.in_graph = 1;
	gp_stamp_begin(&ts);
	CUresult r = GP_ST_CALL(real(GP_A_GRAPH_LAUNCH));
	gp_stamp_end(&ts);
	gp_self.in_graph = 0;
	uint32_t wfl = gp_win_note();
	GP_COUNT(graph_launches, 1);
	if (g == NULL) {
		GP_ST_END(1);
		return r;
	}
	uint32_t dev = gp_rec_device();
	uint64_t stream = gp_stream(s, st);
	for (uint32_t i = 0; i < g->n; i++) {
		const struct gp_gnode *k = &g->nodes[i];
		/* A patched kernel's node has its launch id in its parameters. */
		uint64_t id = __atomic_load_n(&k->id, __ATOMIC_ACQUIRE);
		uint64_t f = __atomic_load_n(&k->func, __ATOMIC_ACQUIRE);
		uint32_t fl = id ? GP_API_GRAPH_LAUNCH : GP_API_GRAPH_LAUNCH | GP_LAUNCH_F_UNPROBED;
		if (i == 0)
			id = first;
		else if (id == 0)
			id = gp_next_launch_id();
		gp_launch_record(ring, fl | wfl, id, ts.t0, ts.t1, f, k->grid[0], k->grid[1], k->grid[2],
				 k->block[0], k->block[1], k->block[2], k->shmem, stream, r, dev);
	}
	GP_ST_END(1);
	return r;
}
GP_DEFINE_API(GRAPH_LAUNCH)
GP_EXPORT_AS(GRAPH_LAUNCH, 0, cuGraphLaunch)
GP_EXPORT_AS(GRAPH_LAUNCH, 1, cuGraphLaunch_ptsz)
