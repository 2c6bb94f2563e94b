// sasshist: threadhist's counts for the SASS route's GPU check
// (scripts/gpu/sanitizer.sh, part programs): every thread's exit of
// PyTorch's vectorized elementwise kernel and of sassprog.py's Triton
// add_k, kernels that ship as SASS only, in a per-thread array (one u64
// slot per thread) and, per block, how many of its threads got there.
#include "gpuprobe.h"

#define MAX_BLOCKS 1024

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} thread_runs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, MAX_BLOCKS);
	__type(key, u32);
	__type(value, u64);
} block_threads SEC(".maps");

static __always_inline int count(void)
{
	u32 zero = 0;
	u64 *runs = bpf_map_lookup_elem(&thread_runs, &zero);
	if (runs)
		*runs += 1;

	u64 bx, by, bz;
	bpf_get_block_idx(&bx, &by, &bz);
	if (bx >= MAX_BLOCKS)
		return 0;
	u32 block = bx;
	u64 *n = bpf_map_lookup_elem(&block_threads, &block);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

SEC("kretprobe/vectorized_elementwise_kernel")
int torch_exit(void *ctx)
{
	return count();
}

SEC("kretprobe/add_k")
int triton_exit(void *ctx)
{
	return count();
}

char LICENSE[] SEC("license") = "GPL";
