/*
 * wrap_graph.c - kernel nodes built explicitly: cuGraphAddKernelNode,
 * cuGraphKernelNodeSetParams, cuGraphExecKernelNodeSetParams (v1 and _v2
 * structs) and the generic cuGraphAddNode(_v2), cuGraphNodeSetParams and
 * cuGraphExecNodeSetParams for kernel nodes.
 *
 * A patched kernel takes a hidden trailing launch-id parameter. Launches
 * get it appended by wrap_launch.c; a graph node gets it here: the node's
 * kernelParams (or CU_LAUNCH_PARAM_BUFFER_POINTER buffer) is passed as a
 * copy with a reserved id (GP_GRAPH_ID_BIT | counter) appended. The driver
 * copies the parameter values at the call, so the copy lives on this
 * call's stack (the buffer form: one bounded malloc of at most GP_XBUF).
 * At instantiation wrap_launch.c reads the id back from the node's
 * parameters (gp_graph_node_id), and every cuGraphLaunch records the node
 * with that id, the one its device-side records carry.
 *
 * Not the launch hot path: these run when a graph is built or edited.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gp.h"

/* CUDA_KERNEL_NODE_PARAMS (v1): GPkernelNodeParams up to extra. */
#define GP_KNODE_V1_SIZE offsetof(GPkernelNodeParams, kern)

/* The layouts cuda.h (12.x) fixes: v1 kernel node params 56 bytes,
 * CUgraphNodeParams 256 with the kernel member at 16. */
_Static_assert(GP_KNODE_V1_SIZE == 56, "CUDA_KERNEL_NODE_PARAMS_v1 layout");
_Static_assert(sizeof(GPkernelNodeParams) == 72, "CUDA_KERNEL_NODE_PARAMS_v2 layout");
_Static_assert(sizeof(GPgraphNodeParams) == 256, "CUgraphNodeParams size");
_Static_assert(offsetof(GPgraphNodeParams, u.kernel) == 16, "CUgraphNodeParams kernel offset");

static uint64_t gp_graph_ids;

/* gp_graph_next_id returns a fresh reserved graph-node launch id. */
static uint64_t gp_graph_next_id(void)
{
	return GP_GRAPH_ID_BIT | (__atomic_add_fetch(&gp_graph_ids, 1, __ATOMIC_RELAXED) & ~GP_GRAPH_ID_BIT);
}

static const struct gp_pfunc_info *gp_knode_pfunc(const GPkernelNodeParams *p, int v2)
{
	if (!__atomic_load_n(&gp_any_patched, __ATOMIC_ACQUIRE))
		return NULL;
	uint64_t f = p->func ? (uint64_t)p->func : v2 ? (uint64_t)p->kern : 0;
	return f ? gp_pfunc_find(f) : NULL;
}

/* gp_extra_buffer finds a CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE pair in
 * extra; 0 when extra has anything else. */
static int gp_extra_buffer(void **e, void **buf, size_t **size)
{
	*buf = NULL, *size = NULL;
	for (int i = 0; e != NULL && i < 64 && e[i] != (void *)0; i += 2) {
		if (e[i] == (void *)1)
			*buf = e[i + 1];
		else if (e[i] == (void *)2)
			*size = e[i + 1];
		else
			return 0;
	}
	return *buf != NULL && *size != NULL;
}

GP_HIDDEN uint64_t gp_graph_node_id(uint64_t func, void **params, void **extra)
{
	if (func == 0 || !__atomic_load_n(&gp_any_patched, __ATOMIC_ACQUIRE))
		return 0;
	const struct gp_pfunc_info *pf = gp_pfunc_find(func);
	uint64_t id = 0;
	void *buf;
	size_t *size;
	if (pf == NULL)
		return 0;
	if (params != NULL) {
		if (params[pf->index] != NULL)
			memcpy(&id, params[pf->index], 8);
	} else if (gp_extra_buffer(extra, &buf, &size) && *size >= (size_t)pf->offset + 8) {
		memcpy(&id, (const uint8_t *)buf + pf->offset, 8);
	}
	return id;
}

/* A node's rewritten parameters, valid for one driver call. */
struct gp_knode_fix {
	uint64_t id;
	int patched;
	void *pbuf[GP_MAX_PARAMS + 1];
	void *xbuf; /* malloc'd; gp_knode_done frees it */
	size_t xsize;
	void *xextra[5];
};

/* gp_knode_patch rewrites p (a copy the caller owns) when its function is
 * a patched kernel: its kernelParams or extra buffer get fx->id at the
 * hidden parameter. Returns 1 when rewritten. */
