// allhelpers: calls every helper of the GPU ABI (jit/abi.go) at least once,
// and writes what they returned into one ring-buffer record per thread.
#include "gpuprobe.h"

// EXIT_THREAD_X: the thread with this x index ends its kernel through
// bpf_gpu_exit after writing its record.
#define EXIT_THREAD_X 7

struct all_event {
	u64 pid_tgid;
	u64 timer_ns;
	u64 block[3], block_dim[3], thread[3], grid[3];
	u64 sm_id, warp_id, lane_id;
	u64 leader, lanes, mask, sum, min, max;
	u64 launch_id;
	u64 looked_up;   // value read back from array_map
	u64 hash_update; // bpf_map_update_elem's result on hash_map
	u64 hash_delete; // bpf_map_delete_elem's result on hash_map
	u64 membar;
	u64 puts;
	u64 printk;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} array_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct all_event);
} events SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pf")
int allhelpers(void *ctx)
{
	struct all_event e = {};

	e.pid_tgid = bpf_get_current_pid_tgid();
	e.timer_ns = bpf_get_globaltimer();
	bpf_get_block_idx(&e.block[0], &e.block[1], &e.block[2]);
	bpf_get_block_dim(&e.block_dim[0], &e.block_dim[1], &e.block_dim[2]);
	bpf_get_thread_idx(&e.thread[0], &e.thread[1], &e.thread[2]);
	bpf_get_grid_dim(&e.grid[0], &e.grid[1], &e.grid[2]);
	e.sm_id = bpf_get_sm_id();
	e.warp_id = bpf_get_warp_id();
	e.lane_id = bpf_get_lane_id();
	e.leader = gpuprobe_warp_is_leader();
	e.lanes = gpuprobe_warp_active_count();
	e.mask = gpuprobe_warp_active_mask();
	e.sum = gpuprobe_warp_sum_u64(e.thread[0]);
	e.min = gpuprobe_warp_min_u64(e.thread[0]);
	e.max = gpuprobe_warp_max_u64(e.thread[0]);
	e.launch_id = gpuprobe_get_launch_id();

	u32 key = e.thread[0] & 1023;
	u64 val = e.thread[0] * 3 + 1;
	bpf_map_update_elem(&array_map, &key, &val, BPF_ANY);
	u64 *got = bpf_map_lookup_elem(&array_map, &key);
	if (got)
		e.looked_up = *got;

	e.hash_update = bpf_map_update_elem(&hash_map, &key, &val, BPF_ANY);
	e.hash_delete = bpf_map_delete_elem(&hash_map, &key);

	e.membar = bpf_gpu_membar();
	char msg[] = "allhelpers";
	e.puts = ebpf_puts(msg);
	e.printk = bpf_printk("thread %llu\n", e.thread[0]);

	bpf_perf_event_output(ctx, &events, 0, &e, sizeof(e));
	if (e.thread[0] == EXIT_THREAD_X) {
		bpf_gpu_exit();
		return 2;
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
