// idioms: how bpftime's GPU examples (example/gpu/) are written, in one
// object that the receiver must load and run as a bpftime user expects.
//   cuda__exit   bpftime names GPU programs cuda__<name> (its loader picks
//                the GPU attach by that prefix); here the section decides
//   exits        GPU ring buffer (1527) that declares a 1024-byte value;
//                the program writes 32-byte records (struct exit_small)
//   settings     GPU array (1503): configuration the program reads; zeros
//                unless the collector seeds it (programs[i]::map_values)
//   per_lane     per-thread array (1502) seeded for every lane
//   narrow       GPU array (1503) of 4-byte values
//   host_manual  SEC("uprobe"): libbpf's manual-attach form, which names no
//                target; the collector cannot attach it and skips it
#include "gpuprobe.h"

struct exit_big {
	u64 timestamp_ns;
	u32 lane;
	u32 block;
	u64 payload[126];
}; // 1024 bytes: what the map declares

struct exit_small {
	u64 timestamp_ns;
	u32 lane;
	u32 block;
	u64 sm;
	u32 warp;
	u32 flags;
}; // 32 bytes: what the program writes

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct exit_big);
} exits SEC(".maps");

struct settings {
	u64 enabled;
	u64 lane_mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, struct settings);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} per_lane SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u32);
} narrow SEC(".maps");

// emit writes one short record; as a real function its argument type is
// in the object's BTF, so programs[i]::record_types can name it.
static __noinline long emit(struct exit_small *e)
{
	return bpf_perf_event_output(NULL, &exits, 0, e, sizeof(*e));
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int cuda__exit(void *ctx)
{
	u32 zero = 0;
	struct settings *s = bpf_map_lookup_elem(&settings, &zero);
	if (!s || !s->enabled)
		return 0;
	u64 *n = bpf_map_lookup_elem(&per_lane, &zero);
	if (n)
		*n += 1;
	u32 *w = bpf_map_lookup_elem(&narrow, &zero);
	u32 flags = w ? *w : 0;
	struct exit_small e = {};
	e.timestamp_ns = bpf_get_globaltimer();
	e.lane = bpf_get_lane_id();
	e.sm = bpf_get_sm_id();
	e.warp = bpf_get_warp_id();
	e.flags = flags;
	if (!((s->lane_mask >> e.lane) & 1))
		return 0;
	emit(&e);
	return 0;
}

SEC("uprobe")
int host_manual(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
