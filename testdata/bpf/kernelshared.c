// kernelshared: a kernel-shared array (bpftime's 1504, as in its
// threadhist-gpu-kernel-shared-map example) that a host uretprobe and a GPU
// exit probe both write: the GPU half adds 1 to key 0 in every thread of
// vectorAdd with an atomic add, the host half adds 1 to key 1 on every
// return of cudaLaunchKernel. The map is created in Linux as a
// BPF_MAP_TYPE_ARRAY with BPF_F_MMAPABLE; after L launches of T threads
// each, ks_count = {L*T, L}.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} ks_count SEC(".maps");

static __always_inline void add(u32 key)
{
	u64 *v = bpf_map_lookup_elem(&ks_count, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("kretprobe/vectorAdd")
int ks_threads(void *ctx)
{
	add(0);
	return 0;
}

SEC("uretprobe/libcudart.so:cudaLaunchKernel")
int ks_launches(void *ctx)
{
	add(1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
