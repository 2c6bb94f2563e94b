// Package ptx compiles verified eBPF programs (jit.Program) into PTX that
// can be spliced into any CUDA module. It is pure Go: no LLVM.
//
// # Output
//
// Compile returns a Func: one `.func` for the program, one more for each
// bpf-to-bpf subprogram, the per-program support routines that helpers need
// (memcpy, ring output, mailbox requests), and the module-scope globals they
// read. Every module-scope name starts with Options.Prefix (default
// "gpuprobe_" + the program name), so any number of programs can share a
// module; the exception is the .shared variable of a per-block array,
// named after its map so that programs share it (Per-block arrays, below). The entry has the signature
//
//	.func (.param .b64 ret) PREFIX (.param .b64 ctx, .param .b64 ctx_len)
//
// with r1 = ctx, r2 = ctx_len at entry and r0 returned. The code is
// `.version 7.8` and targets Options.Arch (default sm_90, at least sm_70).
// TestKernel wraps a program into a standalone module with an `.entry`
// PREFIX_test(mem, mem_len, result) that runs it once per thread on the
// thread's own copy of mem; ptxas checks and the GPU conformance runner use
// it.
//
// # Code generation
//
// r0..r10 are .b64 registers; each .func that uses r10 gets its own 512-byte
// `.local` frame and r10 is the generic address of its top, so r6..r9 are
// callee-saved and every call has a fresh stack. Memory accesses are
// generic ld/st, so stack, context and map values (host-registered shm) all
// work. Semantics follow RFC 9669 exactly: ALU32 results are zero-extended;
// division by zero gives 0 and modulo by zero leaves dst (ALU32: its low 32
// bits); signed INT_MIN / -1 gives INT_MIN and INT_MIN % -1 gives 0 (all
// with predicates, never executing a PTX division that is undefined);
// shift counts are masked to 31/63; byte swaps use prmt.b32; JMP32 compares
// the low 32 bits; ja32 and bpf-to-bpf calls are supported.
//
// Safety in someone else's kernel:
//   - A load or store through a pointer other than r10 checks alignment at
//     run time and falls back to byte accesses, because a misaligned access
//     faults the whole CUDA context, unless the verifier proved it aligned:
//     with Options.Verified (gpuprobe/inject always passes it) an access
//     that verifier.Result.ProvenAligned reports (stack or map value, never
//     the context, whose alignment is the caller's) goes without the check,
//     and so do the key loads and output stores of helpers.
//     Options.AssumeAligned drops every check.
//   - The verifier's other facts, with Options.Verified: a map key known on
//     every path is a constant (no load, and ptxas folds the bounds check),
//     one in the function's own frame an ld.local of its slot; accesses
//     proven to reach a per-block array's value use .shared (naming the
//     variable and byte when the verifier knows them, Result.BlockAddrs,
//     with no generic-to-shared conversion), atomics proven
//     to reach another map value use .global (no guard, and no test for a
//     shared address that a generic atomic makes the warp wait for); a
//     conditional jump that every run takes one way (Result.Decided, such
//     as the NULL check of a per-block lookup with a key in range) is a bra
//     or nothing; a store to the frame that no run reads is not written;
//     a frame slot that is only stored and loaded at r10+off, whole or as
//     4-byte halves (no pointer reaches it: Result.StackEscaped), is one
//     register or two (promote.go).
//   - PTX atomics are undefined on .local memory, so an atomic whose address
//     is on the stack (isspacep.local) or misaligned becomes a plain
//     read-modify-write (the stack is private to the thread).
//   - Loops: every taken backward jump spends one unit of jit.LoopBudget
//     (Options.LoopBudget), shared across subprogram calls; the jump after
//     the last unit ends the program with r0 = 0, as in the interpreter.
//   - Helper 507 (exit) executes PTX `exit`: the calling thread ends at once
//     and the rest of the kernel does not run for it (bpftime's behaviour).
//     Use it only in kernels that do not synchronise (bar.sync) afterwards.
//
// # Maps and globals
//
// An LD_IMM64 map reference puts an opaque handle in the register; helpers
// find the map from the last load of the handle in the same straight-line
// block, or else compare the handle against every map at run time. Each map
// but a per-block array has a `.const .u64 PREFIX_map_NAME` that the injector sets to the device
// address of the map's shm region (0: not attached, lookups give NULL);
// per-thread (1502) and per-warp (1600) arrays also have
// PREFIX_map_NAME_lanes = the region header's lanes field, kept in device
// memory so a lookup does not read the header over PCIe. Func.Globals lists
// them with their kind. Layouts are shm's (shm/doc.go, version 1):
//
//   - 1503 array: value of key k at base + 512 + k*align8(value_size).
//   - 1502 per-thread array: base + 512 + (k*lanes + thread)*stride, thread
//     = the global linear thread index; 1600 per-warp: warp = thread/32.
//     Out-of-range keys or lanes give NULL. Updates copy the value, with
//     Linux's array flags rules; delete gives -EINVAL.
//   - 1527 ring buffer: perf_event_output(ctx, map, flags, data, size)
//     follows the shm producer protocol (oversize check, full check against
//     tail, atom.add on head, late-drop accounting in slot_drops, payload
//     copy, st.release.sys of seq); it never waits. It returns 0, -ENOSPC
//     (dropped, counted), -E2BIG (larger than a slot, counted) or -ENOENT
//     (ring not attached). Records have slot type RingRecordType (0).
//   - Direct value loads (global data, src = BPF_PSEUDO_MAP_VALUE) give
//     base + 512 + offset (a kernel map: base + offset).
//
// # Per-block arrays
//
// A per-block array (1601) lives in shared memory, not in an shm region:
// the compiler declares a module-scope `.shared .align 8 .b8
// gpuprobe_blk_NAME[max_entries × align8(value_size)]` (SharedName; listed
// in Func.Shared, not in Func.Globals, so there is nothing to bind). Its
// name depends on the map's name only, not on Options.Prefix, so the
// programs of one object spliced into one module (an entry and an exit
// probe) share the block's values; whoever splices several programs into a
// module declares each variable once with SharedDecls (Func.Text does it
// for one program), and two maps of one name but different sizes cannot
// share a module. A lookup returns the generic address (cvta.shared) of
// key k's value, base + k*align8(value_size), or NULL for k ≥ max_entries;
// update copies as for the other GPU arrays; delete gives -EINVAL; a
// direct value load gives key 0 plus the offset. Loads, stores and atomics
// through the pointer are generic, so they reach shared memory (atomics
// take the atom/red path: isspacep.local is false there), or .shared where
// the verifier proves the pointer is a per-block value on every path. The variable
// takes shared memory from every block of the kernel, so it is capped at
// jit.MaxBlockMapBytes (1 KiB) per map, and it is NOT zeroed when a block
// starts: programs initialise their values (for example the first warp
// of the block, at entry, with a tagged compare-and-swap, since other
// warps may already be running; testdata/bpf/blockagg.c).
//
// # Kernel maps
//
// A plain array (type 2) with BPF_F_MMAPABLE (jit.MapFlagMmapable) is a
// kernel map: the collector creates it in Linux and loads the object's host
// programs against it; the application maps the map's fd and registers it
// with the device. Its global holds the device address of that mapping,
// which has no shm header: the value of key k is at base +
// k*align8(value_size) (Linux's mmapable array layout). Lookups and updates
// compile inline like a 1503 array's (NULL / -E2BIG out of range, NULL /
// -E2BIG while the global is 0, delete -EINVAL); no mailbox request is made.
// Other host maps keep the mailbox path.
//
// Freshness: the pointer a lookup returns goes to the program, whose loads
// through it are generic weak loads (ld, default cache operator .ca). The
// PTX memory model gives a weak load no guarantee of observing a write by
// another agent without synchronisation, and in practice the SM's L1 can
// serve a line it cached earlier in the same launch; L1 is not kept
// coherent with host writes but starts each launch clean. So a program
// sees what the host wrote before the launch began (launchlate's case: the
// uprobe on cudaLaunchKernel runs before the launch is queued); a host
// write during a long kernel may reach threads late. The loads this package
// emits itself where the host writes concurrently (the clock offset, the
// mailbox, ring tails) are ld.relaxed.sys (ld.volatile has the same
// synchronisation semantics, per the PTX ISA), which is never served stale.
// How fresh kernel-map values are on real hardware is to be measured on the
// GPU machine.
//
// # Clock
//
// bpf_ktime_get_ns (helper 5) is CLOCK_MONOTONIC, like Linux's: r0 =
// %globaltimer + offset, where offset (an i64, CLOCK_MONOTONIC −
// %globaltimer, kept current by the collector from its clock calibration)
// is read with ld.relaxed.sys at the address in PREFIX_clock (GlobalClock).
// While PREFIX_clock is 0 (no clock region) it returns %globaltimer
// unchanged, so host and GPU timestamps then differ by the clocks' offset.
// Each call reads host memory over the bus (one load, about a PCIe round
// trip: to be measured on the GPU machine), so where only GPU-side
// differences matter get_globaltimer (502) is cheaper.
// With Options.Conformance, id 5 is bpf_conformance's "unwind" instead.
//
// PREFIX_launch_id holds the launch id for helper 606; PREFIX_mailbox the
// device address of the host-call mailbox region, PREFIX_mailbox_locks
// (GlobalMailboxLocks) that of its lock block in device memory.
//
// # Host calls
//
// trace_printk (6), puts (501) and map helpers on maps that are not GPU
// maps (hash, array: the host path) post a request in the mailbox (shm
// "Mailbox" protocol) and wait for the answer, bounded by the region's
// timeout_ns (copied into the lock block) or Options.HostCallTimeout (100
// µs), measured on %globaltimer; on timeout (or without a mailbox or its
// lock block) they return -ETIMEDOUT (-110). A call claims a slot with a
// gpu-scope cas on the lock block, posts the request with 8- and 16-byte
// stores and one release store of req, and spins on one 16-byte load of
// {ack, ret}: one PCIe round trip per spin, none to claim. The
// request's args are r1..r5 (for map helpers: args[0] = the map's index in
// Program.Maps, then r2, r3, r4, and args[4] = jit.HostMapID(map name),
// which names the map across programs); the payload is the format string
// (trace_printk, at most fmt_size bytes), the NUL-terminated string (puts),
// or the key followed by the value (map helpers). A host-map lookup's answer
// is the byte offset of the value in the map's region, which the host keeps
// registered with the device; the GPU code adds the region's base (a
// negative answer means no entry: NULL).
//
// # Helpers inline
//
// 5 ktime_get_ns (above); 14 pid_tgid = Options.PidTgid; 502 %globaltimer;
// 503/504/505/508 store
// %ctaid/%ntid/%tid/%nctaid x, y, z through r1, r2, r3; 506 membar.sys;
// 509/510/511 %smid/%warpid/%laneid. Warp helpers work over the active
// lanes (activemask): 600 leader = lowest active lane; 601/602/603
// sum/min/max of a u64 with redux.sync (sm_80+: the sum adds four 16-bit
// chunks, min/max reduce high words then low words) or a shfl.sync loop
// over the active lanes before sm_80; 604 popc(activemask); 605 activemask.
// 607/608 atomic_max_u64/atomic_min_u64: `red.max.u64`/`red.min.u64` (no
// result, the thread does not wait) on the generic address in r1, global
// or shared; a .local (stack) or misaligned address takes a plain
// load/max/store instead, as the atomics above; r0 = 0. 609 fence_gpu:
// `fence.acq_rel.gpu` (device scope; 506's membar.sys also orders against
// the host and costs more), r0 = 0. 610 block_linear_id
// ((%ctaid.z*%nctaid.y + %ctaid.y)*%nctaid.x + %ctaid.x), 611 grid_blocks
// (%nctaid.x*y*z) and 612 block_threads (%ntid.x*y*z), in 64 bits, in r0:
// unlike 503/504/508 they write nothing to the stack.
package ptx
