// compat/boundsexit: bpftime's kernel_trace idiom (an entry and an exit
// probe counting into a GPU array, 1503) on vectorAddN, whose bounds check
// lets the threads past n leave early: the exit probe must still run once
// for each of them.
//   be_counts[0] += 1 at entry, be_counts[1] += 1 at exit (every thread)
//   be_counts[2] += 1 at exit for threads with gid >= n (the probe
//                  cannot see n: BE_N is the checker's n, compiled in)
//   be_blocks[block.x] += 1 at exit
// Expected (grid G x B): counts[0] = counts[1] = G*B, counts[2] = G*B - n
// for n = 1<<20 + 100, blocks[b] = B for every b < G.
#include "gpuprobe.h"

#define BE_N ((1 << 20) + 100) /* gpucheck's vectorAddN sample */
#define BE_MAX_BLOCKS 8192

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} be_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, BE_MAX_BLOCKS);
	__type(key, u32);
	__type(value, u64);
} be_blocks SEC(".maps");

static __always_inline void add(void *map, u32 key)
{
	u64 *p = bpf_map_lookup_elem(map, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

SEC("kprobe/_Z10vectorAddNPKfS0_Pfi")
int be_entry(void *ctx)
{
	add(&be_counts, 0);
	return 0;
}

SEC("kretprobe/_Z10vectorAddNPKfS0_Pfi")
int be_exit(void *ctx)
{
	u64 b = gpuprobe_block_linear_id();
	u64 gid = b * gpuprobe_block_threads();
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	gid += tx;

	add(&be_counts, 1);
	if (gid >= BE_N)
		add(&be_counts, 2);
	if (b < BE_MAX_BLOCKS)
		add(&be_blocks, b);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
