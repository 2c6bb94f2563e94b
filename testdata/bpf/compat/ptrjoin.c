// compat/ptrjoin: cuda-counter's update shape, where the value pointer is
// a join of a map value and a stack slot:
//   v = lookup(&m, &k); if (v) *v += 1;
//   bpf_map_update_elem(&m, &k, v ? v : &one, BPF_ANY);
// on a per-thread array (1502) at the exit of vectorAdd. Key 1 takes the
// same shape with the lookup's value copied first (`*v + 1` into a stack
// slot, then the join), as bpftime's kernel_trace counts calls.
// Expected: every thread's slot is 1 under key 0 and 1 under key 1.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} pj_calls SEC(".maps");

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int pj_exit(void *ctx)
{
	u64 one = 1;
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&pj_calls, &k);
	if (v)
		*v += 1;
	bpf_map_update_elem(&pj_calls, &k, v ? v : &one, BPF_ANY);

	u32 k1 = 1;
	u64 next = 1;
	u64 *w = bpf_map_lookup_elem(&pj_calls, &k1);
	if (w)
		next = *w + 1;
	bpf_map_update_elem(&pj_calls, &k1, w ? &next : &one, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
