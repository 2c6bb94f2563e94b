// A GPU ring buffer with no room.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 0);
	__type(key, u32);
	__type(value, u64);
} ring SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int empty_ring(void *ctx)
{
	u64 v = 1;
	return bpf_perf_event_output(ctx, &ring, 0, &v, sizeof(v));
}
