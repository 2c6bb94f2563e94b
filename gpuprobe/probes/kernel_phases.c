//go:build ignore

// kernel_phases: gpuprobe's built-in probe set. It measures each launch's
// device window (first block start → last block end) and writes ONE record
// per launch (record.Exec, type 11) into a GPU ring buffer, so the collector
// can build the "queued" and "executing" phases of each launch span.
//
// The aggregation happens on the GPU, in three levels, because anything a
// kernel like vectorAdd does per warp in global memory costs more than the
// kernel (an H100 spike: one atomic per warp on 64..128 striped counters
// doubled vectorAdd's time). Measured on the H100 (scripts/gpu/bench.sh, ratio to
// the uninstrumented kernel in the same run, probes inlined into the
// kernel by gpuprobe/inject): 1.23x on vectorAdd with one thread per
// element (2^24 threads: what the probes add to a warp's life is a large
// part of the kernel's own work; 1.40x while they were called), 1.01x
// grid-stride, 1.004x on a SGEMM:
//
//   block   kp_block (shared memory, one value per block): every thread
//           counts itself at exit; the thread that brings the count to
//           the block's thread count is the block's last, and reads the
//           block's end after that, so the end follows every exit of the
//           block (other programs' exit probes run before
//           kernel_phases'). Nothing is written to the stack on the
//           common paths: locals stored there would cost every thread
//           local-memory traffic (a zeroed record did: 12x on vectorAdd).
//           The count's word carries a tag (launch id, block) so that
//           shared memory left over by an earlier block is never mistaken
//           for ours; every warp's leader initialises it at entry with a
//           compare-and-swap, so no barrier is needed and a warp that
//           exits early cannot be overwritten. The warp whose swap
//           installs the tag is the block's first to arrive: it keeps the
//           block's start (read before its swap) next to the word.
//   stripe  kp_table (device memory, private to the module): the block's
//           last thread adds the block's start and end to the cell of
//           stripe (linear block id % KP_STRIPES) of the launch's slot
//           (launch id % KP_SLOTS) with atomic max (the start as its
//           complement), and counts the block there; the stripe's last
//           block moves the stripe into the launch cell and resets it.
//           Entry probes touch only shared memory.
//   launch  the last stripe to finish writes the record and resets the
//           launch cell, so the slot is clean for a later launch.
//
// The target "*" means every kernel of the module (gpuprobe/inject matches
// section targets as patterns). Build: go generate ./gpuprobe/probes.
#include "gpuprobe.h"

#define EXEC_RECORD_TYPE 11
#define EXEC_RECORD_VERSION 1

#define KP_SLOTS 256   /* launches of one module executing at once */
#define KP_STRIPES 64  /* cells a launch's blocks are spread over */

// struct exec_record is record.Exec (record/exec.go), 48 bytes.
struct exec_record {
	u16 type;
	u16 version;
	u32 size;
	u64 launch_id;
	u64 start_ns;
	u64 end_ns;
	u64 blocks;
	u64 threads;
};

// struct kp_word is the block's shared value: lanes that exited and the
// tag of the block that owns it (one word, installed with one
// compare-and-swap), and the block's start, which its last thread folds into
// the launch with its end.
struct kp_word {
	u32 count;
	u32 tag;
	u64 start;
};

// struct kp_cell is one stripe (or the launch total) of a launch slot, one
// 32-byte L2 sector each. Cells of 128 bytes (a line each) with 64 slots
// measured the same on the H100 (vectorAddN 1.574x against 1.581x, same
// run) in the same 520 KiB: 256 launches of a module may now execute at once.
struct kp_cell {
	u64 nstart; /* ~ earliest start (atomic max of the complement) */
	u64 end;    /* latest end */
	u64 blocks; /* blocks (stripe cell) or stripes (launch cell) done */
	u64 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUBLOCK_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct kp_word);
} kp_block SEC(".maps");

// kp_table: KP_SLOTS × (1 launch cell + KP_STRIPES stripe cells). The host
// never reads it: the loader puts it in device memory, zeroed.
struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, KP_SLOTS * (KP_STRIPES + 1));
	__type(key, u32);
	__type(value, struct kp_cell);
} kp_table SEC(".maps");

// kp_exec: the ring the collector reads; one record per launch.
struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 16);
	__type(key, u32);
	__type(value, struct exec_record);
} kp_exec SEC(".maps");

/* block_tag: our launch and block, in 32 bits: blocks of one launch never
 * share a tag, and a tag left by another launch matches ours with
 * probability 2^-32. */
static __always_inline u32 block_tag(u64 lid, u64 block)
{
	return ((u32)lid * 0x9E3779B1u + (u32)block) | 1; /* never 0: 0 marks a released word */
}

/* block_word returns the block's shared word (NULL only if the map is
 * absent). */
static __always_inline struct kp_word *block_word(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&kp_block, &zero);
}

/* Every warp runs these probes, so their common paths keep to registers:
 * the geometry comes from helpers 610..612 (503/504/508 write through the
 * stack, and those local-memory stores and loads were most of the cost on
 * vectorAdd: 4.9x on the H100), and the only stack bytes are the 4-byte
 * keys of the lookups. */

