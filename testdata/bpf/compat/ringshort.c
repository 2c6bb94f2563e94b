// compat/ringshort: bpftime's kernelretsnoop/mem_trace idiom, a GPU ring
// buffer (1527) that declares a large value (256 bytes) while the program
// writes a 24-byte record with bpf_perf_event_output, one per thread at
// the exit of vectorAdd.
// Expected: exactly one 24-byte record per thread (block, thread) with
// lane = tid.x % 32, magic RS_MAGIC and a %globaltimer inside the kernel's
// window; with a ring too small for the grid, records produced (one per
// thread) = delivered + dropped.
#include "gpuprobe.h"

#define RS_MAGIC 0x5eed

struct rs_big {
	u64 words[32];
}; // 256 bytes: what the map declares

struct rs_event {
	u32 block;
	u32 thread;
	u32 lane;
	u32 magic;
	u64 ts;
}; // 24 bytes: what the program writes

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 24);
	__type(key, u32);
	__type(value, struct rs_big);
} rs_ring SEC(".maps");

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int rs_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	struct rs_event e = {};
	e.block = bx;
	e.thread = tx;
	e.lane = bpf_get_lane_id();
	e.magic = RS_MAGIC;
	e.ts = bpf_get_globaltimer();
	bpf_perf_event_output(ctx, &rs_ring, 0, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
