// hostcall_rt: the host-call round trip, measured on the GPU. One thread
// (gpucheck launches vectorAddN with one thread) calls bpf_printk 64 times
// in a row, each answered by the host through the mailbox, and stores the
// %globaltimer span and the number of calls the host answered:
//   rt[0]  ns from before the first call to after the last
//   rt[1]  calls answered (trace_printk returned >= 0)
//   rt[2]  calls made
#include "gpuprobe.h"

#define CALLS 64

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} rt SEC(".maps");

SEC("kprobe/_Z10vectorAddNPKfS0_Pfi")
int hostcall_rt(void *ctx)
{
	u64 ok = 0;
	u64 t0 = bpf_get_globaltimer();
	for (int i = 0; i < CALLS; i++) {
		if (bpf_printk("rt %d", i) >= 0)
			ok++;
	}
	u64 t1 = bpf_get_globaltimer();
	u32 k = 0;
	u64 *v = bpf_map_lookup_elem(&rt, &k);
	if (v)
		*v = t1 - t0;
	k = 1;
	v = bpf_map_lookup_elem(&rt, &k);
	if (v)
		*v = ok;
	k = 2;
	v = bpf_map_lookup_elem(&rt, &k);
	if (v)
		*v = CALLS;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
