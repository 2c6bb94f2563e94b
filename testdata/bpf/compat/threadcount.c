// compat/threadcount: bpftime's threadhist idiom, a per-thread array (1502)
// bumped with a plain `*v += 1` through the looked-up pointer, at entry
// (key 0) and at exit (key 1) of vectorAdd.
// Expected: every thread's slot is 1 under both keys; nothing else moves.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} tc_runs SEC(".maps");

static __always_inline void bump(u32 key)
{
	u64 *v = bpf_map_lookup_elem(&tc_runs, &key);
	if (v)
		*v += 1;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int tc_entry(void *ctx)
{
	bump(0);
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int tc_exit(void *ctx)
{
	bump(1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
