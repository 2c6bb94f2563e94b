/*
 * bind.c - the values of a patched module's globals (PATCHED global
 * descriptors, agent's GlobalKind): a shared-memory region's device
 * address, a constant, a ring's device block, device memory of the module's
 * own, a device map's copy (mirror.c). Used for PTX modules (patch.c) and
 * for the SASS route's patch module (sass_user.c). Load time, never the
 * launch path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gp.h"

#define GP_HOSTREG_PORTABLE 1u
#define GP_HOSTREG_DEVICEMAP 2u

/* gp_region_dev returns the device address of WELCOME region i, mapping
 * and registering it (DEVICEMAP, PORTABLE) the first time. A kernel map's
 * fd (no header) is mapped the same way: MAP_SHARED of a BPF_F_MMAPABLE
 * array gives its values at offset 0. A region that failed is not retried,
 * so every later module binds it the same way (and pays no syscalls). */
GP_HIDDEN int gp_region_dev(uint32_t i, uint64_t *dev)
{
	struct gp_region *r = &gp_regions[i];
	if (r->dev) {
		*dev = r->dev;
		return 0;
	}
	if (r->failed || r->fd < 0 || r->size == 0 || gp_drv.host_register == NULL || gp_drv.host_dev_ptr == NULL)
		return -ENOENT;
	if (r->host == NULL) {
		void *m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
		if (m == MAP_FAILED) {
			r->failed = 1;
			return -errno;
		}
		r->host = m;
	}
	CUresult c = gp_drv.host_register(r->host, r->size, GP_HOSTREG_DEVICEMAP | GP_HOSTREG_PORTABLE);
	CUdeviceptr d = 0;
	if (c == CUDA_SUCCESS)
		c = gp_drv.host_dev_ptr(&d, r->host, 0);
	if (c != CUDA_SUCCESS || d == 0) {
		r->failed = 1;
		return c ? c : -EFAULT;
	}
	r->dev = d;
	*dev = d;
	return 0;
}

/* gp_region_optional: a region whose failure leaves its globals 0 rather
 * than failing the module (see GP_ROLE_KERNEL_MAP in gp.h). */
static int gp_region_optional(uint32_t i)
{
	return gp_regions[i].role == GP_ROLE_KERNEL_MAP || gp_regions[i].role == GP_ROLE_CLOCK;
}

/* gp_unbound logs, once per region, that an optional region could not be
 * registered, and counts it (always: this is load time, not launch). */
static void gp_unbound(const char *api, uint32_t i, int code)
{
	if (gp_regions[i].unbound)
		return;
	gp_regions[i].unbound = 1;
	__atomic_fetch_add(&gp_stats.unbound, 1, __ATOMIC_RELAXED);
	GP_TRACE("%s: region %u (role %u, %llu bytes) cannot be registered with the device (%d): "
		 "its globals stay 0, the GPU programs see it as absent",
		 api, i, gp_regions[i].role, (unsigned long long)gp_regions[i].size, code);
}

/* gp_ring_block returns region i's device reservation block, allocating
 * it (size bytes, init then zeros) the first time. */
static int gp_ring_block(uint32_t i, uint64_t size, const uint8_t *init, uint32_t ilen, uint64_t *dev)
{
	struct gp_region *r = &gp_regions[i];
	if (r->block) {
		if (r->block_size != size)
			return -EINVAL;
		*dev = r->block;
		return 0;
	}
	CUdeviceptr d = 0;
	if (gp_drv.mem_alloc == NULL || gp_drv.memset8 == NULL || gp_drv.htod == NULL)
		return -ENOENT;
	CUresult c = gp_drv.mem_alloc(&d, size);
	if (c == CUDA_SUCCESS)
		c = gp_drv.memset8(d, 0, size);
	if (c == CUDA_SUCCESS && ilen)
		c = gp_drv.htod(d, init, ilen);
	if (c != CUDA_SUCCESS) {
		if (d && gp_drv.mem_free)
			gp_drv.mem_free(d);
		return c;
	}
	r->block = *dev = d, r->block_size = size;
	return 0;
}

