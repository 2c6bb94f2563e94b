// Package inject splices compiled eBPF probes into CUDA kernels: it takes a
// PTX module and a set of GPU programs (jit.Program of kind entry, exit or
// memcapture), verifies and compiles each program once (jit/verifier,
// jit/ptx), inserts its .func and module-scope globals after the module
// header, and calls it from the kernels it targets. Every other byte of
// the module stays as it was: kernels no program targets are byte-identical.
//
// # Targets
//
// A program's Target (from its section, kprobe/<kernel>) names kernels by
// symbol (the mangled name in the PTX), by qualified name without
// parameters ("ns::kernel"), by base name ("kernel"), or as a path.Match
// pattern over any of them ("*" is every kernel, "vectorAdd*", "ns::*").
// A memcapture program without a target runs in every kernel.
// Options.Kernels restricts the kernels further. When no program targets
// any kernel of the module, Inject returns a *NoKernelError (errors.Is
// ErrNoKernel) that lists the kernels the module has.
//
// # Probe points
//
//   - Entry: at the top of the kernel body, after its leading declarations
//     and before its first statement (a label there stays after the call,
//     so loops that branch back to it do not rerun the probe).
//   - Exit: every ret and exit of the kernel, at any depth, becomes a branch
//     to one exit block at the end of the body, under the instruction's own
//     guard (`@%p ret;` becomes `@%p bra $gpuprobe_exit;`); a label on the
//     instruction stays on the branch. The block calls the exit programs and
//     then returns. One exit block (rather than a call before each exit)
//     keeps the code small and lets lanes that leave at different points
//     reconverge before the probe, so warp-level helpers see the whole warp
//     and kernel_phases writes one record per warp. A body that falls off its
//     end also reaches the block. ret/exit inside device functions (.func)
//     that the kernel calls are not probed.
//   - Memory: after every ld/ldu/st with the .global state space (and, with
//     Options.Generic, after every generic ld/st whose address is global at
//     run time, tested with isspacep.global), under the access's guard. The
//     address is computed into a register before the access (a load may
//     overwrite its own base register). The context, jit.MemCtx layout
//     {u64 addr, u32 size, u32 flags}, lives in a 16-byte .local array of
//     the kernel; addr is the address as the instruction names it (a global
//     address). Atomics (atom/red) and vector/texture/surface instructions
//     other than ld/st are not probed.
//
// A call passes r1 = ctx (0 for entry and exit programs, the generic
// address of the memcapture context otherwise), r2 = its size, and, in
// LaunchIDParam mode, the launch id.
//
// Entry and exit programs are not called but inlined: each site gets the
// program's .func body in a nested block, its parameters set from the call's
// arguments, its labels prefixed per site and its ret turned into a branch
// to the block's end (inline.go). ptxas does not inline a .func, and a call
// keeps the probe out of the kernel's schedule; inlined, ptxas overlaps
// the probe's atomics with the kernel's own memory latency (the same logic
// around vectorAdd on the H100: 1.357x called, 1.160x inlined).
// Memcapture programs, one site per global access, stay calls.
// Options.NoInline calls every program.
//
// # Launch identity
//
// Device records must be joinable to the host's launch records. We pass
// the launch id as a hidden kernel parameter (LaunchIDParam, the default):
// Inject appends `.param .u64 __gpuprobe_launch_id` to each patched kernel,
// the kernel loads it once at entry and hands it to every probe call, and
// helper 606 (get_launch_id) in the program's main function reads that
// argument (the compiled program's PREFIX_launch_id global is dropped).
// KernelReport.Launch says where the shim must put the id: one more
// element in cuLaunchKernel's kernelParams (Index), or Offset bytes into a
// CU_LAUNCH_PARAM_BUFFER_POINTER buffer.
//
// Why not the alternatives:
//   - `%gridid` matched by order: the host cannot read a launch's gridid,
//     the counter is shared by every launch of the context (unpatched ones,
//     library kernels, other streams), and a launch whose records were all
//     dropped shifts every later match; a wrong join is silent.
//   - A module-scope launch-id global set by the shim before each launch
//     (LaunchIDGlobal): two launches of the module's kernels in flight on
//     different streams read whichever value was written last. It stays as
//     an option for hosts that cannot change launch parameters.
//
// The parameter costs one ld.param per thread and is exact per launch,
// stream and graph replay of a captured launch (which repeats its id). The
// cost is on the shim: it must append the parameter on every launch path
// of a patched function, or the kernel reads garbage for the id (the driver
// reads as many parameters as the kernel declares).
//
// # Version and target
//
// .version is raised to what the probes need (jit/ptx writes 7.8) and never
// lowered. .target is kept: the programs are compiled for it (below sm_80
// the warp helpers use shuffles instead of redux.sync). A module that
// targets an architecture older than sm_70 (no activemask) is an error,
// unless Options.RaiseTarget is set, which raises .target to Options.Arch
// (the device's; the driver JIT-compiles for the device anyway).
//
// # Globals and cache
//
// Report.Globals lists every module-scope .u64 the loader sets before the
// first launch (cuModuleGetGlobal + a copy): map region bases, per-thread
// and per-warp map lanes, the mailbox base. Each program has its own
// globals; programs of one object that share a map have the same MapDef,
// so the loader binds them to one region. Injector caches results by the
// SHA-256 of the module, the programs and the options, in a bounded LRU.
package inject
