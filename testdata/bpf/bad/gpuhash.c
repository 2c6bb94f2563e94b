// bpftime's GPU hash map (1501), which gpuprobe does not support: the
// loader refuses it, naming the map, its type and the program.
#include "gpuprobe.h"

struct {
	__uint(type, 1501); /* bpftime BPF_MAP_TYPE_GPU_HASH_MAP */
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u64);
} gpu_hash SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int uses_gpu_hash(void *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&gpu_hash, &k);
	return v ? *v : 0;
}
