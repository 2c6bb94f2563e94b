/*
 * calib.c - joint readings of %globaltimer and CLOCK_MONOTONIC (Calibration
 * records), so the collector can put device timestamps (warp records, GPU
 * probes' bpf_ktime_get_ns) on the host clock.
 *
 * Method: a one-thread kernel reads %globaltimer, then a host-mapped word
 * that a host thread keeps overwriting with CLOCK_MONOTONIC, then
 * %globaltimer again, 64 times. A host value h seen between GPU times g1 and
 * g2 was written before g2, so g2 - h bounds (globaltimer - monotonic) from
 * above; the smallest bound over the samples is the reading, and g2 - g1 of
 * that sample (one PCIe read, about 1 us) is its uncertainty. No stream or
 * context of the application is touched: the kernel lives in a module of
 * ours, runs on a stream of ours, and the host waits at most GP_CAL_WAIT_NS.
 *
 * It runs once per context, after the first module load of a patching
 * session (not on the launch path), and again after GP_CAL_EVERY_NS.
 */
#define _GNU_SOURCE
#include <string.h>

#include "gp.h"

GP_HIDDEN void gp_calibrate(void);

#define GP_CAL_SAMPLES 64
#define GP_CAL_WAIT_NS 50000000ull    /* give up after 50 ms */
#define GP_CAL_EVERY_NS 10000000000ull /* refresh a context's reading after 10 s */
#define GP_CAL_CTXS 16

/* Host-mapped block: [0] monotonic (host writes), [1] g2 of the best
 * sample, [2] its host value, [3] its g2 - g1, [4] done (GPU writes 1).
 * The kernel takes 64 samples of the host's word once the host writes it,
 * waiting up to 40 ms of %globaltimer for the first: a launch call that
 * returns late (CUPTI's activity adds work to it) can leave the kernel
 * done before the host's first write, with no sample (seen on an H200). */
static const char gp_cal_ptx[] =
	".version 6.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry __gpuprobe_calibrate(.param .u64 blk)\n"
	"{\n"
	"	.reg .u64 %a, %h, %g1, %g2, %d, %w, %bd, %bg, %bh, %bw, %t0, %e;\n"
	"	.reg .u32 %i;\n"
	"	.reg .pred %p, %q;\n"
	"	ld.param.u64 %a, [blk];\n"
	"	mov.u64 %bd, -1;\n"
	"	mov.u64 %bg, 0;\n"
	"	mov.u64 %bh, 0;\n"
	"	mov.u64 %bw, 0;\n"
	"	mov.u32 %i, 0;\n"
	"	mov.u64 %t0, %globaltimer;\n"
	"L:\n"
	"	mov.u64 %g1, %globaltimer;\n"
	"	ld.volatile.global.u64 %h, [%a];\n"
	"	mov.u64 %g2, %globaltimer;\n"
	"	setp.eq.u64 %q, %h, 0;\n"
	"	sub.u64 %d, %g2, %h;\n"
	"	sub.u64 %w, %g2, %g1;\n"
	"	setp.lt.u64 %p, %d, %bd;\n"
	"	@%q bra N;\n"
	"	@%p mov.u64 %bd, %d;\n"
	"	@%p mov.u64 %bg, %g2;\n"
	"	@%p mov.u64 %bh, %h;\n"
	"	@%p mov.u64 %bw, %w;\n"
	"	add.u32 %i, %i, 1;\n"
	"N:\n"
	"	sub.u64 %e, %g2, %t0;\n"
	"	setp.gt.u64 %p, %e, 40000000;\n"
	"	@%p bra D;\n"
	"	setp.lt.u32 %p, %i, 64;\n"
	"	@%p bra L;\n"
	"D:\n"
	"	st.volatile.global.u64 [%a+8], %bg;\n"
	"	st.volatile.global.u64 [%a+16], %bh;\n"
	"	st.volatile.global.u64 [%a+24], %bw;\n"
	"	membar.sys;\n"
	"	st.volatile.global.u64 [%a+32], 1;\n"
	"	ret;\n"
	"}\n";

static struct {
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_get_device)(CUdevice *);
	CUresult (*mod_load_data)(CUmodule *, const void *);
	CUresult (*mod_get_function)(CUfunction *, CUmodule, const char *);
	CUresult (*host_alloc)(void **, size_t, unsigned int);
	CUresult (*host_dev_ptr)(CUdeviceptr *, void *, unsigned int);
	CUresult (*stream_create)(CUstream *, unsigned int);
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			   CUstream, void **, void **);
	CUresult (*stream_sync)(CUstream);
	int looked, ok;
} gp_cal_drv;

/* One context's calibration state. */
struct gp_cal_ctx {
	CUcontext ctx;
	CUfunction fn;
	CUstream stream;
	volatile uint64_t *blk;
	CUdeviceptr dblk;
	uint64_t last;
	int broken;
};
static struct gp_cal_ctx gp_cal_ctxs[GP_CAL_CTXS];
static int gp_cal_busy; /* one calibration at a time, process-wide */

static void gp_cal_init(void)
{
	if (gp_cal_drv.looked)
		return;
#define S(f, n) *(void **)&gp_cal_drv.f = gp_cuda_sym(n)
	S(ctx_get_current, "cuCtxGetCurrent");
	S(ctx_get_device, "cuCtxGetDevice");
	S(mod_load_data, "cuModuleLoadData");
	S(mod_get_function, "cuModuleGetFunction");
	S(host_alloc, "cuMemHostAlloc");
	S(host_dev_ptr, "cuMemHostGetDevicePointer_v2");
	S(stream_create, "cuStreamCreate");
	S(launch, "cuLaunchKernel");
	S(stream_sync, "cuStreamSynchronize");
#undef S
	gp_cal_drv.ok = gp_cal_drv.ctx_get_current && gp_cal_drv.ctx_get_device && gp_cal_drv.mod_load_data &&
			gp_cal_drv.mod_get_function && gp_cal_drv.host_alloc && gp_cal_drv.host_dev_ptr &&
			gp_cal_drv.stream_create && gp_cal_drv.launch && gp_cal_drv.stream_sync;
	gp_cal_drv.looked = 1;
}

