// warpagg: at every exit of vectorAdd, the warp aggregates its lanes' exit
// timestamps and the leader lane writes one record per warp: how many lanes
// ran, the first and last exit and their sum (for the mean).
#include "gpuprobe.h"

struct warp_event {
	u64 block_x;
	u64 warp;      // warp index in the block: linear thread index / 32
	u64 lanes;     // active lanes
	u64 mask;      // activemask
	u64 first_ns;  // min exit timestamp
	u64 last_ns;   // max exit timestamp
	u64 sum_ns;    // sum of exit timestamps
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct warp_event);
} warps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUWARP_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} warp_exits SEC(".maps");

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int warpagg(void *ctx)
{
	u64 now = bpf_get_globaltimer();
	u64 first = gpuprobe_warp_min_u64(now);
	u64 last = gpuprobe_warp_max_u64(now);
	u64 sum = gpuprobe_warp_sum_u64(now);
	u64 lanes = gpuprobe_warp_active_count();
	u64 mask = gpuprobe_warp_active_mask();

	if (!gpuprobe_warp_is_leader())
		return 0;

	u32 zero = 0;
	u64 *n = bpf_map_lookup_elem(&warp_exits, &zero);
	if (n)
		*n += 1;

	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);

	struct warp_event e = {
		.block_x = bx,
		.warp = (tx + ty * dx + tz * dx * dy) / 32,
		.lanes = lanes,
		.mask = mask,
		.first_ns = first,
		.last_ns = last,
		.sum_ns = sum,
	};
	bpf_perf_event_output(ctx, &warps, 0, &e, sizeof(e));
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
