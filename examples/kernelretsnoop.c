// kernelretsnoop: at every exit of vectorAdd, each thread writes one record
// with its block and thread ids, SM and lane, and the exit timestamp into a
// GPU ring buffer.
#include "gpuprobe.h"

struct exit_event {
	u64 block_x, block_y, block_z;
	u64 thread_x, thread_y, thread_z;
	u64 timestamp_ns; // %globaltimer at exit
	u32 sm_id;
	u32 lane_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct exit_event);
} exits SEC(".maps");

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int kernelretsnoop(void *ctx)
{
	struct exit_event e = {};

	bpf_get_block_idx(&e.block_x, &e.block_y, &e.block_z);
	bpf_get_thread_idx(&e.thread_x, &e.thread_y, &e.thread_z);
	e.sm_id = bpf_get_sm_id();
	e.lane_id = bpf_get_lane_id();
	e.timestamp_ns = bpf_get_globaltimer();
	return bpf_perf_event_output(ctx, &exits, 0, &e, sizeof(e));
}

char LICENSE[] SEC("license") = "GPL";
