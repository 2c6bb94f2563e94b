// Package patcher is the collector's answer to a shim's PATCH (package
// agent): it finds the PTX of a code image that suits the device, splices
// the configured probes into it (gpuprobe/inject, cached), and describes
// what the shim must do before the first launch: where each patched
// kernel's hidden launch-id parameter goes and how to set each module
// global (a shared-memory region's device address, a constant, a ring's
// device reservation block, or device memory private to the module).
// For kernels with no PTX it answers the SASS route's request
// (agentwire.APISASS, Patcher.SASS) with the Compute Sanitizer patch module of
// the user programs (gpuprobe/sanpatch), its globals bound the same way.
// Each PATCH is bounded by Limits and all of them together by
// Limits.MaxMemory (package agent's comment, "Limits").
package patcher

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Options configure a Patcher.
type Options struct {
	// Programs are the GPU programs to inject (e.g. kernel_phases and the
	// configured objects).
	Programs []*jit.Program
	// DeviceOnly names maps the host never reads: they live in device
	// memory private to each module (agentwire.GlobalDeviceAlloc) rather than
	// in a shared region.
	DeviceOnly []string
	// DeviceMaps names maps that live in a device copy of their region,
	// mirrored to it by the shim (agentwire.GlobalDeviceMap): the programs are
	// compiled for device memory (ptx.Options.DeviceMaps).
	DeviceMaps []string
	// MirrorPeriod is how often the shim mirrors device maps (0: 10 ms);
	// whole µs up to agentwire.MaxMicros (New refuses others).
	MirrorPeriod time.Duration
	// MaxThreads sizes device-only per-thread and per-warp maps (threads of
	// one launch); 0 means 1<<20.
	MaxThreads uint32
	// RingDevice compiles ring writes with device-side reservation
	// (shm/doc.go); a ring's binding then needs its device block.
	RingDevice bool
	// DeviceOneIn goes into every PATCHED answer: the shim gives 1 launch
	// in N of the patched kernels its launch id, the others 0; with N > 1
	// the kernels are patched with inject.Options.SkipUnidentified, so no
	// probe runs in those. 0 or 1: all launches.
	DeviceOneIn uint32
	// DeviceMaxPerSecond goes into every PATCHED answer: the shim gives at
	// most N launches a second of each patched kernel its launch id (0: no
	// limit); with N > 0 the kernels are patched with SkipUnidentified.
	DeviceMaxPerSecond uint32
	// Inject are further injection options (Arch, RaiseTarget, LaunchID,
	// SkipUnidentified and PTX.RingDevice are set by the patcher).
	Inject inject.Options
	// Keys name the programs in logs, by index (e.g. "programs[1]
	// (object x.o, program foo)"); missing ones are "program NAME".
	// Programs with the same key are one probe: left out together.
	Keys []string
	// OnSkip, if set, is called whenever a program is left out of a
	// module it could not be patched into (Patch patches the others).
	OnSkip func(Skip)
	// CacheEntries and CacheBytes bound the injection cache (defaults 256
	// entries, 256 MiB).
	CacheEntries, CacheBytes int
	// Limits bound each PATCH and the memory of all of them together
	// (zero fields: DefaultLimits').
	Limits Limits
	// SASSPrograms are the user GPU programs of the SASS route (SASS):
	// built into one Compute Sanitizer patch module per architecture with
	// kernel_phases' patch functions, which are never among them. Their
	// maps are bound as Programs' are (DeviceOnly, DeviceMaps, RingDevice).
	SASSPrograms []*jit.Program
}

// Binding says where one map of the programs lives for one client.
type Binding struct {
	Region    uint32 // index of the map's region in the client's WELCOME (a kernel map's: its RoleKernelMap region)
	Lanes     uint64 // the region's lanes (per-thread and per-warp arrays), else 1
	RingBlock []byte // rings with RingDevice: initial device block (shm.Ring.DeviceBlock); the mailbox: its lock block's header (shm.Mailbox.LockBlock)
}

// Binder returns the binding of a map by name, or false when the client
// has no region for it. Asked for ClockBinding, it returns the client's
// RoleClock region (false: none).
type Binder func(mapName string) (Binding, bool)

// ClockBinding is the name a Binder is asked for the clock region (the
// i64 CLOCK_MONOTONIC − %globaltimer that bpf_ktime_get_ns adds on the
// GPU). No map can have it: map names are C identifiers.
const ClockBinding = "<clock>"

