// launchcount: counts the launches of a GEMM kernel and the blocks they
// ran, as bpftime's cutlass launch counter does for CUTLASS's kernels; here
// the sgemm sample's kernel. At entry thread (0,0,0) of each block adds 1
// to lc_counts[BLOCKS], and of block (0,0,0) also 1 to lc_counts[LAUNCHES]
// and the grid's block count to lc_counts[GRID_BLOCKS]. After L launches
// of G blocks: lc_counts = {L, G*L, G*L}.
#include "gpuprobe.h"

enum { LAUNCHES, BLOCKS, GRID_BLOCKS, NCOUNTS };

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, NCOUNTS);
	__type(key, u32);
	__type(value, u64);
} lc_counts SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(&lc_counts, &key);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("kprobe/sgemm")
int lc_entry(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	if (tx | ty | tz)
		return 0;
	add(BLOCKS, 1);
	if (gpuprobe_block_linear_id() != 0)
		return 0;
	add(LAUNCHES, 1);
	add(GRID_BLOCKS, gpuprobe_grid_blocks());
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