static int gp_knode_patch(GPkernelNodeParams *p, int v2, struct gp_knode_fix *fx, uint64_t id)
{
	const struct gp_pfunc_info *pf = gp_knode_pfunc(p, v2);
	if (pf == NULL)
		return 0;
	fx->id = id;
	fx->xbuf = NULL;
	if (p->kernelParams != NULL || (p->extra == NULL && pf->index == 0)) {
		for (uint32_t i = 0; i < pf->index; i++)
			fx->pbuf[i] = p->kernelParams[i];
		fx->pbuf[pf->index] = &fx->id;
		p->kernelParams = fx->pbuf;
		return 1;
	}
	void *buf;
	size_t *size;
	if (!gp_extra_buffer(p->extra, &buf, &size) || *size > GP_XBUF)
		return 0;
	size_t n = *size > (size_t)pf->offset + 8 ? *size : (size_t)pf->offset + 8;
	if ((fx->xbuf = calloc(1, n)) == NULL)
		return 0;
	memcpy(fx->xbuf, buf, *size);
	memcpy((uint8_t *)fx->xbuf + pf->offset, &fx->id, 8);
	fx->xsize = n;
	fx->xextra[0] = (void *)1, fx->xextra[1] = fx->xbuf;
	fx->xextra[2] = (void *)2, fx->xextra[3] = &fx->xsize;
	fx->xextra[4] = (void *)0;
	p->extra = fx->xextra;
	return 1;
}

static void gp_knode_done(struct gp_knode_fix *fx, const char *api, CUresult r)
{
	if (!fx->patched)
		return;
	free(fx->xbuf);
	fx->xbuf = NULL;
	GP_TRACE("%s: patched kernel node gets launch id %#llx (result %d)", api, (unsigned long long)fx->id, r);
}

/* gp_knode_prepare returns the kernel node params to pass the driver: in
 * itself, or *cp (a v2-sized copy of in) rewritten for a patched kernel
 * with a fresh reserved id; fx->patched says which. */
static const void *gp_knode_prepare(const void *in, int v2, GPkernelNodeParams *cp, struct gp_knode_fix *fx)
{
	fx->patched = 0, fx->xbuf = NULL, fx->id = 0;
	if (in == NULL)
		return in;
	memset(cp, 0, sizeof *cp);
	memcpy(cp, in, v2 ? sizeof *cp : GP_KNODE_V1_SIZE);
	if (gp_knode_patch(cp, v2, fx, gp_graph_next_id()) == 0)
		return in;
	fx->patched = 1;
	return cp;
}

static uint64_t gp_knode_func(const GPkernelNodeParams *p) { return p->func ? (uint64_t)p->func : (uint64_t)p->kern; }

/* ---- cuGraphAddKernelNode (v1, _v2) ----------------------------------- */

#define GP_P_GRAPH_ADD_KNODE CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps, const void *p
#define GP_A_GRAPH_ADD_KNODE node, g, deps, ndeps, p
static CUresult gp_add_knode(CUresult (*real)(GP_P_GRAPH_ADD_KNODE), int v2, GP_P_GRAPH_ADD_KNODE)
{
	GP_FORWARD_OR_FAIL(real);
	GPkernelNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(node, g, deps, ndeps, gp_knode_prepare(p, v2, &cp, &fx));
	gp_knode_done(&fx, "cuGraphAddKernelNode", r);
	return r;
}
static CUresult gp_i_GRAPH_ADD_KNODE(struct gp_slot *s, GP_P_GRAPH_ADD_KNODE)
{
	return gp_add_knode(GP_REAL(GRAPH_ADD_KNODE, s), 0, GP_A_GRAPH_ADD_KNODE);
}
GP_DEFINE_API(GRAPH_ADD_KNODE)
GP_EXPORT_AS(GRAPH_ADD_KNODE, 0, cuGraphAddKernelNode)

#define GP_P_GRAPH_ADD_KNODE2 GP_P_GRAPH_ADD_KNODE
#define GP_A_GRAPH_ADD_KNODE2 GP_A_GRAPH_ADD_KNODE
static CUresult gp_i_GRAPH_ADD_KNODE2(struct gp_slot *s, GP_P_GRAPH_ADD_KNODE)
{
	return gp_add_knode(GP_REAL(GRAPH_ADD_KNODE2, s), 1, GP_A_GRAPH_ADD_KNODE);
}
GP_DEFINE_API(GRAPH_ADD_KNODE2)
GP_EXPORT_AS(GRAPH_ADD_KNODE2, 0, cuGraphAddKernelNode_v2)

