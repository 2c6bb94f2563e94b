// partial: one program attaches, one names a binary that does not exist,
// one a symbol that probed_add's binary does not have.
#include "host.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} hits SEC(".maps");

static __always_inline int count(void)
{
	u32 key = 0;
	u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

SEC("uprobe/userprog_target:probed_add")
int good(void *ctx) { return count(); }

SEC("uprobe//nonexistent/gpuprobe-userprog-test:probed_add")
int nobinary(void *ctx) { return count(); }

SEC("uprobe/userprog_target:no_such_symbol")
int nosymbol(void *ctx) { return count(); }

char LICENSE[] SEC("license") = "GPL";
