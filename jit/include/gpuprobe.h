/* gpuprobe.h: everything a gpuprobe eBPF program needs, with no libbpf or
 * vmlinux.h dependency. Compile with:
 *   clang -target bpf -O2 -g -I <gpuprobe>/jit/include -c prog.c
 *
 * The helper ids and map type numbers follow bpftime's GPU support, so the
 * same source runs under bpftime; ours start at 600 (helpers) and 1600 (map
 * types). The authoritative table is jit/abi.go, beside this file;
 * jit/abi_header_test.go checks that the two agree.
 *
 * Section names:
 *   SEC("kprobe/<kernel>")        runs at the entry of a CUDA kernel
 *   SEC("kretprobe/<kernel>")     runs before every ret/exit of the kernel
 *   SEC("kprobe/__memcapture")    runs after each ld/st.global; ctx is a
 *                                 struct gpuprobe_memctx
 *   SEC("uprobe/<binary:symbol>") a host program, loaded into Linux
 * <kernel> is the (mangled) symbol name of the kernel, as in the PTX.
 */
#ifndef GPUPROBE_H
#define GPUPROBE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;

#ifndef NULL
#define NULL ((void *)0)
#endif

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __noinline __attribute__((noinline))

/* BTF-style map definitions (libbpf's convention). */
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

/* Map types. */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_GPU_HASH_MAP 1501      /* one hash shared by all GPU threads, in GPU-visible memory */
#define BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP 1502 /* one value per GPU thread */
#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503      /* one copy, in GPU-visible memory */
#define BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP 1504 /* array shared with host (uprobe) programs: a kernel map */
#define BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP 1512 /* one value per GPU thread, kept in host memory */
#define BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP 1513 /* one copy, kept in host memory */
#define BPF_MAP_TYPE_GPU_RINGBUF_MAP 1527    /* GPU ring buffer */
#define BPF_MAP_TYPE_PERGPUWARP_ARRAY_MAP 1600 /* one value per warp (gpuprobe) */
#define BPF_MAP_TYPE_PERGPUBLOCK_ARRAY_MAP 1601 /* one value per thread block, in the block's shared memory (gpuprobe) */
/* A per-block array's values are NOT zeroed when a block starts (they hold
 * whatever an earlier block left in that shared memory): programs set them
 * first, e.g. claimed with a tagged compare-and-swap at entry (blockagg.c).
 * max_entries × 8-aligned value size is at most 1 KiB; the host cannot read
 * or write them. */

/* Update flags. */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2

/* Map flags. */
#define BPF_F_MMAPABLE (1U << 10)

/* Legacy map definition, for SEC("maps"). */
struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

/* Context of a kprobe/__memcapture program (jit.MemCtxSize bytes). */
struct gpuprobe_memctx {
	__u64 addr;  /* global address accessed */
	__u32 size;  /* bytes accessed */
	__u32 flags; /* GPUPROBE_MEM_STORE for a store */
};
#define GPUPROBE_MEM_STORE 1

/* Linux helpers of the GPU ABI. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key,
				   const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static long (*bpf_trace_printk)(const char *fmt, __u32 fmt_size, ...) = (void *)6;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_perf_event_output)(void *ctx, void *map, __u64 flags,
				     void *data, __u64 size) = (void *)25;

/* CLOCK_MONOTONIC ns. On the GPU: %globaltimer plus the collector's
 * calibrated offset, so host and GPU programs share one clock (without a
 * clock region it is %globaltimer alone). */
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;

/* bpftime's GPU helpers. */
static long (*ebpf_puts)(const char *str) = (void *)501;
static __u64 (*bpf_get_globaltimer)(void) = (void *)502;
static long (*bpf_get_block_idx)(__u64 *x, __u64 *y, __u64 *z) = (void *)503;
static long (*bpf_get_block_dim)(__u64 *x, __u64 *y, __u64 *z) = (void *)504;
static long (*bpf_get_thread_idx)(__u64 *x, __u64 *y, __u64 *z) = (void *)505;
static long (*bpf_gpu_membar)(void) = (void *)506;
static void (*bpf_gpu_exit)(void) = (void *)507;
static long (*bpf_get_grid_dim)(__u64 *x, __u64 *y, __u64 *z) = (void *)508;
static __u64 (*bpf_get_sm_id)(void) = (void *)509;
static __u64 (*bpf_get_warp_id)(void) = (void *)510;
static __u64 (*bpf_get_lane_id)(void) = (void *)511;

/* gpuprobe's warp-level helpers: they aggregate over the lanes active at the
 * call, so a probe can write one record per warp instead of 32. */
static __u64 (*gpuprobe_warp_is_leader)(void) = (void *)600;
static __u64 (*gpuprobe_warp_sum_u64)(__u64 v) = (void *)601;
static __u64 (*gpuprobe_warp_min_u64)(__u64 v) = (void *)602;
static __u64 (*gpuprobe_warp_max_u64)(__u64 v) = (void *)603;
static __u64 (*gpuprobe_warp_active_count)(void) = (void *)604;
static __u64 (*gpuprobe_warp_active_mask)(void) = (void *)605;
static __u64 (*gpuprobe_get_launch_id)(void) = (void *)606;

/* gpuprobe's helpers for aggregating on the GPU: *p = max/min(*p, v),
 * unsigned, atomically and without waiting (a reduction), on an 8-byte
 * aligned u64 of a map value (global or shared memory; on the stack, a
 * plain read-modify-write); and a device-scope fence (fence.acq_rel.gpu),
 * cheaper than bpf_gpu_membar's system scope, to order a block's updates
 * before the atomic that publishes them. All three return 0. */
static long (*gpuprobe_atomic_max_u64)(__u64 *p, __u64 v) = (void *)607;
static long (*gpuprobe_atomic_min_u64)(__u64 *p, __u64 v) = (void *)608;
static long (*gpuprobe_fence_gpu)(void) = (void *)609;

/* gpuprobe's launch-geometry helpers, returned in a register: the block's
 * linear index in the grid ((z*ny + y)*nx + x), the grid's blocks and a
 * block's threads. bpf_get_block_idx and friends write through pointers
 * to the stack, which costs every calling warp local-memory traffic. */
static __u64 (*gpuprobe_block_linear_id)(void) = (void *)610;
static __u64 (*gpuprobe_grid_blocks)(void) = (void *)611;
static __u64 (*gpuprobe_block_threads)(void) = (void *)612;

/* bpf_printk with the format on the stack (GPU programs have no global
 * data, like libbpf's BPF_NO_GLOBAL_DATA variant). */
#define bpf_printk(fmt, ...)                                            \
	({                                                              \
		char ____fmt[] = fmt;                                   \
		bpf_trace_printk(____fmt, sizeof(____fmt), ##__VA_ARGS__); \
	})

#endif /* GPUPROBE_H */
