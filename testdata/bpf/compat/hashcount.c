// compat/hashcount: the GPU hash map (1501) as a counter by key, in the
// lookup-then-insert idiom of Linux BPF tools: at the exit of vectorAdd
// every thread looks up the key blockIdx.x % 1024 and, when it is missing,
// inserts it with value 0 and BPF_NOEXIST (a race with another lane ends
// in -EEXIST, which is fine) and looks it up again; then it adds 1 to the
// value through the pointer. So once a key is in, each thread costs one
// probe walk and one atomic add on its block's key: gpucheck's bench
// config gpuhash, beside testdata/cuda/model/gpuhash_model.cuh.
// hc_err counts what must not happen: [0] inserts refused other than with
// -EEXIST, [1] lookups that missed after the insert.
// Expected for G blocks of B threads (1-D grid):
//   hc_count[k] = B * #{b < G : b % 1024 == k} (vectorAdd's 683 x 96: 96
//                 for k < 683, absent from 683)
//   hc_err      = {0, 0}
#include "gpuprobe.h"

#define EEXIST 17
#define HC_KEYS 1024

struct {
	__uint(type, BPF_MAP_TYPE_GPU_HASH_MAP);
	__uint(max_entries, HC_KEYS);
	__type(key, u32);
	__type(value, u64);
} hc_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} hc_err SEC(".maps");

static __always_inline void fault(u32 key)
{
	u64 *p = bpf_map_lookup_elem(&hc_err, &key);
	if (p)
		__sync_fetch_and_add(p, 1);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int hc_exit(void *ctx)
{
	u64 bx, by, bz;
	bpf_get_block_idx(&bx, &by, &bz);
	u32 key = bx % HC_KEYS;
	u64 *v = bpf_map_lookup_elem(&hc_count, &key);
	if (!v) {
		u64 zero = 0;
		long rc = bpf_map_update_elem(&hc_count, &key, &zero, BPF_NOEXIST);
		if (rc != 0 && rc != -EEXIST)
			fault(0);
		v = bpf_map_lookup_elem(&hc_count, &key);
	}
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		fault(1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
