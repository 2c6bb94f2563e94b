// compat/gpuhash: the GPU hash map (1501) under contention. At the exit
// of vectorAdd every thread inserts the key of its warp, (gid / 32) % 32,
// with BPF_NOEXIST, then looks it up and counts itself into the value; so
// each warp inserts one key from all its lanes at once. Thread 0 also
// fills a 4-entry map with 8 keys. Expected for T threads (T a multiple
// of 32, at least 1024), W = T/32 warps:
//   gh_count[k]  = 32 * (W/32 + (k < W%32)) for k in 0..31 (vectorAdd's
//                  65,568 threads: 2,080 for key 0, 2,048 for the others)
//   gh_res[0]    = 32 inserts that created a key (one per key)
//   gh_res[1]    = T - 32 inserts refused with -EEXIST
//   gh_res[2]    = 0 other insert errors (-EBUSY: a claim never published)
//   gh_res[3]    = 0 lookups that missed after the insert
//   gh_res[4]    = 4 of thread 0's 8 inserts into gh_small that succeeded
//   gh_res[5]    = 4 refused with -E2BIG (the table's full counter: 4)
//   gh_res[6]    = 1: thread 0's delete of key 0 of gh_small, then key 4
//                  inserted into the freed entry, succeeded
//   gh_small     = keys 1, 2, 3, 4 (value key + 100); key 0 deleted
#include "gpuprobe.h"

#define E2BIG 7
#define EEXIST 17

struct {
	__uint(type, BPF_MAP_TYPE_GPU_HASH_MAP);
	__uint(max_entries, 32);
	__type(key, u32);
	__type(value, u64);
} gh_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_HASH_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} gh_small SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 8);
	__type(key, u32);
	__type(value, u64);
} gh_res SEC(".maps");

static __always_inline void count(u32 key)
{
	u64 *p = bpf_map_lookup_elem(&gh_res, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

static __always_inline void fill_small(void)
{
	for (u32 k = 0; k < 8; k++) {
		u64 v = k + 100;
		long rc = bpf_map_update_elem(&gh_small, &k, &v, BPF_ANY);
		count(rc == 0 ? 4 : rc == -E2BIG ? 5 : 2);
	}
	u32 k0 = 0, k4 = 4;
	u64 v4 = 104;
	if (bpf_map_delete_elem(&gh_small, &k0) == 0 &&
	    bpf_map_update_elem(&gh_small, &k4, &v4, BPF_NOEXIST) == 0)
		count(6);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int gh_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);
	u64 gid = bx * dx + tx;
	u32 key = (gid / 32) % 32;
	u64 zero = 0;
	long rc = bpf_map_update_elem(&gh_count, &key, &zero, BPF_NOEXIST);
	count(rc == 0 ? 0 : rc == -EEXIST ? 1 : 2);
	u64 *v = bpf_map_lookup_elem(&gh_count, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		count(3);
	if (gid == 0)
		fill_small();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
