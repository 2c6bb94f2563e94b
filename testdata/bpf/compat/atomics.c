// compat/atomics: bpftime's GPU array (1503) counters with
// __sync_fetch_and_add, at the exit of vectorAdd:
//   at_totals[0] += 1          from every thread, one warp-uniform address
//                              (the compiler aggregates it over the warp)
//   at_totals[1] += tid.x + 1  a per-thread value at a uniform address
//   at_blocks[block.x] += 1    uniform within a block
//   at_threads[gid] += 1       a different address in every thread
// Expected (grid G blocks of B threads): totals[0] = G*B,
// totals[1] = G*B*(B+1)/2, blocks[b] = B for b < G, threads[g] = 1 for
// g < G*B; the slots past the grid stay 0.
#include "gpuprobe.h"

#define AT_MAX_BLOCKS 1024
#define AT_MAX_THREADS (1 << 17)

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} at_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, AT_MAX_BLOCKS);
	__type(key, u32);
	__type(value, u64);
} at_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, AT_MAX_THREADS);
	__type(key, u32);
	__type(value, u64);
} at_threads SEC(".maps");

static __always_inline void add(void *map, u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(map, &key);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int at_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);

	add(&at_totals, 0, 1);
	add(&at_totals, 1, tx + 1);
	if (bx < AT_MAX_BLOCKS)
		add(&at_blocks, bx, 1);
	u64 gid = bx * dx + tx;
	if (gid < AT_MAX_THREADS)
		add(&at_threads, gid, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
