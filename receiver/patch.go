package receiver

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/internal/kernelfilter"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
	"github.com/gpuprobe/gpuprobe/receiver/internal/demangle"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
)

// The kernel_phases ring: with probes::kernel_phases on, every client also
// gets a ring (role 3, map name kp_exec) that the patched kernels write
// one record.Exec per launch into; the receiver reads it after the launch
// ring and feeds the records to the same translator. A slot also fits a
// record.Warp, for producers of per-warp records.
const (
	ExecRingSlotSize = shm.SlotHeaderSize + max(record.ExecSize, record.WarpSize) // bytes per slot
	ExecRingSlots    = 1 << 16                                                    // slots (5 MiB per client)
)

// patchState is the patcher and what its PATCH work counted: modules
// patched and not (agent goroutines), and programs left out of a module
// they could not be patched into, with the (program, reason) pairs logged
// already.
type patchState struct {
	patcher  *patcher.Patcher
	filter   *kernelfilter.Filter // kernels::include/exclude, for the SASS route's kernel queries
	patched  atomic.Uint64
	failed   atomic.Uint64
	skips    atomic.Uint64
	skipMu   sync.Mutex
	skipSeen map[string]bool
}

// newPatcher builds the patcher of the configured probes: kernel_phases
// (when on) and the GPU programs of programs[] (those named in attach, or
// all); objs[i] is programs[i]'s object. It returns nil when there is
// nothing to inject.
func (r *gpuReceiver) newPatcher(objs []*jit.Object) (*patcher.Patcher, error) {
	var progs []*jit.Program
	var keys []string
	if r.cfg.Probes.KernelPhases {
		kp, err := probes.Load(probes.KernelPhases)
		if err != nil {
			return nil, fmt.Errorf("gpuprobe: probes::kernel_phases: %w", err)
		}
		progs = append(progs, kp...)
		for range kp {
			keys = append(keys, "probes::kernel_phases")
		}
	}
	var user []*jit.Program
	for i, pc := range r.cfg.Programs {
		for _, p := range objs[i].Programs {
			if !p.IsGPU() {
				continue // host programs are loaded into Linux (hostprobes.go)
			}
			if len(pc.Attach) == 0 || slices.Contains(pc.Attach, p.Name) {
				// Refused at start, not at a client's first patch: the
				// verdict does not depend on the kernel.
				key := fmt.Sprintf("programs[%d] (object %s, program %s)", i, filepath.Base(pc.Path), p.Name)
				if _, err := verifier.Verify(p, verifier.Options{CtxSize: p.Kind.ContextSize()}); err != nil {
					return nil, fmt.Errorf("gpuprobe: %s: verifier: %w", key, err)
				}
				user = append(user, p)
				keys = append(keys, key)
			}
		}
	}
	progs = append(progs, user...)
	if len(progs) == 0 {
		return nil, nil
	}
	r.hc.scan(progs)
	// User programs' GPU maps live in device memory, mirrored to their
	// regions at the receiver's poll cadence (shm, "Device-resident maps").
	// The SASS route (probes::sass, which needs kernel_phases) runs the
	// user programs too, in its patch module (onPatch, agentwire.APISASS).
	var sass []*jit.Program
	if r.cfg.Probes.SASS && r.cfg.Probes.KernelPhases {
		sass = user
	}
	p, err := patcher.New(patcher.Options{Programs: progs, SASSPrograms: sass, DeviceOnly: probes.KernelPhasesDeviceOnly,
		DeviceMaps: jit.DeviceResidentMaps(user), MirrorPeriod: r.cfg.PollInterval,
		MaxThreads: r.cfg.Buffers.MaxThreads, RingDevice: probes.KernelPhasesRingDevice,
		DeviceOneIn: r.cfg.Sampling.DeviceOneIn, DeviceMaxPerSecond: r.cfg.Sampling.DeviceMaxPerSecond,
		Keys: keys, OnSkip: r.onSkip,
		CacheBytes: cacheMemory, Limits: patcher.Limits{MaxMemory: patchMemory(r.cfg.Agent.MaxPatchMemory)}})
	if err != nil {
		return nil, fmt.Errorf("gpuprobe: %w", err)
	}
	return p, nil
}

// bindings records, for one client, where each map's region is in its
// WELCOME: the index, the lanes, and for the rings the receiver reads
// with device-side reservation (kp_exec) the initial device block.
func bindings(offers []agentwire.Offer, warps *shm.Ring) map[string]patcher.Binding {
	out := map[string]patcher.Binding{}
	for i, o := range offers {
		switch o.Role {
		case agentwire.RoleKernelMap:
			out[o.Name] = patcher.Binding{Region: uint32(i), Lanes: 1}
			continue
		case agentwire.RoleClock:
			out[patcher.ClockBinding] = patcher.Binding{Region: uint32(i), Lanes: 1}
			continue
		case agentwire.RoleMailbox:
			b := patcher.Binding{Region: uint32(i), Lanes: 1}
			if mb, err := shm.NewMailbox(o.Region); err == nil {
				b.RingBlock = mb.LockBlock() // the lock block's header
			}
			out[patcher.MailboxBinding] = b
			continue
		case agentwire.RoleMap:
		default:
			continue
		}
		b := patcher.Binding{Region: uint32(i), Lanes: uint64(o.Region.Header().Lanes)}
		if warps != nil && o.Region == warps.Region() {
			b.RingBlock = warps.DeviceBlock()
		}
		out[o.Name] = b
	}
	return out
}

