//go:build ignore

// kernel_phases: gpuprobe's built-in probe set. It times every warp of every
// kernel it is attached to and writes ONE record per warp (record.Warp, type
// 3) into a GPU ring buffer, so the collector can build the "executing"
// phase of each launch span and the per-warp histograms.
//
//   entry (kprobe/*): the warp's leader lane stores %globaltimer in a
//     per-warp array (one u64 per warp of the grid).
//   exit (kretprobe/*): every lane reads %globaltimer; the warp helpers
//     reduce the lanes' exit times to min and max over the active lanes,
//     and the leader writes the record: launch id (helper 606), block,
//     warp index in the block, SM, active mask, start, last exit, first
//     exit.
//
// The target "*" means every kernel of the module (gpuprobe/inject matches
// section targets as patterns). Build: go generate ./gpuprobe/probes.
#include "gpuprobe.h"

#define WARP_RECORD_TYPE 3
#define WARP_RECORD_VERSION 1

// struct warp_record is record.Warp (record/device.go), 64 bytes.
struct warp_record {
	u16 type;
	u16 version;
	u32 size;
	u64 launch_id;
	u32 block_x, block_y, block_z;
	u32 warp;
	u32 sm_id;
	u32 active_mask;
	u64 start_ns;
	u64 end_ns;
	u64 min_exit_ns;
};

// kp_start: the start time of each warp of the launch (keyed by 0, one lane
// per warp of the grid). The host never reads it, so the loader may put it
// in device memory.
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUWARP_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} kp_start SEC(".maps");

// kp_warps: the ring the collector reads; one record per warp.
struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 22);
	__type(key, u32);
	__type(value, struct warp_record);
} kp_warps SEC(".maps");

SEC("kprobe/*")
int kernel_phases_entry(void *ctx)
{
	u32 zero = 0;
	u64 *start;

	if (!gpuprobe_warp_is_leader())
		return 0;
	start = bpf_map_lookup_elem(&kp_start, &zero);
	if (start)
		*start = bpf_get_globaltimer();
	return 0;
}

SEC("kretprobe/*")
int kernel_phases_exit(void *ctx)
{
	struct warp_record r = {};
	u64 now = bpf_get_globaltimer();
	u64 first = gpuprobe_warp_min_u64(now);
	u64 last = gpuprobe_warp_max_u64(now);
	u64 mask = gpuprobe_warp_active_mask();
	u64 x, y, z, tx, ty, tz, nx, ny, nz;
	u32 zero = 0;
	u64 *start;

	if (!gpuprobe_warp_is_leader())
		return 0;
	r.type = WARP_RECORD_TYPE;
	r.version = WARP_RECORD_VERSION;
	r.size = sizeof(r);
	r.launch_id = gpuprobe_get_launch_id();
	bpf_get_block_idx(&x, &y, &z);
	r.block_x = x;
	r.block_y = y;
	r.block_z = z;
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&nx, &ny, &nz);
	r.warp = ((tz * ny + ty) * nx + tx) / 32;
	r.sm_id = bpf_get_sm_id();
	r.active_mask = mask;
	r.start_ns = first;
	start = bpf_map_lookup_elem(&kp_start, &zero);
	if (start && *start != 0 && *start <= first)
		r.start_ns = *start;
	r.end_ns = last;
	r.min_exit_ns = first;
	bpf_perf_event_output(ctx, &kp_warps, 0, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
