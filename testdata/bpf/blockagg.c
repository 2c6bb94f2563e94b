// blockagg: one record per launch of vectorAdd, aggregated on the GPU (the
// scheme of gpuprobe's kernel_phases). Each block counts its exited
// threads in its own shared memory (a per-block array, 1601); the warp that
// completes its block folds the block into one device-memory cell with
// atomic min/max (607/608) and counts the block done after a fence (609);
// the block that completes the grid reads the cell back, resets it and
// writes the record. Launches must not overlap (one stream): they share
// the cell.
#include "gpuprobe.h"

struct launch_agg {
	u64 blocks;   // blocks that finished
	u64 threads;  // threads that exited
	u64 first_ns; // earliest block end (0 until a block ends)
	u64 last_ns;  // latest block end
};

// One word per block: tag << 32 | threads of the block that exited.
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUBLOCK_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} block_exits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct launch_agg);
} launch_cell SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct launch_agg);
} launches SEC(".maps");

// block_tag is a 32-bit hash of the launch id and the linear block index.
// Shared memory is not zeroed when a block starts: the word may hold what
// an earlier block (of this launch or an earlier one) left there, whose
// tag differs but for a 2^-32 chance.
static __always_inline u64 block_tag(void)
{
	u64 bx, by, bz, gx, gy, gz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_grid_dim(&gx, &gy, &gz);
	u64 id = (bx + (by + bz * gy) * gx) ^ (gpuprobe_get_launch_id() << 40);
	return (id * 0x9E3779B97F4A7C15ULL) >> 32;
}

// At entry each warp's leader claims the block's word, unless another warp
// of the block did: no barrier is needed, and a warp that exits early
// cannot have its count overwritten (the compare-and-swap fails then).
SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int blockagg_enter(void *ctx)
{
	if (!gpuprobe_warp_is_leader())
		return 0;
	u32 zero = 0;
	u64 *w = bpf_map_lookup_elem(&block_exits, &zero);
	if (!w)
		return 0;
	u64 tag = block_tag();
	// A failed swap means another warp claimed the word (or counted into
	// it after claiming it): the next read sees the tag.
	for (int i = 0; i < 4; i++) {
		u64 old = *(volatile u64 *)w;
		if (old >> 32 == tag)
			break;
		if (__sync_val_compare_and_swap(w, old, tag << 32) == old)
			break;
	}
	return 0;
}

// At exit each warp's leader adds its lanes to the block's count; the warp
// that completes the count ends the block. Returns 1 for that warp, 2 when
// it also completed the grid, 0 otherwise.
SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int blockagg_exit(void *ctx)
{
	u64 lanes = gpuprobe_warp_active_count();
	if (!gpuprobe_warp_is_leader())
		return 0;
	u32 zero = 0;
	u64 *w = bpf_map_lookup_elem(&block_exits, &zero);
	struct launch_agg *a = bpf_map_lookup_elem(&launch_cell, &zero);
	if (!w || !a)
		return 0;
	u64 dx, dy, dz, gx, gy, gz;
	bpf_get_block_dim(&dx, &dy, &dz);
	bpf_get_grid_dim(&gx, &gy, &gz);
	u64 block_threads = dx * dy * dz;
	u64 before = __sync_fetch_and_add(w, lanes) & 0xffffffff;
	if (before + lanes != block_threads)
		return 0;

	// Every other warp of the block counted itself before this one did,
	// after its exit: the block ends no later than now.
	u64 end = bpf_get_globaltimer();
	gpuprobe_atomic_max_u64(&a->last_ns, end);
	if (a->first_ns == 0)
		__sync_val_compare_and_swap(&a->first_ns, 0, end);
	gpuprobe_atomic_min_u64(&a->first_ns, end);
	__sync_fetch_and_add(&a->threads, block_threads);
	// The block's updates are visible before it counts as done...
	gpuprobe_fence_gpu();
	if (__sync_fetch_and_add(&a->blocks, 1) + 1 != gx * gy * gz)
		return 1;
	// ...and the last block sees every block's before it reads them.
	gpuprobe_fence_gpu();
	struct launch_agg out = {
		.blocks = a->blocks,
		.threads = a->threads,
		.first_ns = a->first_ns,
		.last_ns = a->last_ns,
	};
	a->blocks = 0;
	a->threads = 0;
	a->first_ns = 0;
	a->last_ns = 0;
	bpf_perf_event_output(ctx, &launches, 0, &out, sizeof(out));
	return 2;
}

char LICENSE[] SEC("license") = "GPL";
