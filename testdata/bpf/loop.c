// loop: a bounded loop. Each thread counts the Collatz steps of
// (its linear thread index + 1), at most MAX_STEPS, and stores the count.
#include "gpuprobe.h"

#define MAX_STEPS 1000

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} steps SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int collatz(void *ctx)
{
	u64 tx, ty, tz;
	bpf_get_thread_idx(&tx, &ty, &tz);

	u64 x = tx + 1;
	u32 n = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_STEPS; i++) {
		if (x == 1)
			break;
		x = (x & 1) ? 3 * x + 1 : x / 2;
		n++;
	}
	u32 key = tx & 1023;
	u64 v = n;
	bpf_map_update_elem(&steps, &key, &v, BPF_ANY);
	return n;
}

char LICENSE[] SEC("license") = "GPL";