/* gp_cal_setup loads our module and allocates the block in the current
 * context; 0 on success. */
static int gp_cal_setup(struct gp_cal_ctx *c)
{
	CUmodule mod;
	void *p;
	if (gp_cal_drv.mod_load_data(&mod, gp_cal_ptx) != CUDA_SUCCESS ||
	    gp_cal_drv.mod_get_function(&c->fn, mod, "__gpuprobe_calibrate") != CUDA_SUCCESS)
		return -1;
	/* DEVICEMAP | PORTABLE: mapped into the device's address space. */
	if (gp_cal_drv.host_alloc(&p, 4096, 0x02 | 0x01) != CUDA_SUCCESS)
		return -1;
	if (gp_cal_drv.host_dev_ptr(&c->dblk, p, 0) != CUDA_SUCCESS)
		return -1;
	/* CU_STREAM_NON_BLOCKING: never ordered with the legacy stream. */
	if (gp_cal_drv.stream_create(&c->stream, 0x1) != CUDA_SUCCESS)
		return -1;
	c->blk = (volatile uint64_t *)p;
	return 0;
}

GP_HIDDEN void gp_calibrate(void)
{
	void *ring = gp_session();
	if (ring == NULL)
		return;
	gp_cal_init();
	if (!gp_cal_drv.ok)
		return;
	CUcontext ctx = NULL;
	if (gp_cal_drv.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == NULL)
		return;
	if (__atomic_exchange_n(&gp_cal_busy, 1, __ATOMIC_ACQUIRE))
		return; /* another thread is calibrating: one reading is enough */
	struct gp_cal_ctx *c = NULL;
	for (int i = 0; i < GP_CAL_CTXS; i++) {
		if (gp_cal_ctxs[i].ctx == ctx || gp_cal_ctxs[i].ctx == NULL) {
			c = &gp_cal_ctxs[i];
			break;
		}
	}
	/* Our module load, launch and sync must not disturb an application's
	 * stream capture (see gp_capture_relax). */
	int mode, relaxed = gp_capture_relax(&mode);
	uint64_t now = gp_now();
	if (c == NULL || c->broken || (c->ctx == ctx && now - c->last < GP_CAL_EVERY_NS))
		goto out;
	if (c->ctx == NULL) {
		c->ctx = ctx;
		if (gp_cal_setup(c) != 0) {
			c->broken = 1;
			GP_TRACE("calibration: setting up in context %p failed", (void *)ctx);
			goto out;
		}
	}
	memset((void *)c->blk, 0, 5 * sizeof(uint64_t));
	void *args[] = {&c->dblk};
	if (gp_cal_drv.launch(c->fn, 1, 1, 1, 1, 1, 1, 0, c->stream, args, NULL) != CUDA_SUCCESS) {
		c->broken = 1;
		goto out;
	}
	/* Keep the word fresh until the kernel is done (bounded). */
	uint64_t t0 = gp_now(), t = t0;
	while (c->blk[4] == 0 && t - t0 < GP_CAL_WAIT_NS) {
		t = gp_now();
		c->blk[0] = t;
	}
	if (gp_cal_drv.stream_sync(c->stream) != CUDA_SUCCESS || c->blk[4] != 1 || c->blk[2] == 0) {
		GP_TRACE("calibration: no reading (done %llu)", (unsigned long long)c->blk[4]);
		goto out;
	}
	c->last = now;
	struct timespec mono, real;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &real);
	int64_t off = ((int64_t)real.tv_sec - (int64_t)mono.tv_sec) * 1000000000 +
		      ((int64_t)real.tv_nsec - (int64_t)mono.tv_nsec);
	CUdevice dev = 0;
	gp_cal_drv.ctx_get_device(&dev);
	uint64_t w = c->blk[3];
	struct gp_rec_calibration rec = {
		.h = {.type = GP_REC_CALIBRATION, .version = GP_REC_VERSION, .size = sizeof rec},
		.mono_ns = c->blk[2],
		.realtime_ns = (uint64_t)((int64_t)c->blk[2] + off),
		.gpu_ns = c->blk[1],
		.device = (uint32_t)dev,
		.uncertainty_ns = w > 0xffffffffu ? 0xffffffffu : (uint32_t)w,
	};
	gp_produce(ring, GP_REC_CALIBRATION, &rec, sizeof rec);
	/* Seed the clock region (CLOCK_MONOTONIC - %globaltimer, read by GPU
	 * programs' bpf_ktime_get_ns) at once: the collector's refined value
	 * comes a poll later, after the first kernels may have run. */
	for (uint32_t i = 0; i < gp_nregions; i++) {
		struct gp_region *g = &gp_regions[i];
		if (g->role == GP_ROLE_CLOCK && g->host != NULL && g->size >= GPBR_DATA_OFFSET + 8) {
			uint64_t *p = (uint64_t *)((char *)g->host + GPBR_DATA_OFFSET);
			__atomic_store_n(p, c->blk[2] - c->blk[1], __ATOMIC_RELEASE);
		}
	}
	GP_TRACE("calibration: device %d gpu-mono %lld ns (+/- %llu ns)", dev,
		 (long long)(c->blk[1] - c->blk[2]), (unsigned long long)w);
out:
	gp_capture_restore(relaxed, mode);
	__atomic_store_n(&gp_cal_busy, 0, __ATOMIC_RELEASE);
}
