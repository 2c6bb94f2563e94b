// A GPU program that dereferences a lookup result without a NULL check:
// loads fine, and the verifier must reject it.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} counts SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int unchecked(void *ctx)
{
	u32 key = 0;
	u64 *v = bpf_map_lookup_elem(&counts, &key);
	*v += 1;
	return 0;
}

SEC("uprobe/./app:main")
int host_side(void *ctx)
{
	return 0;
}
