// Pointer joins: a register that points into one region on one path and
// into another on the other. Linux's verifier explores such paths apart and
// accepts the programs whose every path is safe; so must ours. The programs
// named bad_* must be rejected. Built by the tests of jit/verifier and jit/ptx.
#include "gpuprobe.h"

// Keeps clang from sinking the uses of p into the branches that set it.
#define join_here(p) asm volatile("" : "+r"(p))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64[4]);
} wide SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUBLOCK_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} blk SEC(".maps");

// The counter idiom: the value found, or a stack default when the key is
// new. Linux accepts it; the join of stack and map value must not be lost.
SEC("kretprobe/_Z6kernelv")
int idiom(void *ctx)
{
	u64 one = 1;
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&hits, &k);
	bpf_map_update_elem(&hits, &k, v ? v : &one, BPF_ANY);
	return 0;
}

// A counter through the joined pointer: after n runs, hits[1] == n.
SEC("kretprobe/_Z6kernelv")
int counter(void *ctx)
{
	u64 first = 0;
	u32 k = 1;
	u64 *v = bpf_map_lookup_elem(&hits, &k);
	u64 *p = v ? v : &first;
	*p += 1;
	bpf_map_update_elem(&hits, &k, p, BPF_ANY);
	return *p;
}

// Values of two different maps joined, then read in bounds of both.
SEC("kretprobe/_Z6kernelv")
int two_maps(void *ctx)
{
	u32 k = 2;
	u64 *a = bpf_map_lookup_elem(&hits, &k);
	u64 *b = bpf_map_lookup_elem(&wide, &k);
	if (!a || !b)
		return 0;
	u64 *p = bpf_get_lane_id() & 1 ? a : b;
	return *p;
}

// The context (16 bytes) or a map value, read in bounds of both.
SEC("kprobe/__memcapture")
int ctx_or_value(struct gpuprobe_memctx *ctx)
{
	u32 k = 3;
	u64 *v = bpf_map_lookup_elem(&wide, &k);
	u64 *p = v ? v : &ctx->addr;
	return p[1];
}

// A loop whose pointer moves between the stack and a map value on every
// iteration: the analysis must still end.
SEC("kretprobe/_Z6kernelv")
int loop_join(void *ctx)
{
	u64 local[4] = {};
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&wide, &k);
	if (!v)
		return 0;
	u64 sum = 0;
#pragma clang loop unroll(disable)
	for (u32 i = 0; i < 8; i++) {
		u64 *p = (sum + i) & 1 ? v : local;
		join_here(p);
		sum += p[i & 3];
	}
	return sum;
}

// Odd lanes count on the stack, even lanes in the block's shared memory:
// the atomic add goes through a pointer that is .local or .shared.
SEC("kretprobe/_Z6kernelv")
int block_counter(void *ctx)
{
	u64 mine = 0;
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&blk, &k);
	if (!v)
		return 0;
	u64 *p = bpf_get_lane_id() & 1 ? &mine : v;
	join_here(p);
	__sync_fetch_and_add(p, 1);
	return *p;
}

// A stack pointer or NULL, checked before use.
SEC("kretprobe/_Z6kernelv")
int stack_or_null(void *ctx)
{
	u64 local = 5;
	u64 *p = NULL;
	if (bpf_get_lane_id() & 1) {
		p = &local;
		join_here(p); // a branch, not a mask of the address
	}
	join_here(p);
	if (!p)
		return 0;
	return *p;
}

// The same without the check: rejected on the NULL path.
SEC("kretprobe/_Z6kernelv")
int bad_stack_null(void *ctx)
{
	u64 local = 5;
	u64 *p = NULL;
	if (bpf_get_lane_id() & 1) {
		p = &local;
		join_here(p); // a branch, not a mask of the address
	}
	join_here(p);
	return *p; // bad_stack_null
}

// A pointer joined with a number, then dereferenced: rejected.
SEC("kretprobe/_Z6kernelv")
int bad_scalar(void *ctx)
{
	u64 local = 7;
	u64 *p = &local;
	if (bpf_get_lane_id() & 1)
		p = (u64 *)(long)bpf_get_globaltimer();
	join_here(p);
	return *p; // bad_scalar
}

// A map value joined with a number, passed as a helper's value: rejected.
SEC("kretprobe/_Z6kernelv")
int bad_scalar_arg(void *ctx)
{
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&hits, &k);
	bpf_map_update_elem(&hits, &k, v ? v : (u64 *)16, BPF_ANY); // bad_scalar_arg
	return 0;
}

// In bounds of the stack buffer (16 bytes), past the end of the 8-byte
// value of hits: rejected on the map value's path.
SEC("kretprobe/_Z6kernelv")
int bad_bounds(void *ctx)
{
	u64 buf[2] = {5, 6};
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&hits, &k);
	u64 *p = v ? v : buf;
	return p[1]; // bad_bounds
}

// A lookup result that may be NULL joined with a stack pointer: the join
// does not stand for a NULL check.
SEC("kretprobe/_Z6kernelv")
int bad_null(void *ctx)
{
	u64 one = 1;
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&hits, &k);
	u64 *p = bpf_get_lane_id() & 1 ? v : &one;
	return *p; // bad_null
}

// In bounds of the 32-byte value of wide, past the top of the stack:
// rejected on the stack's path.
SEC("kretprobe/_Z6kernelv")
int bad_stack_bounds(void *ctx)
{
	u64 last = 9;
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&wide, &k);
	u64 *p = v ? v : &last;
	join_here(p);
	return p[2]; // bad_stack_bounds
}
