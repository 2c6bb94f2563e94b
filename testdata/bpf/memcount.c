// memcount: counts the global loads and stores of every kernel, and the
// bytes they move.
#include "gpuprobe.h"

enum { LOADS, STORES, LOAD_BYTES, STORE_BYTES, NCOUNTERS };

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, NCOUNTERS);
	__type(key, u32);
	__type(value, u64);
} mem_counters SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *c = bpf_map_lookup_elem(&mem_counters, &key);
	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("kprobe/__memcapture")
int memcount(struct gpuprobe_memctx *ctx)
{
	u64 size = ctx->size;

	if (ctx->flags & GPUPROBE_MEM_STORE) {
		add(STORES, 1);
		add(STORE_BYTES, size);
	} else {
		add(LOADS, 1);
		add(LOAD_BYTES, size);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
