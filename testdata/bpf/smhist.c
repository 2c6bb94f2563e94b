// smhist: which hardware ran each thread, in bpftime's threadscheduling
// idiom. At the entry of vectorAdd every thread adds 1, with atomic adds
// into GPU arrays (1503), to sm_threads[its SM id], to lane_threads[its
// lane] and, when it is lane 0, to sm_warps[its SM id]. After L launches
// of T threads in blocks of a multiple of 32: the sum of sm_threads is
// T*L, lane_threads[l] = T*L/32 for every lane, the sum of sm_warps is
// T*L/32, and every SM id is below the GPU's SM count.
#include "gpuprobe.h"

#define MAX_SMS 256

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, MAX_SMS);
	__type(key, u32);
	__type(value, u64);
} sm_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, MAX_SMS);
	__type(key, u32);
	__type(value, u64);
} sm_warps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 32);
	__type(key, u32);
	__type(value, u64);
} lane_threads SEC(".maps");

static __always_inline void bump(void *map, u32 key)
{
	u64 *p = bpf_map_lookup_elem(map, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int smhist(void *ctx)
{
	u32 sm = bpf_get_sm_id();
	u32 lane = bpf_get_lane_id();
	if (sm < MAX_SMS) {
		bump(&sm_threads, sm);
		if (lane == 0)
			bump(&sm_warps, sm);
	}
	bump(&lane_threads, lane & 31);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