// MailboxBinding is the name a Binder is asked for the client's host-call
// mailbox region (RoleMailbox), with its lock block's header in RingBlock;
// false or no RingBlock: none, and host-call helpers return -ETIMEDOUT at
// once.
const MailboxBinding = "<mailbox>"

// Patcher answers PATCH requests. It is safe for concurrent use.
type Patcher struct {
	opts       Options
	deviceOnly map[string]bool
	inj        *inject.Injector
	failed     failCache         // program sets whose injection failed, by key
	mem        *agentwire.Budget // Limits.MaxMemory
	sass       sassModules       // SASS route modules by architecture
}

// New returns a Patcher for a program set.
func New(opts Options) (*Patcher, error) {
	if len(opts.Programs) == 0 {
		return nil, errors.New("patcher: no programs to inject")
	}
	if opts.MaxThreads == 0 {
		opts.MaxThreads = 1 << 20
	}
	if opts.CacheEntries == 0 {
		opts.CacheEntries = 256
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 256 << 20
	}
	if _, err := agentwire.Micros(opts.MirrorPeriod); err != nil {
		return nil, fmt.Errorf("patcher: mirror period: %w", err)
	}
	opts.Limits = opts.Limits.withDefaults()
	inj, err := inject.NewInjector(opts.CacheEntries, opts.CacheBytes)
	if err != nil {
		return nil, fmt.Errorf("patcher: %w", err)
	}
	p := &Patcher{opts: opts, deviceOnly: map[string]bool{}, inj: inj,
		mem: agentwire.NewBudget(opts.Limits.MaxMemory, opts.Limits.MaxWait)}
	for _, n := range opts.DeviceOnly {
		p.deviceOnly[n] = true
	}
	return p, nil
}

// CacheStats returns the injection cache's counters.
func (p *Patcher) CacheStats() inject.CacheStats { return p.inj.Stats() }

// noPatch builds the *agentwire.NoPatch errors Patch returns.
func noPatch(code agentwire.NoPatchCode, format string, args ...any) error {
	return &agentwire.NoPatch{Code: code, Message: fmt.Sprintf(format, args...)}
}

// SelectPTX returns the PTX text of an image that suits a device of SM
// arch: the PTX entry of the highest architecture not above arch (loose
// PTX text always suits), inflated under DefaultLimits.Inflate. It fails
// with code NoPatchNoPTX when there is none.
func SelectPTX(image []byte, arch uint32) ([]byte, error) {
	e, err := selectEntry(image, arch)
	if err != nil {
		return nil, err
	}
	return inflate(e, DefaultLimits.Inflate)
}

// selectEntry returns the PTX entry of an image that suits a device of
// SM arch, not inflated.
func selectEntry(image []byte, arch uint32) (*fatbin.Entry, error) {
	f, err := fatbin.ParseImage(image)
	if err != nil {
		return nil, noPatch(agentwire.NoPatchError, "parsing the %d-byte image: %v", len(image), err)
	}
	entries, err := f.PTX()
	if errors.Is(err, fatbin.ErrNoPTX) {
		return nil, noPatch(agentwire.NoPatchNoPTX, "the %s image has no PTX (SASS only)", f.Kind)
	}
	if err != nil {
		return nil, noPatch(agentwire.NoPatchError, "%v", err)
	}
	var best []*fatbin.Entry
	var have []string
	for _, e := range entries {
		have = append(have, e.ArchName())
		switch {
		case e.Arch > arch:
		case len(best) == 0 || e.Arch > best[0].Arch:
			best = []*fatbin.Entry{e}
		case e.Arch == best[0].Arch:
			best = append(best, e)
		}
	}
	if len(best) == 0 {
		sort.Strings(have)
		return nil, noPatch(agentwire.NoPatchNoPTX, "no PTX entry for sm_%d or older (the image has %s)", arch, strings.Join(have, ", "))
	}
	if len(best) > 1 {
		return nil, noPatch(agentwire.NoPatchError, "%d PTX entries for %s (separate translation units cannot be loaded as one module)", len(best), best[0].ArchName())
	}
	if sass := replacedSASS(f.Entries(), best[0], arch); sass != nil {
		// The driver would run that SASS; the patched module would run
		// code JIT-compiled from PTX that lacks its features, and a library
		// that checks which code it got (cuBLAS does) picks other kernels.
		return nil, noPatch(agentwire.NoPatchNoPTX, "the image has %s SASS for this device and its PTX is %s: patching would replace the code the application chose", sass.ArchName(), best[0].ArchName())
	}
	return best[0], nil
}

