// compat/seeded: idioms.c's `settings` idiom, a GPU array (1503) the
// program only reads, filled by the host before the launch (bpftime's
// examples seed maps from user space with bpf_map_update_elem), and a
// counter array whose start value is seeded too. At the exit of vectorAdd:
//   sd_cfg[0] enabled (0: the program does nothing)
//   sd_cfg[1] every: threads with gid % every == 0 are selected
//   sd_cfg[2] weight added per selected thread
//   sd_acc[0] += weight per selected thread (seeded with a start value)
//   sd_acc[1] += 1 per selected thread (seeded 0)
// Expected with cfg {1, every, weight} and acc {start, 0}:
// acc[0] = start + weight*ceil(T/every), acc[1] = ceil(T/every), for T
// threads; with enabled = 0 the seeds come back unchanged.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} sd_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} sd_acc SEC(".maps");

static __always_inline u64 cfg(u32 key)
{
	u64 *p = bpf_map_lookup_elem(&sd_cfg, &key);
	return p ? *p : 0;
}

static __always_inline void add(u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(&sd_acc, &key);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int sd_exit(void *ctx)
{
	if (!cfg(0))
		return 0;
	u64 every = cfg(1);
	if (every == 0)
		return 0;
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);
	u64 gid = bx * dx + tx;
	if (gid % every)
		return 0;
	add(0, cfg(2));
	add(1, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
