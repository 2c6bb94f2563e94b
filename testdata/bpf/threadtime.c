// threadtime: the distribution of per-thread run times, in bpftime's
// per-thread-timing-dist and perthreadRuntimeDist idioms, for vectorAdd
// and for the sgemm sample. Every thread keeps its entry time in tt_start
// (1502); at exit it adds 1 to tt_log2_ns[floor(log2(exit - entry))] and
// the time to tt_total[0], 1 to tt_total[1] (GPU arrays, atomic adds).
// After L launches of T threads: the buckets sum to T*L = tt_total[1],
// no thread takes 0 ns or longer than the run.
#include "gpuprobe.h"

#define BUCKETS 40

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} tt_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, BUCKETS);
	__type(key, u32);
	__type(value, u64);
} tt_log2_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} tt_total SEC(".maps");

static __always_inline void add(void *map, u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(map, &key);
	if (p)
		__sync_fetch_and_add(p, v);
}

static __always_inline int enter(void)
{
	u32 key = 0;
	u64 now = bpf_get_globaltimer();
	bpf_map_update_elem(&tt_start, &key, &now, BPF_ANY);
	return 0;
}

static __always_inline int leave(void)
{
	u32 key = 0;
	u64 now = bpf_get_globaltimer();
	u64 *start = bpf_map_lookup_elem(&tt_start, &key);
	if (!start || *start == 0 || *start > now)
		return 0;
	u64 d = now - *start;
	u32 bucket = 0;
#pragma clang loop unroll(disable)
	for (u64 v = d; v > 1 && bucket < BUCKETS - 1; v >>= 1)
		bucket++;
	add(&tt_log2_ns, bucket, 1);
	add(&tt_total, 0, d);
	add(&tt_total, 1, 1);
	return 0;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int tt_va_entry(void *ctx) { return enter(); }

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int tt_va_exit(void *ctx) { return leave(); }

SEC("kprobe/sgemm")
int tt_gemm_entry(void *ctx) { return enter(); }

SEC("kretprobe/sgemm")
int tt_gemm_exit(void *ctx) { return leave(); }

char LICENSE[] SEC("license") = "GPL";