// onPatch answers a client's PATCH with the configured probes, bound to
// the client's regions, and counts the outcome: a module's image patched
// (PTX route), or the SASS route's patch module of the user programs
// (agentwire.APISASS, with probes::sass on).
func (r *gpuReceiver) onPatch(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
	if r.patch.patcher == nil {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchDisabled, Message: "no GPU probes are configured (probes::kernel_phases off, no programs)"}
	}
	patch, what := r.patch.patcher.Patch, "module"
	if req.API == agentwire.APISASS || req.API == agentwire.APISASSKernels {
		if !r.cfg.Probes.SASS {
			return nil, &agentwire.NoPatch{Code: agentwire.NoPatchDisabled, Message: "the SASS route is off (probes::sass)"}
		}
		if req.API == agentwire.APISASSKernels {
			a, err := sassKernels(r.patch.filter, r.cfg.Sampling.DeviceOneIn, req)
			if err != nil {
				r.log.Info("gpuprobe: SASS route kernel query refused", zap.Int32("pid", p.PID), zap.Error(err))
			}
			return a, err
		}
		patch, what = r.patch.patcher.SASS, "SASS route module"
	}
	r.mu.Lock()
	s := r.srcs.bySess[p.Session]
	r.mu.Unlock()
	if s == nil {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: fmt.Sprintf("session %d is not known", p.Session)}
	}
	start := time.Now()
	a, err := patch(req, func(name string) (patcher.Binding, bool) {
		b, ok := s.bind[name]
		return b, ok
	})
	if err != nil {
		r.patch.failed.Add(1)
		r.log.Info("gpuprobe: "+what+" not patched", zap.Int32("pid", p.PID), zap.Uint32("arch", req.Arch),
			zap.Int("image_bytes", len(req.Image)), zap.Error(err))
		return nil, err
	}
	r.patch.patched.Add(1)
	r.log.Debug("gpuprobe: "+what+" patched", zap.Int32("pid", p.PID), zap.Uint32("arch", req.Arch),
		zap.Int("kernels", len(a.Kernels)), zap.Int("globals", len(a.Globals)), zap.Duration("took", time.Since(start)))
	return a, nil
}

// sassKernels answers the SASS route's kernel query (agentwire.APISASSKernels):
// the kernels that kernels::include/exclude let it probe, by mangled or
// demangled name, and sampling::device_one_in.
func sassKernels(filter *kernelfilter.Filter, oneIn uint32, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
	names, err := agentwire.ParseKernelQuery(req.Image)
	if err != nil {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: err.Error()}
	}
	a := &agentwire.Patched{DeviceOneIn: oneIn}
	for i, n := range names {
		if filter.Match(n, demangle.Short(n)) {
			a.Kernels = append(a.Kernels, agentwire.PatchedKernel{Name: n, ParamIndex: uint32(i)})
		}
	}
	return a, nil
}

// onPatchRefused counts a PATCH the agent answered NOPATCH before it
// reached onPatch (an oversized or sparse image memfd, no room in the
// agent's image memory) as a module not patched.
func (r *gpuReceiver) onPatchRefused(p *agent.Peer, id uint32, err error) {
	r.patch.failed.Add(1)
	r.log.Info("gpuprobe: module not patched", zap.Int32("pid", p.PID), zap.Uint32("request", id), zap.Error(err))
}

// maxSkipReasons bounds the (program, reason) pairs remembered so that
// each is logged once: reasons may name kernels, which a long-running
// collector sees without end.
const maxSkipReasons = 1024

// onSkip counts a program left out of a module it could not be patched
// into (the module was patched with the other programs) and logs each
// (program, reason) once.
func (r *gpuReceiver) onSkip(s patcher.Skip) {
	r.patch.skips.Add(1)
	k := s.Key + "\x00" + s.Err.Error()
	r.patch.skipMu.Lock()
	if r.patch.skipSeen == nil {
		r.patch.skipSeen = map[string]bool{}
	}
	seen := r.patch.skipSeen[k]
	if !seen && len(r.patch.skipSeen) < maxSkipReasons {
		r.patch.skipSeen[k] = true
	}
	r.patch.skipMu.Unlock()
	if !seen {
		r.log.Warn("gpuprobe: GPU program left out of a module (the module is patched with the other probes)",
			zap.String("program", s.Key), zap.Error(s.Err))
	}
}
