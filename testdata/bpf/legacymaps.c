// legacymaps: maps defined in the legacy "maps" section (struct
// bpf_map_def) instead of BTF ".maps"; the GPU map type numbers survive.
#include "gpuprobe.h"

struct bpf_map_def SEC("maps") legacy_counts = {
	.type = BPF_MAP_TYPE_GPU_ARRAY_MAP,
	.key_size = sizeof(u32),
	.value_size = sizeof(u64),
	.max_entries = 64,
};

struct bpf_map_def SEC("maps") legacy_per_thread = {
	.type = BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP,
	.key_size = sizeof(u32),
	.value_size = sizeof(u64),
	.max_entries = 1,
};

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int legacy(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);

	u32 key = tx % 64;
	u64 *c = bpf_map_lookup_elem(&legacy_counts, &key);
	if (c)
		__sync_fetch_and_add(c, 1);

	u32 zero = 0;
	u64 *mine = bpf_map_lookup_elem(&legacy_per_thread, &zero);
	if (mine)
		*mine = tx;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
