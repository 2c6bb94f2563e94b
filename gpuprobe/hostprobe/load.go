package hostprobe

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// ErrUnsupported is wrapped by Load's error when this machine or process
// cannot run the host probes (no privilege, locked down kernel, a missing
// kernel feature, another architecture): the receiver degrades and reports
// the reason once.
var ErrUnsupported = errors.New("eBPF host probes unsupported")

// ErrClosed is returned by the methods of closed Probes.
var ErrClosed = errors.New("hostprobe: probes are closed")

// Default sizes of the kernel maps.
const (
	DefaultRingSize   = 4 << 20 // bytes of the events ring buffer
	DefaultMaxPending = 16384   // calls in flight tracked between entry and return
	DefaultMaxDelay   = 50 * time.Millisecond
	// DefaultMaxProcesses bounds the processes with per-process probes.
	DefaultMaxProcesses = 256
)

// Options configure Load. The zero value gives the defaults.
type Options struct {
	// RingSize is the size in bytes of the kernel's events ring buffer: a
	// power of two and a multiple of the page size (0: DefaultRingSize).
	RingSize int
	// MaxPending bounds the calls tracked between entry and return; the
	// oldest are evicted first, so a thread that dies mid-call leaks
	// nothing for good (0: DefaultMaxPending).
	MaxPending int
	// MaxDelay is the longest an event waits in the ring buffer before
	// Read returns it (0: DefaultMaxDelay, at most 10 s). The kernel wakes
	// the reader only once an eighth of the ring is filled: waking it on
	// every event would cost each probed call microseconds more.
	MaxDelay time.Duration
	// ShimCoveredPerProcess leaves the entry points the shim records
	// itself (ShimCovered) out of Attach: they are probed only in the
	// processes given to AttachProcess, those without the shim. The
	// kernel puts a uprobe's breakpoint only into the processes its
	// filter accepts, so the others run these calls untrapped.
	ShimCoveredPerProcess bool
	// MaxProcesses bounds the processes with per-process probes at once
	// (0: DefaultMaxProcesses); AttachProcess of one more fails with
	// ErrTooManyProcesses.
	MaxProcesses int

	// perfLinks forces one perf-event uprobe per symbol even where the
	// kernel has uprobe_multi links (tests of the fallback).
	perfLinks bool
}

// Probes is the loaded eBPF collection: attach it to libraries with
// Attach, read its records with Read, release it with Close.
type Probes struct {
	coll     *ebpf.Collection
	multi    bool // attach with uprobe_multi links
	maxDelay time.Duration
	drops    *ebpf.Map
	ring     *ringbuf.Reader
	closed   atomic.Bool

	readMu sync.Mutex // one Read at a time: guards rec
	rec    ringbuf.Record

	split    bool // Options.ShimCoveredPerProcess
	maxProcs int

	// procMu serialises AttachProcess, DetachProcess, Detach and Close
	// (taken before mu); it guards procs.
	procMu sync.Mutex
	procs  map[int]*procLinks

	mu        sync.Mutex // guards files, dropped0, dropsDone
	files     map[fileKey]*Attachment
	dropped0  uint64 // drops counted just before the map was closed
	dropsDone bool   // dropped0 is final

	read, decodeErrs atomic.Uint64
}

// Load checks that this process may load eBPF programs, raises the
// memlock limit where the kernel still needs it, and loads the host-probe
// programs and maps into the kernel. Nothing is attached yet.
func Load(opts Options) (*Probes, error) {
	if _, ok := hostMachine[runtime.GOARCH]; !ok {
		return nil, fmt.Errorf("hostprobe: the probes are built for x86-64 and arm64, this is %s: %w", runtime.GOARCH, ErrUnsupported)
	}
	ring, pending, delay, err := opts.sizes()
	if err != nil {
		return nil, err
	}
	procs := opts.MaxProcesses
	if procs == 0 {
		procs = DefaultMaxProcesses
	}
	if procs < 0 || procs > maxMaxProcesses {
		return nil, fmt.Errorf("hostprobe: Options.MaxProcesses %d must be 0 (default) to %d", opts.MaxProcesses, maxMaxProcesses)
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("hostprobe: raising RLIMIT_MEMLOCK (the kernel accounts eBPF memory against it): %w: %w", ErrUnsupported, err)
	}
	spec, err := loadCudahost()
	if err != nil {
		return nil, fmt.Errorf("hostprobe: reading the embedded eBPF object: %w", err)
	}
	spec.Maps[cudahostMapEvents].MaxEntries = uint32(ring)
	spec.Maps[cudahostMapEntries].MaxEntries = uint32(pending)
	if err := spec.Variables[cudahostVarWakeupBytes].Set(uint64(ring / 8)); err != nil {
		return nil, fmt.Errorf("hostprobe: setting wakeup_bytes: %w", err)
	}
	// uprobe_multi (Linux 6.6) attaches a program to many functions with
	// one link and detaches them with one RCU wait; perf-event uprobes
	// (one per function, Linux 5.15 for the cookie) wait once each, about
	// 0.1 s, which makes detaching a library take seconds.
	multi := !opts.perfLinks && features.HaveBPFLinkUprobeMulti() == nil
	if multi {
		for _, ps := range spec.Programs {
			ps.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, classifyLoadError(err)
	}
	rd, err := ringbuf.NewReader(coll.Maps[cudahostMapEvents])
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("hostprobe: opening the events ring buffer: %w", err)
	}
	return &Probes{coll: coll, multi: multi, maxDelay: delay, drops: coll.Maps[cudahostMapDrops], ring: rd,
		split: opts.ShimCoveredPerProcess, maxProcs: procs, procs: map[int]*procLinks{}, files: map[fileKey]*Attachment{}}, nil
}