SEC("kprobe/*")
int kernel_phases_entry(void *ctx)
{
	u64 now, lid, w, want;
	struct kp_word *b;

	if (!gpuprobe_warp_is_leader())
		return 0;
	lid = gpuprobe_get_launch_id();
	if (lid == 0 || !(b = block_word()))
		return 0;
	want = (u64)block_tag(lid, gpuprobe_block_linear_id()) << 32; /* count 0, our tag */
	w = *(u64 *)b;
	if (w >> 32 == want >> 32)
		return 0; /* another warp of the block came first */
	/* Read before the compare-and-swap below: a warp that finds the tag
	 * (above, or by failing the swap) found it after the winner's swap,
	 * so after this read, and so every exit of the block comes after the
	 * block's start. */
	now = bpf_get_globaltimer();
	/* The warp whose compare-and-swap installs the tag is the block's
	 * first to arrive, so its start is the block's: warps of a block
	 * start in any order, and thread 0's warp can start after another
	 * warp has already exited (96 ns after one, on the H100). */
	if (__sync_val_compare_and_swap((u64 *)b, w, want) != w)
		return 0;
	/* Kept in shared memory for the block's last thread, which adds it to
	 * the launch with the end: nothing goes to global memory at entry
	 * (a lookup and an atomic there for every block cost 9% on
	 * vectorAdd). This warp counts itself at exit, after this store. */
	b->start = now;
	return 0;
}

/* block_done folds a finished block (its end read by its last thread) into
 * its stripe, and the stripe into the launch; the launch's last stripe
 * writes the record (its stack stores only happen on that path). Inline:
 * a bpf-to-bpf call costs the kernel a second stack frame and 4 more
 * registers (34, a 75% occupancy cap on a 256-thread vectorAdd). */
static __always_inline int block_done(u64 lid, u64 threads, u64 start)
{
	struct exec_record r;
	u32 key;
	u64 block, nblocks, want, done, stripes, nstart, end, now;
	struct kp_cell *c, *l;

	now = bpf_get_globaltimer();
	block = gpuprobe_block_linear_id();
	nblocks = gpuprobe_grid_blocks();
	key = (u32)(lid % KP_SLOTS) * (KP_STRIPES + 1);
	key += 1 + (u32)(block % KP_STRIPES);
	c = bpf_map_lookup_elem(&kp_table, &key);
	if (!c)
		return 0;
	gpuprobe_atomic_max_u64(&c->nstart, ~start);
	gpuprobe_atomic_max_u64(&c->end, now);
	want = nblocks / KP_STRIPES + (block % KP_STRIPES < nblocks % KP_STRIPES ? 1 : 0);
	done = __sync_fetch_and_add(&c->blocks, 1);
	if (done + 1 != want)
		return 0;
	/* The stripe's last block: move the stripe into the launch cell. */
	key = (u32)(lid % KP_SLOTS) * (KP_STRIPES + 1);
	l = bpf_map_lookup_elem(&kp_table, &key);
	if (!l)
		return 0;
	gpuprobe_fence_gpu();
	nstart = __sync_lock_test_and_set(&c->nstart, 0);
	end = __sync_lock_test_and_set(&c->end, 0);
	__sync_lock_test_and_set(&c->blocks, 0);
	gpuprobe_atomic_max_u64(&l->nstart, nstart);
	gpuprobe_atomic_max_u64(&l->end, end);
	gpuprobe_fence_gpu();
	stripes = nblocks < KP_STRIPES ? nblocks : KP_STRIPES;
	done = __sync_fetch_and_add(&l->blocks, 1);
	if (done + 1 != stripes)
		return 0;
	/* The launch's last stripe: write the record, reset the slot. */
	gpuprobe_fence_gpu();
	nstart = __sync_lock_test_and_set(&l->nstart, 0);
	end = __sync_lock_test_and_set(&l->end, 0);
	__sync_lock_test_and_set(&l->blocks, 0);
	r.type = EXEC_RECORD_TYPE;
	r.version = EXEC_RECORD_VERSION;
	r.size = sizeof(r);
	r.launch_id = lid;
	r.start_ns = nstart ? ~nstart : end;
	r.end_ns = end;
	r.blocks = nblocks;
	r.threads = nblocks * threads;
	/* ctx is not passed: kept for here, it would be spilled to the stack
	 * by every thread. */
	bpf_perf_event_output(0, &kp_exec, 0, &r, sizeof(r));
	return 0;
}

SEC("kretprobe/*")
int kernel_phases_exit(void *ctx)
{
	u32 old;
	u64 lid, threads, start;
	struct kp_word *b;

	lid = gpuprobe_get_launch_id();
	if (lid == 0 || !(b = block_word()))
		return 0;
	threads = gpuprobe_block_threads();
	/* Every exiting thread counts itself: ptxas turns a warp's adds to
	 * one address into one shared-memory atomic and hands each lane its
	 * own old value, which is shorter than electing a leader and
	 * counting its warp's active lanes first (vectorAddN 1.511x against
	 * 1.578x, same run). */
	old = __sync_fetch_and_add(&b->count, 1);
	if (old + 1 != threads)
		return 0;
	/* The block's last thread. Its count follows every other warp's, and
	 * so the first warp's store of the start. Release the word: a replay
	 * of this launch (a CUDA graph) may get the same shared memory and the
	 * same tag. The block's end is read after every other warp's count:
	 * each of them ran its exit probes (and any other program's) before
	 * counting, so the end is at or after every exit of the block. */
	start = b->start;
	*(u64 *)b = 0;
	return block_done(lid, threads, start);
}

char LICENSE[] SEC("license") = "GPL";
