// compat/geometry: the special-register helpers of bpftime's examples
// (get_block_idx/thread_idx/block_dim/grid_dim, lane/warp/sm ids,
// get_globaltimer, bpf_get_current_pid_tgid), stored per thread in a
// per-thread array (1502), as threadhist and kernel_trace read them.
// Keys (GEO_*): block and thread index (x | y<<16 | z<<32), block and grid
// dims packed alike, lane, %warpid, %smid, the timer at entry and at exit,
// pid_tgid.
// Expected on vectorAdd (683 x 96): idx/dims exact, lane = tid.x % 32,
// warp < 64, sm below a bound, start <= entry <= exit <= end of the
// kernel's window, pid_tgid = the value the checker compiles in.
#include "gpuprobe.h"

enum {
	GEO_BLOCK,
	GEO_THREAD,
	GEO_BDIM,
	GEO_GDIM,
	GEO_LANE,
	GEO_WARP,
	GEO_SM,
	GEO_T_ENTRY,
	GEO_T_EXIT,
	GEO_PID,
	GEO_KEYS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, GEO_KEYS);
	__type(key, u32);
	__type(value, u64);
} geo SEC(".maps");

static __always_inline void put(u32 key, u64 v)
{
	bpf_map_update_elem(&geo, &key, &v, BPF_ANY);
}

static __always_inline u64 pack(u64 x, u64 y, u64 z)
{
	return x | y << 16 | z << 32;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int geo_entry(void *ctx)
{
	put(GEO_T_ENTRY, bpf_get_globaltimer());
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pf")
int geo_exit(void *ctx)
{
	u64 x, y, z;
	bpf_get_block_idx(&x, &y, &z);
	put(GEO_BLOCK, pack(x, y, z));
	bpf_get_thread_idx(&x, &y, &z);
	put(GEO_THREAD, pack(x, y, z));
	bpf_get_block_dim(&x, &y, &z);
	put(GEO_BDIM, pack(x, y, z));
	bpf_get_grid_dim(&x, &y, &z);
	put(GEO_GDIM, pack(x, y, z));
	put(GEO_LANE, bpf_get_lane_id());
	put(GEO_WARP, bpf_get_warp_id());
	put(GEO_SM, bpf_get_sm_id());
	put(GEO_PID, bpf_get_current_pid_tgid());
	put(GEO_T_EXIT, bpf_get_globaltimer());
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
