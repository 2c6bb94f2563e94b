// bpftime's kernel-shared GPU array (1504), which gpuprobe does not
// support: the loader refuses it, naming the map, its type and the program.
#include "gpuprobe.h"

struct {
	__uint(type, 1504); /* bpftime BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP */
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u64);
} shared SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int uses_kernel_shared(void *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&shared, &k);
	return v ? *v : 0;
}
