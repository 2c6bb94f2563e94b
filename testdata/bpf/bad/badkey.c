// A GPU array whose key is not a u32 index.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u64);
	__type(value, u64);
} wide_key SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int bad_key(void *ctx)
{
	u64 k = 0;
	u64 *v = bpf_map_lookup_elem(&wide_key, &k);
	return v ? *v : 0;
}
