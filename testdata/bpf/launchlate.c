// launchlate: how long a launch waits between the host's cudaLaunchKernel
// and the first instruction of the kernel on the GPU.
//
// Host half: a uprobe on cudaLaunchKernel stores CLOCK_MONOTONIC in
// launch_clock[0]. The collector keeps launch_clock[1] = globaltimer -
// monotonic (its clock calibration), so the GPU half can put the host time
// on the GPU's clock. GPU half: thread (0,0,0) of each block computes the
// delay and adds it to a log2 histogram in a GPU array.
#include "gpuprobe.h"

#define CLOCK_LAUNCH 0
#define CLOCK_OFFSET 1
#define BUCKETS 64

// Written by a host program, read by GPU programs: a plain array (host path
// for the GPU), mmapable so that the collector can mirror it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} launch_clock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, BUCKETS);
	__type(key, u32);
	__type(value, u64);
} delay_log2_ns SEC(".maps");

SEC("uprobe/libcudart.so:cudaLaunchKernel")
int launch_host(void *ctx)
{
	u32 key = CLOCK_LAUNCH;
	u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&launch_clock, &key, &now, BPF_ANY);
	return 0;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int launch_gpu(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	if (tx | ty | tz)
		return 0;

	u32 key = CLOCK_LAUNCH;
	u64 *launch = bpf_map_lookup_elem(&launch_clock, &key);
	key = CLOCK_OFFSET;
	u64 *offset = bpf_map_lookup_elem(&launch_clock, &key);
	if (!launch || !offset || *launch == 0)
		return 0;

	u64 now = bpf_get_globaltimer();
	u64 start = *launch + *offset;
	u64 delay = now > start ? now - start : 0;

	u32 bucket = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < BUCKETS - 1; i++) {
		if ((delay >> 1) == 0)
			break;
		delay >>= 1;
		bucket++;
	}
	u64 *slot = bpf_map_lookup_elem(&delay_log2_ns, &bucket);
	if (slot)
		__sync_fetch_and_add(slot, 1);
	return bucket;
}

char LICENSE[] SEC("license") = "GPL";
