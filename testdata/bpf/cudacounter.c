// cudacounter: an entry and an exit probe on vectorAdd that count the
// kernel's calls and time them, as bpftime's cuda-counter and cudagraph
// examples do. Thread 0 of block 0 is the launch's witness: at entry it
// adds 1 to cc_stats[CALLS] and prints "Entered", at exit it adds its own
// entry-to-exit time to cc_stats[TOTAL_NS] and prints "Exited". Every
// thread keeps its entry time in cc_start (1502) and adds 1 to
// cc_stats[EXITS] at exit. After L launches of T threads each:
// cc_stats = {L, T*L, total}, with 0 < total below the run's wall time,
// and 2*L log records (L of each text).
#include "gpuprobe.h"

enum { CALLS, EXITS, TOTAL_NS, NSTATS };

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} cc_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, NSTATS);
	__type(key, u32);
	__type(value, u64);
} cc_stats SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(&cc_stats, &key);
	if (p)
		__sync_fetch_and_add(p, v);
}

// witness is whether this thread is thread 0 of block 0.
static __always_inline int witness(void)
{
	u64 bx, by, bz, tx, ty, tz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	return (bx | by | bz | tx | ty | tz) == 0;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int cc_entry(void *ctx)
{
	u32 key = 0;
	u64 now = bpf_get_globaltimer();
	bpf_map_update_elem(&cc_start, &key, &now, BPF_ANY);
	if (witness()) {
		add(CALLS, 1);
		bpf_printk("Entered vectorAdd");
	}
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int cc_exit(void *ctx)
{
	u32 key = 0;
	u64 now = bpf_get_globaltimer();
	add(EXITS, 1);
	if (!witness())
		return 0;
	u64 *start = bpf_map_lookup_elem(&cc_start, &key);
	if (start && *start && *start <= now) {
		u64 d = now - *start;
		add(TOTAL_NS, d);
		bpf_printk("Exited vectorAdd duration=%llu ns", d);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
