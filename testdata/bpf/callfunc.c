// callfunc: a bpf-to-bpf call. mix() is a real function (not inlined) that
// the entry probe calls twice; the results go into a GPU array per thread.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} mixed SEC(".maps");

// mix returns a*31 + (b ^ (b >> 3)), and counts its calls in mixed[1023].
static __noinline u64 mix(u64 a, u64 b)
{
	u32 calls = 1023;
	u64 *c = bpf_map_lookup_elem(&mixed, &calls);
	if (c)
		__sync_fetch_and_add(c, 1);
	return a * 31 + (b ^ (b >> 3));
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int callfunc(void *ctx)
{
	u64 tx, ty, tz, bx, by, bz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_idx(&bx, &by, &bz);

	u64 h = mix(mix(bx, tx), ty);
	u32 key = tx & 511;
	bpf_map_update_elem(&mixed, &key, &h, BPF_ANY);
	return h & 0xffff;
}

char LICENSE[] SEC("license") = "GPL";
