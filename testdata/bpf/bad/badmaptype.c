// A map type no GPU program can use (1599 is no type of bpftime's or
// gpuprobe's): the loader refuses it, naming the map, its type and the
// program.
#include "gpuprobe.h"

struct {
	__uint(type, 1599);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u64);
} odd SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int uses_odd_map(void *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&odd, &k);
	return v ? *v : 0;
}