/* ---- cuGraphKernelNodeSetParams (v1, _v2) ------------------------------ */

#define GP_P_GRAPH_KNODE_SET CUgraphNode node, const void *p
#define GP_A_GRAPH_KNODE_SET node, p
static CUresult gp_knode_set(CUresult (*real)(GP_P_GRAPH_KNODE_SET), int v2, GP_P_GRAPH_KNODE_SET)
{
	GP_FORWARD_OR_FAIL(real);
	GPkernelNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(node, gp_knode_prepare(p, v2, &cp, &fx));
	gp_knode_done(&fx, "cuGraphKernelNodeSetParams", r);
	return r;
}
static CUresult gp_i_GRAPH_KNODE_SET(struct gp_slot *s, GP_P_GRAPH_KNODE_SET)
{
	return gp_knode_set(GP_REAL(GRAPH_KNODE_SET, s), 0, GP_A_GRAPH_KNODE_SET);
}
GP_DEFINE_API(GRAPH_KNODE_SET)
GP_EXPORT_AS(GRAPH_KNODE_SET, 0, cuGraphKernelNodeSetParams)

#define GP_P_GRAPH_KNODE_SET2 GP_P_GRAPH_KNODE_SET
#define GP_A_GRAPH_KNODE_SET2 GP_A_GRAPH_KNODE_SET
static CUresult gp_i_GRAPH_KNODE_SET2(struct gp_slot *s, GP_P_GRAPH_KNODE_SET)
{
	return gp_knode_set(GP_REAL(GRAPH_KNODE_SET2, s), 1, GP_A_GRAPH_KNODE_SET);
}
GP_DEFINE_API(GRAPH_KNODE_SET2)
GP_EXPORT_AS(GRAPH_KNODE_SET2, 0, cuGraphKernelNodeSetParams_v2)

/* ---- cuGraphExecKernelNodeSetParams (v1, _v2) -------------------------- */

#define GP_P_GRAPH_EXEC_KNODE_SET CUgraphExec exec, CUgraphNode node, const void *p
#define GP_A_GRAPH_EXEC_KNODE_SET exec, node, p
static CUresult gp_exec_knode_set(CUresult (*real)(GP_P_GRAPH_EXEC_KNODE_SET), int v2,
				  GP_P_GRAPH_EXEC_KNODE_SET)
{
	GP_FORWARD_OR_FAIL(real);
	GPkernelNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(exec, node, gp_knode_prepare(p, v2, &cp, &fx));
	gp_knode_done(&fx, "cuGraphExecKernelNodeSetParams", r);
	if (r == CUDA_SUCCESS && p != NULL)
		gp_graph_exec_node_set((uint64_t)exec, (uint64_t)node, gp_knode_func(&cp), fx.patched ? fx.id : 0);
	return r;
}
static CUresult gp_i_GRAPH_EXEC_KNODE_SET(struct gp_slot *s, GP_P_GRAPH_EXEC_KNODE_SET)
{
	return gp_exec_knode_set(GP_REAL(GRAPH_EXEC_KNODE_SET, s), 0, GP_A_GRAPH_EXEC_KNODE_SET);
}
GP_DEFINE_API(GRAPH_EXEC_KNODE_SET)
GP_EXPORT_AS(GRAPH_EXEC_KNODE_SET, 0, cuGraphExecKernelNodeSetParams)

#define GP_P_GRAPH_EXEC_KNODE_SET2 GP_P_GRAPH_EXEC_KNODE_SET
#define GP_A_GRAPH_EXEC_KNODE_SET2 GP_A_GRAPH_EXEC_KNODE_SET
static CUresult gp_i_GRAPH_EXEC_KNODE_SET2(struct gp_slot *s, GP_P_GRAPH_EXEC_KNODE_SET)
{
	return gp_exec_knode_set(GP_REAL(GRAPH_EXEC_KNODE_SET2, s), 1, GP_A_GRAPH_EXEC_KNODE_SET);
}
GP_DEFINE_API(GRAPH_EXEC_KNODE_SET2)
GP_EXPORT_AS(GRAPH_EXEC_KNODE_SET2, 0, cuGraphExecKernelNodeSetParams_v2)

/* ---- the generic node API (CUDA 12.2+): kernel nodes ------------------- */

/* gp_node_prepare returns the CUgraphNodeParams to pass: in itself, or *cp
 * (a copy) whose kernel member is rewritten for a patched kernel. */