// replacedSASS returns the cubin entry a device of SM arch would run as is
// when patching ptx would replace it with weaker code: PTX of an older
// architecture, or generic PTX in place of arch-specific SASS (sm_90a). Nil
// when there is none, or when ptx compiles to the same features.
func replacedSASS(entries []*fatbin.Entry, ptx *fatbin.Entry, arch uint32) *fatbin.Entry {
	var got *fatbin.Entry
	for _, e := range entries {
		if e.Kind == fatbin.KindELF && e.Arch == arch && (got == nil || e.ArchSpecific) {
			got = e
		}
	}
	if got == nil || (ptx.Arch == arch && (ptx.ArchSpecific || !got.ArchSpecific)) {
		return nil
	}
	return got
}

// inflate returns the text of a PTX entry under limits l.
func inflate(e *fatbin.Entry, l fatbin.Limits) ([]byte, error) {
	text, err := fatbin.NewInflater(l).PTX(e)
	if err != nil {
		return nil, noPatch(agentwire.NoPatchError, "PTX entry %s at offset %#x: %v", e.ArchName(), e.Offset, err)
	}
	return text, nil
}

// Patch patches the image of a PATCH request for one client, whose map
// regions bind resolves. Errors are *agentwire.NoPatch. The work is bounded
// by Options.Limits: the inflated text is reserved from Limits.MaxMemory
// before inflating, the parse and injection before parsing.
func (p *Patcher) Patch(req *agentwire.PatchRequest, bind Binder) (*agentwire.Patched, error) {
	e, err := selectEntry(req.Image, req.Arch)
	if err != nil {
		return nil, err
	}
	release, err := p.reserve(inflateCost(e, p.opts.Limits.Inflate),
		fmt.Sprintf("inflating PTX entry %s at offset %#x", e.ArchName(), e.Offset))
	if err != nil {
		return nil, err
	}
	defer release()
	text, err := inflate(e, p.opts.Limits.Inflate)
	if err != nil {
		return nil, err
	}
	release2, err := p.admit(text)
	if err != nil {
		return nil, err
	}
	defer release2()
	opts := p.injectOptions(req.Arch)
	opts.Limits = p.opts.Limits.Parse
	return p.patchIsolated(text, opts, bind)
}

// injectOptions are the injection options for a device of SM arch.
func (p *Patcher) injectOptions(arch uint32) inject.Options {
	opts := p.opts.Inject
	opts.Arch = fmt.Sprintf("sm_%d", arch)
	opts.RaiseTarget = true
	opts.LaunchID = inject.LaunchIDParam
	opts.PTX.RingDevice = p.opts.RingDevice
	opts.PTX.DeviceMaps = p.opts.DeviceMaps
	// Launches left out by device sampling run no probe at all.
	opts.SkipUnidentified = p.opts.DeviceOneIn > 1 || p.opts.DeviceMaxPerSecond > 0
	return opts
}

// patchWith injects progs into the PTX text and binds the result's
// globals. Errors are *agentwire.NoPatch; with them it returns the indices in
// progs of the programs the error belongs to, when it belongs to some.
func (p *Patcher) patchWith(text []byte, progs []*jit.Program, opts inject.Options, bind Binder) (*agentwire.Patched, []int, error) {
	if f, ok := p.failed.get(inject.KeyOf(text, progs, opts)); ok {
		return nil, []int{f.index}, f.err // the same module failed the same way before
	}
	out, rep, err := p.inj.Inject(text, progs, opts)
	if errors.Is(err, inject.ErrNoKernel) {
		return nil, nil, noPatch(agentwire.NoPatchNoKernel, "%v", err)
	}
	var pe *inject.ProgramError
	if errors.As(err, &pe) {
		np := noPatch(agentwire.NoPatchError, "%v", err)
		p.failed.put(inject.KeyOf(text, progs, opts), pe.Index, np)
		return nil, []int{pe.Index}, np
	}
	if err != nil {
		return nil, nil, noPatch(agentwire.NoPatchError, "%v", err)
	}
	a := &agentwire.Patched{Image: append(out, 0), DeviceOneIn: p.opts.DeviceOneIn, DeviceMaxPerSecond: p.opts.DeviceMaxPerSecond}
	for _, k := range rep.Kernels {
		if k.Launch == nil {
			return nil, nil, noPatch(agentwire.NoPatchError, "kernel %s: no launch-id parameter in the report", k.Name)
		}
		a.Kernels = append(a.Kernels, agentwire.PatchedKernel{Name: k.Name,
			ParamIndex: uint32(k.Launch.Index), ParamOffset: uint32(k.Launch.Offset)})
	}
	miss := &missTracker{bind: bind}
	if a.Globals, err = p.globals(rep.Globals, miss.binder); err != nil {
		return nil, miss.culprits(err, progs, rep.Globals), err
	}
	bindMailbox(a.Globals, rep.Globals, bind)
	return a, nil, nil
}