func (o Options) sizes() (ring, pending int, delay time.Duration, err error) {
	ring, pending, delay = o.RingSize, o.MaxPending, o.MaxDelay
	if ring == 0 {
		ring = DefaultRingSize
	}
	if pending == 0 {
		pending = DefaultMaxPending
	}
	if delay == 0 {
		delay = DefaultMaxDelay
	}
	page := os.Getpagesize()
	if ring < page || ring&(ring-1) != 0 || ring > 1<<30 {
		return 0, 0, 0, fmt.Errorf("hostprobe: Options.RingSize %d must be a power of two from the page size (%d) to 1 GiB", o.RingSize, page)
	}
	if pending < 1 || pending > 1<<24 {
		return 0, 0, 0, fmt.Errorf("hostprobe: Options.MaxPending %d must be 1..%d", o.MaxPending, 1<<24)
	}
	if delay < 0 || delay > 10*time.Second {
		return 0, 0, 0, fmt.Errorf("hostprobe: Options.MaxDelay %v must be 0 (default) to 10s", o.MaxDelay)
	}
	return ring, pending, delay, nil
}

// Capability bits (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// checkCaps fails when the effective capabilities allow neither
// CAP_SYS_ADMIN nor CAP_BPF with CAP_PERFMON (loading tracing programs and
// opening uprobe perf events need them).
func checkCaps() error {
	b, err := procread.File("/proc/self/status", procread.MaxStatus)
	if err != nil {
		return nil // cannot tell (unreadable, or cut before CapEff): let the kernel decide
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil
		}
		has := func(c uint) bool { return caps&(1<<c) != 0 }
		if has(capSysAdmin) || has(capBPF) && has(capPerfmon) {
			return nil
		}
		return fmt.Errorf("hostprobe: not permitted: loading uprobes needs root, CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON; this process (uid %d) has effective capabilities %#x: %w",
			os.Geteuid(), caps, ErrUnsupported)
	}
	return nil
}

// classifyLoadError says why the kernel refused the collection.
func classifyLoadError(err error) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		if mode := lockdown(); mode != "" && mode != "none" {
			return fmt.Errorf("hostprobe: the kernel is locked down (lockdown=%s) and refuses eBPF tracing programs: %w: %w", mode, ErrUnsupported, err)
		}
		return fmt.Errorf("hostprobe: not permitted to load eBPF programs (need root or CAP_BPF+CAP_PERFMON; check kernel.unprivileged_bpf_disabled and RLIMIT_MEMLOCK): %w: %w", ErrUnsupported, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("hostprobe: the kernel lacks a needed eBPF feature (BPF ring buffers need Linux 5.8): %w: %w", ErrUnsupported, err)
	case errors.As(err, &verr):
		return fmt.Errorf("hostprobe: the kernel's verifier rejected a host probe: %w: %w", ErrUnsupported, err)
	}
	return fmt.Errorf("hostprobe: loading the eBPF collection: %w", err)
}

// lockdown is the active mode of /sys/kernel/security/lockdown ("none",
// "integrity", "confidentiality"), or "" when unknown.
func lockdown() string {
	b, err := os.ReadFile("/sys/kernel/security/lockdown")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return ""
}

// Close detaches every probe, stops Read (a blocked Read returns
// ErrClosed) and unloads the programs and maps. It is safe to call twice.
func (p *Probes) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	errs := []error{p.ring.Close(), p.closeProcs()}
	p.mu.Lock()
	p.dropped0, p.dropsDone = p.kernelDrops(), true
	for k, a := range p.files {
		errs = append(errs, a.close())
		delete(p.files, k)
	}
	p.mu.Unlock()
	p.coll.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hostprobe: close: %w", err)
	}
	return nil
}
