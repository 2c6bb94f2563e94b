// Package interp is the reference interpreter for gpuprobe's eBPF programs:
// the same RFC 9669 semantics and the same helper ABI (jit/abi.go) as the
// PTX the compiler emits, so it is the oracle for every test that cannot
// run on a GPU.
//
// A run is one GPU thread (Run) or one warp of up to 32 lanes (RunWarp).
// The caller supplies an Env: thread, block and grid coordinates, lane,
// warp and SM ids, the timer, pid_tgid, map storage (Maps) and the writer
// trace_printk and puts print to. r1 points to the context bytes and r2
// holds their length.
//
// Memory is bounds-checked: each frame has its own 512-byte stack (a
// callee can still use pointers into its callers' frames), the context is
// len(ctx) bytes, and a pointer to a map value reaches only that value. A
// fault is an *Error naming the instruction index; the interpreter never
// panics on a program. Pointers are opaque 64-bit values (region<<40 |
// offset); map handles from lddw are not dereferenceable.
//
// Loops run under jit.LoopBudget: after that many backward jumps the
// program ends with r0 = 0, as the compiled PTX does. bpf-to-bpf calls nest
// up to MaxFrames frames; r6..r9 are callee-saved.
//
// Helpers: map lookup/update/delete on hash (1), array (2), GPU array
// (1503), per-thread array (1502, one copy per Env.GlobalThreadID),
// per-warp array (1600, one copy per Env.GlobalWarpID) and per-block array
// (1601, one copy per Env.GlobalBlockID, shared by the block's threads;
// zeros until a thread of the block writes it, where on a GPU the block's
// shared memory holds whatever was there, so programs that initialise
// their values behave the same on both); perf_event_output
// appends a record to a GPU ring buffer (1527) whose MaxEntries bytes hold
// records of 8 + payload rounded up to 8 bytes, and returns -ENOSPC (-28)
// and counts a drop when full; trace_printk formats %d %i %u %x %X %o %c %s
// %p with l/ll/h/z and returns the byte count; puts prints a line;
// get_block_idx/get_block_dim/get_thread_idx/get_grid_dim write three u64
// through r1..r3; exit (507) ends the thread with r0 = 0. The warp helpers
// 600..605 aggregate r1 over the lanes that reached the same call (same
// instruction, same call depth); in Run the warp has one lane.
// atomic_max_u64/atomic_min_u64 (607/608) set the u64 at r1 to the
// unsigned max/min of it and r2 and return 0 (threads run one at a time,
// so a plain read-modify-write is atomic); fence_gpu (609) returns 0.
// block_linear_id, grid_blocks and block_threads (610..612) are computed
// from Env.BlockIdx, Env.GridDim and Env.BlockDim.
// get_globaltimer (502) is Env.Timer; ktime_get_ns (5) is Env.HostClock, or
// Env.Timer without one (as the PTX without a clock region). An array (2)
// with BPF_F_MMAPABLE, a kernel map shared with host programs, is an
// ordinary array here. Env.Helpers adds or overrides helpers (the
// conformance runner's helper 5, "unwind", replaces ktime_get_ns).
package interp