static GPgraphNodeParams *gp_node_prepare(GPgraphNodeParams *in, GPgraphNodeParams *cp, struct gp_knode_fix *fx)
{
	fx->patched = 0, fx->xbuf = NULL, fx->id = 0;
	if (in == NULL || in->type != GP_CU_GRAPH_NODE_TYPE_KERNEL)
		return in;
	*cp = *in;
	if (gp_knode_patch(&cp->u.kernel, 1, fx, gp_graph_next_id()) == 0)
		return in;
	fx->patched = 1;
	return cp;
}

#define GP_P_GRAPH_ADD_NODE CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps, GPgraphNodeParams *p
#define GP_A_GRAPH_ADD_NODE node, g, deps, ndeps, p
static CUresult gp_i_GRAPH_ADD_NODE(struct gp_slot *s, GP_P_GRAPH_ADD_NODE)
{
	CUresult (*real)(GP_P_GRAPH_ADD_NODE) = GP_REAL(GRAPH_ADD_NODE, s);
	GP_FORWARD_OR_FAIL(real);
	GPgraphNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(node, g, deps, ndeps, gp_node_prepare(p, &cp, &fx));
	gp_knode_done(&fx, "cuGraphAddNode", r);
	return r;
}
GP_DEFINE_API(GRAPH_ADD_NODE)
GP_EXPORT_AS(GRAPH_ADD_NODE, 0, cuGraphAddNode)

#define GP_P_GRAPH_ADD_NODE2                                                                    \
	CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const GPgraphEdgeData *edges, size_t ndeps, \
		GPgraphNodeParams *p
#define GP_A_GRAPH_ADD_NODE2 node, g, deps, edges, ndeps, p
static CUresult gp_i_GRAPH_ADD_NODE2(struct gp_slot *s, GP_P_GRAPH_ADD_NODE2)
{
	CUresult (*real)(GP_P_GRAPH_ADD_NODE2) = GP_REAL(GRAPH_ADD_NODE2, s);
	GP_FORWARD_OR_FAIL(real);
	GPgraphNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(node, g, deps, edges, ndeps, gp_node_prepare(p, &cp, &fx));
	gp_knode_done(&fx, "cuGraphAddNode_v2", r);
	return r;
}
GP_DEFINE_API(GRAPH_ADD_NODE2)
GP_EXPORT_AS(GRAPH_ADD_NODE2, 0, cuGraphAddNode_v2)

#define GP_P_GRAPH_NODE_SET CUgraphNode node, GPgraphNodeParams *p
#define GP_A_GRAPH_NODE_SET node, p
static CUresult gp_i_GRAPH_NODE_SET(struct gp_slot *s, GP_P_GRAPH_NODE_SET)
{
	CUresult (*real)(GP_P_GRAPH_NODE_SET) = GP_REAL(GRAPH_NODE_SET, s);
	GP_FORWARD_OR_FAIL(real);
	GPgraphNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(node, gp_node_prepare(p, &cp, &fx));
	gp_knode_done(&fx, "cuGraphNodeSetParams", r);
	return r;
}
GP_DEFINE_API(GRAPH_NODE_SET)
GP_EXPORT_AS(GRAPH_NODE_SET, 0, cuGraphNodeSetParams)

#define GP_P_GRAPH_EXEC_NODE_SET CUgraphExec exec, CUgraphNode node, GPgraphNodeParams *p
#define GP_A_GRAPH_EXEC_NODE_SET exec, node, p
static CUresult gp_i_GRAPH_EXEC_NODE_SET(struct gp_slot *s, GP_P_GRAPH_EXEC_NODE_SET)
{
	CUresult (*real)(GP_P_GRAPH_EXEC_NODE_SET) = GP_REAL(GRAPH_EXEC_NODE_SET, s);
	GP_FORWARD_OR_FAIL(real);
	GPgraphNodeParams cp;
	struct gp_knode_fix fx;
	CUresult r = real(exec, node, gp_node_prepare(p, &cp, &fx));
	gp_knode_done(&fx, "cuGraphExecNodeSetParams", r);
	if (r == CUDA_SUCCESS && p != NULL && p->type == GP_CU_GRAPH_NODE_TYPE_KERNEL)
		gp_graph_exec_node_set((uint64_t)exec, (uint64_t)node, gp_knode_func(&p->u.kernel),
				       fx.patched ? fx.id : 0);
	return r;
}
GP_DEFINE_API(GRAPH_EXEC_NODE_SET)
GP_EXPORT_AS(GRAPH_EXEC_NODE_SET, 0, cuGraphExecNodeSetParams)
