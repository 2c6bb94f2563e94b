// compat/kshared: bpftime's kernel-shared array (1504) in the idiom of its
// threadhist-gpu-kernel-shared-map example, with no host program: each
// thread at the exit of vectorAdd adds 1 to key 0 with an atomic add
// through the looked-up pointer, thread 0 of the grid adds 1 to key 1
// (one per launch, where the example's host uretprobe counts launches),
// and thread 0 of each block adds the block's size to key 2. With no host
// program the map is a GPU array (1503), placed like the others.
// Expected for G blocks of B threads: ks_calls = {G*B, 1, G*B, 0}.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} ks_calls SEC(".maps");

static __always_inline void add(u32 key, u64 n)
{
	u64 *v = bpf_map_lookup_elem(&ks_calls, &key);
	if (v)
		__atomic_add_fetch(v, n, __ATOMIC_SEQ_CST);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int ks_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);
	add(0, 1);
	if (bx == 0 && tx == 0)
		add(1, 1);
	if (tx == 0)
		add(2, dx);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
