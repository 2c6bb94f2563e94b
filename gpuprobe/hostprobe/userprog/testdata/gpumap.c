// gpumap: a host program that uses a GPU-only map (must be rejected).
#include "host.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} gpu_counts SEC(".maps");

SEC("uprobe/userprog_target:probed_add")
int host_uses_gpu_map(void *ctx)
{
	u32 key = 0;
	u64 *n = bpf_map_lookup_elem(&gpu_counts, &key);
	if (n)
		*n += 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
