// kerneltrace: bpftime's kernel_trace idiom, one ring record per thread at
// the ENTRY of vectorAdd (where kernelretsnoop.c writes at its exit): the
// thread's block and thread ids and the entry time. After L launches of T
// threads, records delivered + dropped = T*L, each with ids inside the
// grid and a time inside the run.
#include "gpuprobe.h"

struct entry_event {
	u64 ts;
	u32 block_x, block_y, block_z;
	u32 thread_x, thread_y, thread_z;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct entry_event);
} entries SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int kerneltrace(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	struct entry_event e = {
		.ts = bpf_get_globaltimer(),
		.block_x = bx, .block_y = by, .block_z = bz,
		.thread_x = tx, .thread_y = ty, .thread_z = tz,
	};
	return bpf_perf_event_output(ctx, &entries, 0, &e, sizeof(e));
}

char LICENSE[] SEC("license") = "GPL";
