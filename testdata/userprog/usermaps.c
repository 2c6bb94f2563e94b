// usermaps: one GPU map of every kind the receiver turns into telemetry,
// used by the receiver's tests (receiver/internal/progmaps, receiver/).
//   stats      GPU array (1503): per-block counters, a gauge and a small histogram
//   runs       per-thread array (1502): how often each thread got here
//   warp_work  per-warp array (1600): lanes active per warp, summed
//   phases     GPU ring buffer (1527): one span per record (start_ns/end_ns)
//   exits      GPU ring buffer (1527): one span event per record (timestamp_ns)
#include "gpuprobe.h"

#define GAUGE __attribute__((btf_decl_tag("gpuprobe:gauge")))

struct block_stats {
	u64 calls;        // unsigned: a cumulative sum
	u64 bytes;
	s64 last_delta;   // signed: a gauge
	u64 occupancy GAUGE; // unsigned but tagged: a gauge
	u32 hist[4];      // one series per element (attribute index)
	double ratio;     // float: a gauge
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, struct block_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} runs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUWARP_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} warp_work SEC(".maps");

enum phase { PHASE_LOAD = 1, PHASE_COMPUTE = 2, PHASE_STORE = 3 };

struct phase_span {
	u64 start_ns; // %globaltimer
	u64 end_ns;   // %globaltimer
	u32 sm_id;
	enum phase phase;
	char tag[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 14);
	__type(key, u32);
	__type(value, struct phase_span);
} phases SEC(".maps");

struct exit_event {
	u64 timestamp_ns; // %globaltimer
	u32 lane;
	u32 block;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 12);
	__type(key, u32);
	__type(value, struct exit_event);
} exits SEC(".maps");

SEC("kprobe/_Z6kernelPf")
int enter(void *ctx)
{
	u64 bx, by, bz;
	bpf_get_block_idx(&bx, &by, &bz);
	u32 block = bx;
	struct block_stats *s = bpf_map_lookup_elem(&stats, &block);
	if (s) {
		__sync_fetch_and_add(&s->calls, 1);
		s->occupancy = gpuprobe_warp_active_count();
	}
	u32 zero = 0;
	u64 *r = bpf_map_lookup_elem(&runs, &zero);
	if (r)
		*r += 1;
	if (gpuprobe_warp_is_leader()) {
		u64 *w = bpf_map_lookup_elem(&warp_work, &zero);
		if (w)
			*w += gpuprobe_warp_active_count();
	}
	return 0;
}

SEC("kretprobe/_Z6kernelPf")
int leave(void *ctx)
{
	struct phase_span p = {};
	p.start_ns = bpf_get_globaltimer();
	p.end_ns = bpf_get_globaltimer();
	p.sm_id = bpf_get_sm_id();
	p.phase = PHASE_STORE;
	bpf_perf_event_output(ctx, &phases, 0, &p, sizeof(p));
	struct exit_event e = {};
	e.timestamp_ns = bpf_get_globaltimer();
	e.lane = bpf_get_lane_id();
	bpf_perf_event_output(ctx, &exits, 0, &e, sizeof(e));
	return 0;
}

// A host program: its maps are not GPU regions.
SEC("uprobe/libcuda.so.1:cuLaunchKernel")
int host_launch(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
