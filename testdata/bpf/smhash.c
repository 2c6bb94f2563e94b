// smhash: bpftime's threadscheduling_dynamic_hook idiom, the
// thread-to-hardware map kept in a GPU hash map (1501): at the entry of
// vectorAdd every thread counts itself under the key (SM id << 8 | warp
// id), inserting the key with BPF_NOEXIST first (one lane of a warp wins,
// the others get -EEXIST) and adding 1 through the looked-up pointer.
// smh_err counts what must not happen: [0] inserts refused other than
// with -EEXIST (a full table: -E2BIG), [1] lookups that missed after the
// insert. After L launches of T threads: the values sum to T*L, every
// key's SM id is below the GPU's SM count and its warp id below 64, and
// smh_err stays {0, 0}.
#include "gpuprobe.h"

#define EEXIST 17

struct {
	__uint(type, BPF_MAP_TYPE_GPU_HASH_MAP);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} smh_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} smh_err SEC(".maps");

static __always_inline void fault(u32 key)
{
	u64 *p = bpf_map_lookup_elem(&smh_err, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int smhash(void *ctx)
{
	u32 key = (u32)(bpf_get_sm_id() << 8) | (u32)(bpf_get_warp_id() & 0xff);
	u64 zero = 0;
	long rc = bpf_map_update_elem(&smh_threads, &key, &zero, BPF_NOEXIST);
	if (rc != 0 && rc != -EEXIST)
		fault(0);
	u64 *v = bpf_map_lookup_elem(&smh_threads, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		fault(1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
