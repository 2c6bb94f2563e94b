// unchecked: dereferences a hash lookup without a null check; Linux's
// verifier rejects it.
#include "host.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} counter SEC(".maps");

SEC("uprobe/userprog_target:probed_add")
int no_null_check(void *ctx)
{
	u32 key = 0;
	u64 *n = bpf_map_lookup_elem(&counter, &key);
	*n += 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
