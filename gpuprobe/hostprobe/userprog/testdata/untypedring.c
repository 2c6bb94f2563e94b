// untypedring: a ring buffer without a record type (must be rejected: the
// collector could not decode its records).
#include "host.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 12);
} raw SEC(".maps");

SEC("uprobe/userprog_target:probed_add")
int emit(void *ctx)
{
	u64 v = PARM1(ctx);
	bpf_ringbuf_output(&raw, &v, sizeof(v), 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
