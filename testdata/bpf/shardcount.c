// shardcount: one counter shared by every GPU thread, in bpftime's
// gpu_shard_array (GPU array 1503, device memory) and gpu-plain-array
// (host-backed copy, 1513 here) idioms. At the exit of vectorAdd every
// thread adds 1 to key 0 of both arrays with an atomic add (bpftime's
// examples overwrite, so theirs only trend upwards; ours is exact), and
// thread 0 of the grid adds 1 to key 1. After L launches of T threads:
// sc_dev = sc_host = {T*L, L}.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} sc_dev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} sc_host SEC(".maps");

static __always_inline void bump(void *map, u32 key)
{
	u64 *p = bpf_map_lookup_elem(map, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int sc_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bump(&sc_dev, 0);
	bump(&sc_host, 0);
	if ((bx | by | bz | tx | ty | tz) == 0) {
		bump(&sc_dev, 1);
		bump(&sc_host, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
