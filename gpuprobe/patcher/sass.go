package patcher

import (
	"fmt"
	"sync"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/sanpatch"
)

// minSASSArch is the oldest device the SASS route's patch module is built
// for: kernel_phases' patch functions and the warp helpers need sm_70.
const minSASSArch = 70

// maxSASSModules bounds the built SASS route modules kept, one per
// architecture: past it the cache is emptied (a node has few kinds of GPU).
const maxSASSModules = 16

// sassModules caches the SASS route's patch module per architecture: the
// build is deterministic, so every client of a device kind gets the same.
type sassModules struct {
	mu   sync.Mutex
	mods map[uint32]sassBuild
}

// sassBuild is a built module, or the build's error.
type sassBuild struct {
	m   *sanpatch.Module
	err error
}

// SASS answers an agentwire.APISASS PATCH: the patch module of the user GPU
// programs (Options.SASSPrograms) with kernel_phases' patch functions, for
// a device of req.Arch, its globals bound for one client as Patch binds a
// PTX module's (Globals in module order: global i starts as
// agentwire.SASSMagicBase + i) and Kernels the programs' targets by program
// bit (agentwire.APISASS). Without SASS programs it is kernel_phases alone,
// for a device the shim's built-in image has no cubin for. Errors are
// *agentwire.NoPatch: NoPatchError for a module that cannot be built or a map
// with no region.
func (p *Patcher) SASS(req *agentwire.PatchRequest, bind Binder) (*agentwire.Patched, error) {
	if req.Arch < minSASSArch {
		return nil, noPatch(agentwire.NoPatchError, "SASS route patch module for sm_%d: needs sm_%d or newer", req.Arch, minSASSArch)
	}
	m, err := p.sassModule(req.Arch)
	if err != nil {
		return nil, err
	}
	gs := make([]inject.Global, len(m.Globals))
	for i, g := range m.Globals {
		gs[i] = g.Global
	}
	a := &agentwire.Patched{Image: append([]byte(m.PTX), 0),
		DeviceOneIn: p.opts.DeviceOneIn, DeviceMaxPerSecond: p.opts.DeviceMaxPerSecond}
	for i, t := range m.Targets {
		a.Kernels = append(a.Kernels, agentwire.PatchedKernel{Name: t, ParamIndex: uint32(i)})
	}
	if a.Globals, err = p.globals(gs, bind); err != nil {
		return nil, err
	}
	bindMailbox(a.Globals, gs, bind)
	return a, nil
}

// SASSPrograms returns how many user GPU programs the SASS route runs.
func (p *Patcher) SASSPrograms() int { return len(p.opts.SASSPrograms) }

// sassModule returns the SASS route's patch module for SM arch, built
// once (an error too: the build is deterministic).
func (p *Patcher) sassModule(arch uint32) (*sanpatch.Module, error) {
	c := &p.sass
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.mods[arch]; ok {
		return b.m, b.err
	}
	po := p.opts.Inject.PTX // as injectOptions compiles the PTX route's programs
	po.RingDevice = p.opts.RingDevice
	po.DeviceMaps = p.opts.DeviceMaps
	m, err := sanpatch.Build(p.opts.SASSPrograms, sanpatch.Options{Arch: fmt.Sprintf("sm_%d", arch), Phases: true, PTX: po})
	if err != nil {
		err = noPatch(agentwire.NoPatchError, "SASS route patch module for sm_%d: %v", arch, err)
	}
	if c.mods == nil || len(c.mods) >= maxSASSModules {
		c.mods = map[uint32]sassBuild{}
	}
	c.mods[arch] = sassBuild{m: m, err: err}
	return m, err
}
