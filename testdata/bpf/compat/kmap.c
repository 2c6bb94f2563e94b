// compat/kmap: bpftime's kernel-shared array (1504) that a host program
// shares, so it is a kernel map (a Linux array the device maps, with no
// header). The GPU half at the exit of vectorAdd adds 1 to key 0 and
// tid.x + 1 to key 2 with atomic adds; the host half, a uretprobe on
// cudaLaunchKernel, adds 1 to key 1 (the suite runs only the GPU half).
// Expected for G blocks of B threads: km_count = {G*B, 0, G*B*(B+1)/2, 0};
// the map stays in host memory.
#include "gpuprobe.h"

struct {
	__uint(type, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} km_count SEC(".maps");

static __always_inline void add(u32 key, u64 n)
{
	u64 *v = bpf_map_lookup_elem(&km_count, &key);
	if (v)
		__sync_fetch_and_add(v, n);
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int km_exit(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);
	add(0, 1);
	add(2, tx + 1);
	return 0;
}

SEC("uretprobe/libcudart.so:cudaLaunchKernel")
int km_launches(void *ctx)
{
	add(1, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
