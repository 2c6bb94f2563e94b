// hostprog: host programs on probed_add(long a, long b) of target.c, and a
// GPU program sharing an array with them. Used by userprog's tests.
//   calls    ARRAY: [0] entries, [1] returns
//   argstat  ARRAY of a struct: sum of a, last b
//   events   RINGBUF of call_event: one per entry (span events, timestamp_ns)
//   spans    RINGBUF of call_span: one per return (spans, start_ns/end_ns)
//   starts   HASH pid_tgid -> entry time (not exported)
//   shared   ARRAY also read by the GPU program: no BPF_F_MMAPABLE here, the
//            loader adds it
#include "host.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

struct arg_stat {
	u64 sum_a;
	s64 last_b;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct arg_stat);
} argstat SEC(".maps");

struct call_event {
	u64 timestamp_ns; // bpf_ktime_get_ns: CLOCK_MONOTONIC
	u32 pid;
	u32 tid;
	s64 a;
	s64 b;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 14);
	__type(value, struct call_event);
} events SEC(".maps");

struct call_span {
	u64 start_ns;
	u64 end_ns;
	u32 pid;
	u32 tid;
	s64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 14);
	__type(value, struct call_span);
} spans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, u64);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} shared SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} seen_on_gpu SEC(".maps");

SEC("uprobe/userprog_target:probed_add")
int on_enter(void *ctx)
{
	u32 key = 0;
	u64 *n = bpf_map_lookup_elem(&calls, &key);
	if (n)
		__sync_fetch_and_add(n, 1);

	s64 a = PARM1(ctx), b = PARM2(ctx);
	struct arg_stat *st = bpf_map_lookup_elem(&argstat, &key);
	if (st) {
		__sync_fetch_and_add(&st->sum_a, a);
		st->last_b = b;
	}
	u64 *sh = bpf_map_lookup_elem(&shared, &key);
	if (sh)
		*sh = 1000 + a;

	u64 id = bpf_get_current_pid_tgid();
	u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&starts, &id, &now, BPF_ANY);

	struct call_event ev = {};
	ev.timestamp_ns = now;
	ev.pid = id >> 32;
	ev.tid = (u32)id;
	ev.a = a;
	ev.b = b;
	bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
	return 0;
}

SEC("uretprobe/userprog_target:probed_add")
int on_return(void *ctx)
{
	u32 key = 1;
	u64 *n = bpf_map_lookup_elem(&calls, &key);
	if (n)
		__sync_fetch_and_add(n, 1);

	u64 id = bpf_get_current_pid_tgid();
	u64 *start = bpf_map_lookup_elem(&starts, &id);
	if (!start)
		return 0;
	struct call_span sp = {};
	sp.start_ns = *start;
	sp.end_ns = bpf_ktime_get_ns();
	sp.pid = id >> 32;
	sp.tid = (u32)id;
	sp.ret = RC(ctx);
	bpf_map_delete_elem(&starts, &id);
	bpf_ringbuf_output(&spans, &sp, sizeof(sp), 0);
	return 0;
}

// The GPU half: reads what the uprobe left in shared[0].
SEC("kprobe/_Z6kernelv")
int on_gpu(void *ctx)
{
	u32 key = 0;
	u64 *sh = bpf_map_lookup_elem(&shared, &key);
	u64 *out = bpf_map_lookup_elem(&seen_on_gpu, &key);
	if (sh && out)
		*out = *sh;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
