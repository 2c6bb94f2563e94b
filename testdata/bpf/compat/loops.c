// compat/loops: bounded loops with early returns and breaks, and no
// bpf_gpu_exit (bpftime's examples end GPU programs by returning), at the
// exit of vectorAdd. Per thread, in a per-thread array (1502):
//   key 0: popcount(gid), a 32-trip loop over the bits
//   key 1: Collatz steps of tid.x + 1 (a loop left by break, <= LP_STEPS)
//   key 2: 7, written only by threads with tid.x % 5 != 4 (the others
//          return early, before the write)
// Expected: exactly those values; key 2 is 0 for the early leavers.
#include "gpuprobe.h"

#define LP_STEPS 500

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} lp_out SEC(".maps");

static __always_inline void put(u32 key, u64 v)
{
	u64 *p = bpf_map_lookup_elem(&lp_out, &key);
	if (p)
		*p = v;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int lp_exit(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&dx, &dy, &dz);
	u64 gid = bx * dx + tx;

	u64 bits = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < 32; i++)
		bits += (gid >> i) & 1;
	put(0, bits);

	u64 x = tx + 1, n = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < LP_STEPS; i++) {
		if (x == 1)
			break;
		x = (x & 1) ? 3 * x + 1 : x / 2;
		n++;
	}
	put(1, n);

	if (tx % 5 == 4)
		return 0;
	put(2, 7);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