static int gp_module_alloc(struct gp_allocs *a, uint32_t num, uint64_t size, uint64_t *dev)
{
	for (uint32_t i = 0; i < a->n; i++)
		if (a->num[i] == num) {
			if (a->size[i] != size)
				return -EINVAL;
			*dev = a->dev[i];
			return 0;
		}
	if (a->n == GP_MOD_ALLOCS || gp_drv.mem_alloc == NULL || gp_drv.memset8 == NULL || size == 0)
		return -ENOSPC;
	CUdeviceptr d = 0;
	CUresult c = gp_drv.mem_alloc(&d, size);
	if (c == CUDA_SUCCESS)
		c = gp_drv.memset8(d, 0, size);
	if (c != CUDA_SUCCESS) {
		if (d && gp_drv.mem_free)
			gp_drv.mem_free(d);
		return c;
	}
	a->num[a->n] = num, a->size[a->n] = size, a->dev[a->n++] = d;
	*dev = d;
	return 0;
}

/* gp_global_next parses the PATCHED global descriptor at *p (agent's
 * MarshalPatched) and moves *p past it. */
GP_HIDDEN int gp_global_next(const uint8_t **p, const uint8_t *end, struct gp_gdesc *g, const char **why)
{
	const uint8_t *q = *p;
	if (end - q < 32) {
		*why = "PATCHED global descriptor out of bounds";
		return -EPROTO;
	}
	g->kind = rd32(q), g->region = rd32(q + 4), g->value = rd64(q + 8), g->size = rd64(q + 16);
	uint32_t nl = rd32(q + 24), il = rd32(q + 28);
	if (nl == 0 || nl > 4096 || il > 256 || (uint64_t)nl + il > (uint64_t)(end - q - 32)) {
		*why = "PATCHED global descriptor out of bounds";
		return -EPROTO;
	}
	memcpy(g->name, q + 32, nl);
	g->name[nl] = 0;
	g->init = q + 32 + nl, g->il = il;
	*p = q + 32 + nl + il;
	return 0;
}

/* gp_global_value computes the value of global g: a region's device
 * address, a constant, a device block or allocation (allocs: the module's
 * or context's own); 0 for an optional region that cannot be registered
 * or a device map that cannot be made. */
GP_HIDDEN int gp_global_value(const char *api, const struct gp_gdesc *g, struct gp_allocs *allocs, uint64_t *out,
			      const char **why)
{
	uint64_t v = 0;
	int err = 0;
	gp_drv_init();
	switch (g->kind) {
	case 1:
		if (g->region >= gp_nregions || g->value > gp_regions[g->region].size)
			return *why = "global's region is not in WELCOME", -EINVAL;
		err = gp_region_dev(g->region, &v);
		if (err && gp_region_optional(g->region)) {
			gp_unbound(api, g->region, err);
			err = 0, v = 0;
			break;
		}
		v += g->value;
		*why = "registering a region (cuMemHostRegister DEVICEMAP)";
		break;
	case 2:
		v = g->value;
		break;
	case 3:
		if (g->region >= gp_nregions || g->il > g->size || g->size == 0 || g->size > ((uint64_t)1 << 30))
			return *why = "ring block's region or size", -EINVAL;
		err = gp_ring_block(g->region, g->size, g->init, g->il, &v);
		*why = "ring device block (cuMemAlloc)";
		break;
	case 4:
		if (g->size > ((uint64_t)1 << 36))
			return *why = "device allocation size", -EINVAL;
		err = gp_module_alloc(allocs, g->region, g->size, &v);
		*why = "module device memory (cuMemAlloc)";
		break;
	case 5: /* mirror.c; a failure gives 0, not a failed module */
		if (g->region >= gp_nregions || g->value > gp_regions[g->region].size)
			return *why = "device map's region is not in WELCOME", -EINVAL;
		/* mirror.c keeps its copies by region number: after a
		 * reconnect those name the old session's regions. */
		v = !__atomic_load_n(&gp_reconnects, __ATOMIC_ACQUIRE) && gp_devmap_bind(api, g->region, g->size, &v) == 0
			? v + g->value : 0;
		break;
	default:
		return *why = "unknown global kind", -EINVAL;
	}
	*out = v;
	return err;
}

