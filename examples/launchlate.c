// launchlate: how long a launch waits between the host's cudaLaunchKernel
// and the first instruction of the kernel on the GPU.
//
// Host half: a uprobe on cudaLaunchKernel stores bpf_ktime_get_ns()
// (CLOCK_MONOTONIC) in launch_clock[0]. GPU half: thread (0,0,0) of each
// block reads it and takes bpf_ktime_get_ns() on the GPU, which gpuprobe
// computes as %globaltimer plus the collector's calibrated offset
// (CLOCK_MONOTONIC - %globaltimer), so both ends are on one clock. It adds
// the delay to a log2 histogram in a GPU array and leaves the last delay in
// launch_clock[1], where host programs and the collector can read it.
//
// launch_clock is a kernel map: the collector creates it in Linux with
// BPF_F_MMAPABLE, the application maps it and registers it with the device,
// and the GPU half reads and writes it in place. LAUNCH_CLOCK_TYPE is its
// declared type (launchlate_ks.c declares bpftime's 1504 instead).
#include "gpuprobe.h"

#ifndef LAUNCH_CLOCK_TYPE
#define LAUNCH_CLOCK_TYPE BPF_MAP_TYPE_ARRAY
#endif

#define CLOCK_LAUNCH 0
#define CLOCK_LAST_DELAY 1
#define BUCKETS 64

struct {
	__uint(type, LAUNCH_CLOCK_TYPE);
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

SEC("kprobe/vectorAdd")
int launch_gpu(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	if (tx | ty | tz)
		return 0;

	u32 key = CLOCK_LAUNCH;
	u64 *launch = bpf_map_lookup_elem(&launch_clock, &key);
	if (!launch || *launch == 0)
		return 0;

	u64 now = bpf_ktime_get_ns();
	u64 start = *launch;
	u64 delay = now > start ? now - start : 0;
	key = CLOCK_LAST_DELAY;
	bpf_map_update_elem(&launch_clock, &key, &delay, BPF_ANY);

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