// globals turns the report's globals into the shim's instructions.
func (p *Patcher) globals(gs []inject.Global, bind Binder) ([]agentwire.PatchedGlobal, error) {
	allocs := map[*jit.Map]uint32{} // device-only map → allocation number
	var out []agentwire.PatchedGlobal
	for _, g := range gs {
		pg := agentwire.PatchedGlobal{Name: g.Name, Kind: agentwire.GlobalConst}
		switch g.Kind {
		case ptx.GlobalMap, ptx.GlobalMapLanes, ptx.GlobalRingDevice:
			m := g.MapDef
			if m == nil {
				return nil, noPatch(agentwire.NoPatchError, "global %s (program %s): no map definition", g.Name, g.Program)
			}
			if p.deviceOnly[m.Name] {
				lanes, size, err := p.deviceSize(m)
				if err != nil {
					return nil, err
				}
				switch g.Kind {
				case ptx.GlobalMap:
					n, ok := allocs[m]
					if !ok {
						n = uint32(len(allocs))
						allocs[m] = n
					}
					pg.Kind, pg.Region, pg.Size = agentwire.GlobalDeviceAlloc, n, size
				case ptx.GlobalMapLanes:
					pg.Value = lanes
				}
				break
			}
			b, ok := bind(m.Name)
			if !ok && m.Mmapable() {
				// A kernel map the collector could not create (no BPF,
				// no permission): the GPU programs see it as absent.
				break
			}
			if !ok {
				return nil, noPatch(agentwire.NoPatchError, "map %s of program %s has no region for this client", m.Name, g.Program)
			}
			switch g.Kind {
			case ptx.GlobalMap:
				pg.Kind, pg.Region = agentwire.GlobalRegion, b.Region
				if slices.Contains(p.opts.DeviceMaps, m.Name) {
					pg.Kind, pg.Size = agentwire.GlobalDeviceMap, mirrorMicros(p.opts.MirrorPeriod)
				}
			case ptx.GlobalMapLanes:
				pg.Value = b.Lanes
			case ptx.GlobalRingDevice:
				if len(b.RingBlock) > 0 { // else 0: the host protocol
					pg.Kind, pg.Region, pg.Size = agentwire.GlobalRingBlock, b.Region, shm.RingDeviceBlockSize
					pg.Init = b.RingBlock
				}
			}
		case ptx.GlobalClock:
			// The offset is the clock region's first value; without one
			// the global stays 0 and bpf_ktime_get_ns is %globaltimer.
			if b, ok := bind(ClockBinding); ok {
				pg.Kind, pg.Region, pg.Value = agentwire.GlobalRegion, b.Region, shm.DataOffset
			}
		case ptx.GlobalMailbox, ptx.GlobalMailboxLocks, ptx.GlobalLaunchID:
			// 0: no host-call mailbox yet (host-call helpers fail fast);
			// the launch id comes by parameter.
		default:
			return nil, noPatch(agentwire.NoPatchError, "global %s: unknown kind %v", g.Name, g.Kind)
		}
		out = append(out, pg)
	}
	return out, nil
}

// deviceSize returns the lanes and bytes of a device-only map: a region
// header followed by MaxEntries × lanes values of 8-byte aligned size.
func (p *Patcher) deviceSize(m *jit.Map) (uint64, uint64, error) {
	lanes := uint64(1)
	switch m.Type {
	case jit.MapTypePerThreadArray:
		lanes = uint64(p.opts.MaxThreads)
	case jit.MapTypePerWarpArray:
		lanes = (uint64(p.opts.MaxThreads) + 31) / 32
	case jit.MapTypeGPUArray:
	default:
		return 0, 0, noPatch(agentwire.NoPatchError, "map %s: type %d cannot live in device memory only", m.Name, m.Type)
	}
	stride := (uint64(m.ValueSize) + 7) &^ 7
	return lanes, shm.DataOffset + uint64(m.MaxEntries)*lanes*stride, nil
}

// mirrorMicros is the device-map global's Size: the mirror period in the
// protocol's µs (New checked that it converts).
func mirrorMicros(d time.Duration) uint64 {
	us, _ := agentwire.Micros(d)
	return uint64(us)
}
