// compat/hostmaps: bpftime's host-memory GPU arrays in the idiom of its
// host_map_test example: a per-thread array (1512) and a shared array
// (1513), both kept in host memory whatever the placement of other maps.
// At entry of vectorAdd each thread stores its start time in hm_start
// (1512, one key); at exit it reads it back and keeps, per thread, in
// hm_thread (1512): key 0 a call count bumped through the looked-up
// pointer, key 1 whether its start was there and not after now (1), key 2
// its global id (bpf_map_update_elem). Each thread adds 1 to
// hm_shared[tid.x % 10] (1513) atomically; thread 0 of the grid stores 42
// in hm_shared[10] with bpf_map_update_elem.
// Expected for G blocks of B threads, every thread t < G*B:
//   hm_thread[0][t] = 1, hm_thread[1][t] = 1, hm_thread[2][t] = t;
//   hm_shared[k] = G * #{x < B : x % 10 == k} for k < 10 (vectorAdd's
//   96-thread blocks: 10*G for k < 6, 9*G from 6), hm_shared[10] = 42,
//   the rest 0.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} hm_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} hm_thread SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP);
	__uint(max_entries, 16);
	__type(key, u32);
	__type(value, u64);
} hm_shared SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int hm_entry(void *ctx)
{
	u32 key = 0;
	u64 ts = bpf_get_globaltimer();
	bpf_map_update_elem(&hm_start, &key, &ts, BPF_ANY);
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int hm_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);
	u64 gid = bx * dx + tx;

	u32 k0 = 0, k1 = 1, k2 = 2;
	u64 now = bpf_get_globaltimer();
	u64 *start = bpf_map_lookup_elem(&hm_start, &k0);
	u64 ok = start && *start > 0 && *start <= now;
	bpf_map_update_elem(&hm_thread, &k1, &ok, BPF_ANY);
	u64 *calls = bpf_map_lookup_elem(&hm_thread, &k0);
	if (calls)
		*calls += 1;
	bpf_map_update_elem(&hm_thread, &k2, &gid, BPF_ANY);

	u32 sk = tx % 10;
	u64 *s = bpf_map_lookup_elem(&hm_shared, &sk);
	if (s)
		__sync_fetch_and_add(s, 1);
	if (gid == 0) {
		u32 k10 = 10;
		u64 v = 42;
		bpf_map_update_elem(&hm_shared, &k10, &v, BPF_ANY);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
