// sass_phases.cu: gpuprobe's launch-window probe for kernels that ship as
// machine code only (cuBLAS, cuDNN, PyTorch, Triton cubins), as Compute
// Sanitizer patch functions: the shim patches BLOCK_ENTER and BLOCK_EXIT of
// such modules (shim/src/sass.c) and passes the launch id as the patch's
// userdata (0: this launch is not sampled; the functions return at once).
//
// Per warp: at entry its first lane stores %globaltimer in the scratch slot
// of the warp's hardware slot (%smid, %warpid); at exit each converged
// group's leader counts its lanes there, and the group that completes the
// warp folds the warp (start, end, lanes) into one of SP_STRIPES cells of
// the launch's slot (launch id % SP_SLOTS). A stripe's last warp folds the
// stripe into the launch cell; the launch's last stripe writes one record
// into a ring in host-pinned memory: {launch id, earliest warp start,
// latest warp end, blocks, threads that exited, seq}. Aggregating on the
// GPU keeps the host's share at one 48-byte record per launch (a grid of
// 2^24 threads has 524,288 warps).
//
// Built with `make shim-patch` (nvcc --compile-as-tools-patch, one cubin per
// architecture in a fatbin); the result is committed as shim/src/sass_image.h.
// Each global starts as a distinct magic that the shim replaces in the image
// with its allocation's address before sanitizerAddPatches (the patch module
// has no handle to write a global through).

typedef unsigned long long u64;
typedef unsigned int u32;

#define SP_SLOTS 256  /* launches of one context in flight at once */
#define SP_STRIPES 32 /* cells a launch's warps are spread over */
#define SP_RING 4096  /* records in the host ring (power of two) */

__device__ u64 gp_sp_scratch = 0x4750535053435230ull; /* [256 SMs][64 warp slots]{start, lanes} */
__device__ u64 gp_sp_table = 0x4750535053435231ull;   /* [SP_SLOTS][1 + SP_STRIPES]{~start, end, warps, threads} */
__device__ u64 gp_sp_ring = 0x4750535053435232ull;    /* host-pinned: u64 head, 56 bytes pad, then SP_RING × 48 B */

static __device__ __forceinline__ u32 lane_id() { u32 l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return l; }
static __device__ __forceinline__ u64 gtimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
static __device__ __forceinline__ u64 *slot()
{
	u32 s, w;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
	asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
	return (u64 *)gp_sp_scratch + 2 * (((s & 255) << 6) | (w & 63));
}

extern "C" __device__ __noinline__ int gp_sp_enter(void *ud, u64 pc)
{
	if (!ud)
		return 0;
	u32 m = __activemask();
	if (lane_id() != __ffs(m) - 1)
		return 0;
	u64 *s = slot();
	s[0] = gtimer();
	s[1] = 0;
	return 0;
}

/* Register budget: warp-specialized kernels (cuBLAS's nvjet, CUTLASS) lower
 * their producer warps' registers with setmaxnreg, and a patch function that
 * needs more than the warp has left faults the kernel (an illegal
 * instruction in cuBLAS's nvjet bf16 GEMM on the H200 with CUDA 11.8's
 * ptxas at 58 and at 36 registers; at 24 every launch ran, with identical
 * output; CUDA 13's ptxas caps patch functions itself and refuses
 * -maxrregcount with --compile-as-tools-patch). These functions keep few
 * values live (each fold moves one word at a time, global-space atomics)
 * and are built with -maxrregcount=24 (shim/patch/gen.go): 6 spill
 * instructions, to the patch's own stack. */

/* Global-space atomics: the generic ones test for shared memory first,
 * which costs registers and a loop; red where the old value is not needed. */
static __device__ __forceinline__ void red_max(u64 *p, u64 v) { asm volatile("red.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
static __device__ __forceinline__ void red_add(u64 *p, u64 v) { asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
static __device__ __forceinline__ u64 atom_add(u64 *p, u64 v)
{
	u64 o;
	asm volatile("atom.global.add.u64 %0, [%1], %2;" : "=l"(o) : "l"(p), "l"(v) : "memory");
	return o;
}
static __device__ __forceinline__ u64 atom_exch(u64 *p, u64 v)
{
	u64 o;
	asm volatile("atom.global.exch.b64 %0, [%1], %2;" : "=l"(o) : "l"(p), "l"(v) : "memory");
	return o;
}

/* stripe_of returns the stripe of warp w of the current block. */
static __device__ __forceinline__ u32 stripe_of(u32 w, u32 wpb)
{
	u64 blk = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
	return (u32)((blk * wpb + w) % SP_STRIPES);
}

/* warps_in returns the warps of a launch in stripe st (or, with st ==
 * SP_STRIPES, the stripes that hold any). */
static __device__ __forceinline__ u64 warps_in(u32 st, u32 wpb)
{
	u64 nw = (u64)gridDim.x * gridDim.y * gridDim.z * wpb;
	if (st == SP_STRIPES)
		return nw < SP_STRIPES ? nw : SP_STRIPES;
	return nw / SP_STRIPES + (st < nw % SP_STRIPES ? 1 : 0);
}

extern "C" __device__ __noinline__ int gp_sp_exit(void *ud, u64 pc)
{
	if (!ud)
		return 0;
	u32 m = __activemask();
	if (lane_id() != __ffs(m) - 1)
		return 0;
	u64 now = gtimer();
	u64 *s = slot();
	u32 bt = blockDim.x * blockDim.y * blockDim.z;
	u32 w = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32;
	u32 wt = bt - w * 32 < 32 ? bt - w * 32 : 32;
	u32 n = __popc(m);
	if (atom_add(&s[1], n) + n != wt)
		return 0; /* not the warp's last lanes */
	u32 wpb = (bt + 31) / 32;
	u32 st = stripe_of(w, wpb);
	u64 *l = (u64 *)gp_sp_table + 4 * ((u64)ud % SP_SLOTS) * (1 + SP_STRIPES);
	u64 *c = l + 4 * (1 + st);
	red_max(&c[0], ~s[0]);
	red_max(&c[1], now);
	red_add(&c[3], wt);
	__threadfence();
	if (atom_add(&c[2], 1) + 1 != warps_in(st, wpb))
		return 0;
	/* The stripe's last warp: move the stripe into the launch cell. */
	__threadfence();
	red_max(&l[0], atom_exch(&c[0], 0));
	red_max(&l[1], atom_exch(&c[1], 0));
	red_add(&l[3], atom_exch(&c[3], 0));
	atom_exch(&c[2], 0);
	__threadfence();
	if (atom_add(&l[2], 1) + 1 != warps_in(SP_STRIPES, wpb))
		return 0;
	/* The launch's last stripe: publish the record, reset the slot. */
	__threadfence();
	u64 *ring = (u64 *)gp_sp_ring;
	u64 i = atom_add(&ring[0], 1);
	volatile u64 *r = ring + 8 + 6 * (i % SP_RING);
	r[0] = (u64)ud;
	r[1] = ~atom_exch(&l[0], 0);
	r[2] = atom_exch(&l[1], 0);
	r[3] = (u64)gridDim.x * gridDim.y * gridDim.z;
	r[4] = atom_exch(&l[3], 0);
	atom_exch(&l[2], 0);
	__threadfence_system();
	r[5] = i + 1; /* seq: the record is whole */
	return 0;
}
