// Package hostprobe puts eBPF uprobes and uretprobes on the CUDA runtime
// (libcudart) and driver (libcuda) entry points that gpuprobe follows, in
// every process that maps the probed file, and turns each returned call
// into a record.HostCall (type 10) and each successful cuModuleGetFunction
// or cuLibraryGetKernel into a record.KernelName, ready for the
// translator's Handle. The entry points are those of launches, copies,
// allocations and frees, synchronisations, graph launches, stream
// captures, event records and waits, and stream creation and destruction
// (record.HostAPIs; Symbols adds the two name functions).
//
// The eBPF program is bpf/cudahost.bpf.c, compiled by bpf2go for x86-64
// only (-target amd64; `make generate`) into the committed
// cudahost_x86_bpfel.go/.o. It has one entry and one return program per
// argument shape (plain, stack2, stack3, cfg, out, name); the API number
// comes from the attach cookie. Attach uses uprobe_multi links (Linux 6.6:
// one link per shape, detached with one RCU wait) and falls back to one
// perf-event uprobe per symbol (Linux 5.15, where detaching a library
// waits about 0.1 s per probe). It needs no kernel BTF (no CO-RE): BPF ring
// buffers (Linux 5.8), LRU hashes and the perf uprobe PMU, not tracefs.
//
// Use:
//
//	p, err := hostprobe.Load(hostprobe.Options{})
//	if errors.Is(err, hostprobe.ErrUnsupported) {
//		// report err once (it says why: privilege, lockdown, kernel) and go on without host probes
//	}
//	defer p.Close()
//	a, err := p.Attach("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
//	// a.Attached: symbols probed; a.Missing: known symbols the file lacks
//	for {
//		rec, err := p.Read(ctx, buf[:0]) // one record per call
//		if errors.Is(err, hostprobe.ErrClosed) || ctx.Err() != nil {
//			break
//		}
//		if err != nil {
//			continue // a sample that did not decode: counted in Stats
//		}
//		translator.Handle(src, rec, time.Now())
//	}
//
// How a call is seen: the uprobe at the function's first instruction saves
// the six register arguments (rdi, rsi, rdx, rcx, r8, r9), and per API the
// stack arguments (cuLaunchKernel's blockDimZ, sharedMemBytes and hStream
// at rsp+8, +16, +24; cudaLaunchKernel's sharedMem and stream at rsp+8,
// +16) or the launch config that the first argument points to
// (CUlaunchConfig, cudaLaunchConfig_t: grid, block, shared memory at 24,
// stream at 32), in an LRU hash keyed by thread and API. A dim3 passed by
// value takes two registers under the SysV ABI (x | y<<32, then z). The
// uretprobe reads the return value (the low 32 bits of rax, sign-extended:
// CUresult and cudaError_t are 32-bit), for allocations and stream
// creations the pointer or stream handle stored through the out-parameter
// (0 when the call failed), and for the name functions the handle and up
// to 240 bytes of the name (longer names are cut and flagged truncated),
// and sends one event through the ring buffer.
// Nested calls (cudaLaunchKernel calling cuLaunchKernel) are two events.
// Timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns); pid and tid are those
// of the initial PID namespace.
//
// The kernel wakes the reader once an eighth of the ring is filled, and
// Read polls with a deadline for the rest, so an event reaches Read at most
// Options.MaxDelay (50 ms) after the call returned: a wakeup per event
// doubled the cost of a probed call on the 2-core development machine.
//
// Losses are bounded and counted, never blocking the application: a full
// ring buffer drops the event (Stats.Dropped); a call whose thread died
// before returning stays in the LRU hash until newer calls evict it
// (Options.MaxPending); a call already running when its probes were
// attached has no entry state and gives no event; a thread that re-enters
// the same entry point before it returned (recursion) gives only the inner
// call. Argument memory that
// cannot be read (a page not present) sets record.HostCallArgsFaulted and
// leaves those words 0.
//
// Per process: a uprobe costs its traps whatever its program does, so
// the entry points whose calls the shim records itself (ShimCovered:
// launches, graph launches, syncs, the driver copies the shim wraps) can
// be left out of Attach (Options.ShimCoveredPerProcess) and probed with
// AttachProcess only in the processes that run without the shim. Such a
// link carries a PID filter (perf_event_open's pid, uprobe_multi's pid),
// and the kernel consults it before writing the breakpoint into a
// process's text (register_for_each_vma, uprobe_mmap): the other
// processes run those entry points untouched (measured by reading their
// memory: TestAttachProcess). A child forked from a probed process
// inherits the breakpoints in its copied text pages (measured on Linux
// 6.18): its calls trap but run no program; with perf-event links the
// first hit of each removes it, with uprobe_multi links it stays until
// the child execs or the child is given its own AttachProcess. Before
// Linux 6.10 a uprobe_multi link with a pid ran its program for the
// process's main thread only ("bpf: fix multi-uprobe PID filtering
// logic").
//
// Attach works on shared libraries and on executables with a statically
// linked runtime (their .symtab), by device and inode, so a library reached
// through /proc/<pid>/root of a container is the same file as on the host.
// A stripped library keeps its exported symbols in .dynsym; Attachment
// reports which known symbols a file lacks and whether it had a .symtab.
package hostprobe
