//go:build cgo

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/internal/cuda"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/shm"
)

// instance is one loaded module (patched or not) with the regions its
// probes' maps live in, sized for launches of at most maxThreads threads.
type instance struct {
	c      *cuda.Context
	mod    *cuda.Module
	rep    *inject.Report
	rings  map[string]*shm.Ring
	arrays map[string]*shm.Array
	hashes map[string]*jit.Map // GPU hash maps among arrays: their table, an array of slots
	host   []*shm.Region
	dev    []cuda.DevicePtr
	blocks map[string]cuda.DevicePtr // ring name -> device reservation block
	// mirrors are the maps that live in device memory (shm package
	// comment, "Device-resident maps"): the device copy of a host region.
	mirrors   []mirror
	devMaps   map[string]bool
	seed      seedFunc // fills arrays before they are bound (nil: zeros)
	delivered uint64   // records the device rings' drains delivered
	drainErr  error    // the first failure to write a tail back
	// mb is the host-call mailbox, served while the instance lives.
	mb          *shm.Mailbox
	mbBase      uint64
	mbLocks     cuda.DevicePtr // the mailbox's lock block
	answered    atomic.Uint64  // requests the mailbox's handler answered
	stopMailbox func()
}

// mailbox creates, registers and starts serving the instance's host-call
// mailbox, once, and returns its device address. The handler answers
// every request with 0, as the receiver does for printk, so the round
// trip measured is the mailbox's own.
func (in *instance) mailbox() (uint64, error) {
	if in.mb != nil {
		return in.mbBase, nil
	}
	mb, err := shm.CreateMailbox(64, 0)
	if err != nil {
		return 0, err
	}
	base, err := in.register(mb.Region())
	if err != nil {
		return 0, err
	}
	in.mb, in.mbBase = mb, base
	if !holdMailbox {
		in.serve()
	}
	return base, nil
}

// holdMailbox leaves new mailboxes unserved until serve is called: the
// unanswered-host-call check sets it while it runs (checks run one at a
// time).
var holdMailbox bool

// serve starts answering the instance's mailbox until close.
func (in *instance) serve() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.mb.Serve(ctx, func(*shm.Request) int64 { in.answered.Add(1); return 0 }, shm.ServeOptions{Spin: time.Millisecond})
	}()
	in.stopMailbox = func() { cancel(); <-done }
}

// mailboxLocks allocates, once, the mailbox's lock block in device
// memory (shm "Mailbox"), as a collector's shim does, and returns its
// address.
func (in *instance) mailboxLocks() (cuda.DevicePtr, error) {
	if in.mbLocks != 0 {
		return in.mbLocks, nil
	}
	if _, err := in.mailbox(); err != nil {
		return 0, err
	}
	b := make([]byte, in.mb.LockBlockSize())
	copy(b, in.mb.LockBlock())
	p, err := in.c.MemAlloc(uint64(len(b)))
	if err != nil {
		return 0, err
	}
	in.dev = append(in.dev, p)
	if err := in.c.MemcpyHtoD(p, b); err != nil {
		return 0, err
	}
	in.mbLocks = p
	return p, nil
}

// mirror is one device-resident map: its host region and device copy.
type mirror struct {
	name string
	host *shm.Region
	dev  cuda.DevicePtr
	ring *shm.Ring
	cons *shm.Consumer
}

// seedFunc writes a map's initial values into its host region, before the
// region is registered or copied to the device: what a loader's
// bpf_map_update_elem before the launch leaves there.
type seedFunc func(name string, a *shm.Array) error

// deviceOnly names maps the host never reads: they go to device memory,
// so the probes do not pay PCIe round trips for them.
var deviceOnly = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range probes.KernelPhasesDeviceOnly {
		m[n] = true
	}
	return m
}()

// load loads a module and binds every global of the report: map globals
// to host-registered shm regions (or device memory for deviceOnly maps),
// lanes globals to the lanes, launch id globals to 0.
// Maps named in devMaps live in device memory (see mirror); seed, when not
// nil, fills each array first.
func load(c *cuda.Context, module []byte, rep *inject.Report, maxThreads uint64, ringSlots uint32, devMaps []string, seed seedFunc) (*instance, error) {
	mod, err := c.LoadModule(module)
	if err != nil {
		return nil, fmt.Errorf("load module: %w", err)
	}
	in := &instance{c: c, mod: mod, rep: rep, rings: map[string]*shm.Ring{}, arrays: map[string]*shm.Array{},
		hashes: map[string]*jit.Map{}, blocks: map[string]cuda.DevicePtr{}, devMaps: map[string]bool{}, seed: seed}
	for _, n := range devMaps {
		in.devMaps[n] = true
	}
	if rep == nil {
		return in, nil
	}
	bases := map[*jit.Map]uint64{}
	lanes := map[*jit.Map]uint64{}
	for _, g := range rep.Globals {
		var v uint64
		switch g.Kind {
		case ptx.GlobalMap, ptx.GlobalMapLanes, ptx.GlobalRingDevice:
			if g.MapDef == nil {
				return nil, fmt.Errorf("global %s: no map definition", g.Name)
			}
			if _, ok := bases[g.MapDef]; !ok {
				b, l, err := in.region(g.MapDef, maxThreads, ringSlots)
				if err != nil {
					return nil, fmt.Errorf("map %s: %w", g.MapDef.Name, err)
				}
				bases[g.MapDef], lanes[g.MapDef] = b, l
			}
			v = bases[g.MapDef]
			switch g.Kind {
			case ptx.GlobalMapLanes:
				v = lanes[g.MapDef]
			case ptx.GlobalRingDevice:
				b, err := in.deviceBlock(g.MapDef.Name)
				if err != nil {
					return nil, fmt.Errorf("map %s: %w", g.MapDef.Name, err)
				}
				v = uint64(b)
			}
		case ptx.GlobalMailbox:
			b, err := in.mailbox()
			if err != nil {
				return nil, fmt.Errorf("mailbox: %w", err)
			}
			v = b
		case ptx.GlobalMailboxLocks:
			b, err := in.mailboxLocks()
			if err != nil {
				return nil, fmt.Errorf("mailbox locks: %w", err)
			}
			v = uint64(b)
		case ptx.GlobalLaunchID:
			v = 0 // launch ids come by parameter
		}
		if err := in.setGlobal(g.Name, v); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// deviceBlock returns the device reservation block of ring name (shm/doc.go,
// "Device-side reservation"), allocating and filling it on first use: one
// block per ring, shared by every program that writes the ring.
func (in *instance) deviceBlock(name string) (cuda.DevicePtr, error) {
	if p, ok := in.blocks[name]; ok {
		return p, nil
	}
	g := in.rings[name]
	if g == nil {
		return 0, fmt.Errorf("ring %s has no region", name)
	}
	p, err := in.c.MemAlloc(shm.RingDeviceBlockSize)
	if err != nil {
		return 0, err
	}
	in.dev = append(in.dev, p)
	if err := in.c.MemcpyHtoD(p, g.DeviceBlock()); err != nil {
		return 0, err
	}
	in.blocks[name] = p
	return p, nil
}

// flushDrops raises each device-reservation ring's host drop mirror to the
// device block's count (the loader's end-of-launch flush; the GPU code
// raises it every 32 drops). Call it after a synchronize.
func (in *instance) flushDrops() error {
	for name, p := range in.blocks {
		b := make([]byte, shm.RingDeviceBlockSize)
		if err := in.c.MemcpyDtoH(b, p); err != nil {
			return err
		}
		in.rings[name].RaiseDeviceDropped(binary.LittleEndian.Uint64(b[shm.RingDeviceDropped:]))
	}
	return nil
}

// setGlobal writes a module-scope u64.
func (in *instance) setGlobal(name string, v uint64) error {
	p, n, err := in.mod.Global(name)
	if err != nil {
		return err
	}
	if n != 8 {
		return fmt.Errorf("global %s has %d bytes, want 8", name, n)
	}
	return in.c.MemcpyHtoD(p, binary.LittleEndian.AppendUint64(nil, v))
}

// region creates the storage of one map and returns its device base and
// lanes.
func (in *instance) region(m *jit.Map, maxThreads uint64, ringSlots uint32) (uint64, uint64, error) {
	var (
		kind           shm.Kind
		lanes          = uint64(1)
		vsize, entries = m.ValueSize, m.MaxEntries
	)
	kernelMap := false
	switch m.Type {
	case jit.MapTypeArray:
		if !m.Mmapable() {
			return 0, 0, nil // host-path maps are not attached here
		}
		// A kernel map (an mmapable Linux array): the GPU sees its
		// values in host memory with no header, as the application's
		// mapping of the map's fd; here a host region's data stands in.
		kind, kernelMap = shm.KindArray, true
	case jit.MapTypeGPURingbuf:
		slot := (shm.SlotHeaderSize + m.ValueSize + 7) &^ 7
		g, err := shm.CreateRing(max(slot, 24), ringSlots)
		if err != nil {
			return 0, 0, err
		}
		in.rings[m.Name] = g
		if in.devMaps[m.Name] {
			base, err := in.deviceCopy(m.Name, g.Region(), g)
			return base, 1, err
		}
		base, err := in.register(g.Region())
		return base, 1, err
	case jit.MapTypeGPUArray:
		kind = shm.KindArray
	case jit.MapTypeGPUHash:
		// The table (jit.HashLayout) as an array of its header and slots.
		l := jit.GPUHashLayout(m)
		kind, vsize, entries = shm.KindArray, uint32(l.Stride), l.Slots+1
		in.hashes[m.Name] = m
	case jit.MapTypePerThreadArray:
		kind, lanes = shm.KindPerThreadArray, maxThreads
	case jit.MapTypePerWarpArray:
		kind, lanes = shm.KindPerWarpArray, (maxThreads+31)/32
	default:
		return 0, 0, nil // host-path maps are not attached here
	}
	if deviceOnly[m.Name] {
		stride := (uint64(vsize) + 7) &^ 7
		n := shm.DataOffset + uint64(entries)*lanes*stride
		p, err := in.c.MemAlloc(n)
		if err != nil {
			return 0, 0, err
		}
		in.dev = append(in.dev, p)
		return uint64(p), lanes, in.c.Memset(p, 0, n)
	}
	a, err := shm.CreateArray(kind, vsize, entries, uint32(lanes))
	if err != nil {
		return 0, 0, err
	}
	in.arrays[m.Name] = a
	if in.seed != nil {
		if err := in.seed(m.Name, a); err != nil {
			a.Close()
			return 0, 0, fmt.Errorf("seed: %w", err)
		}
	}
	if in.devMaps[m.Name] {
		base, err := in.deviceCopy(m.Name, a.Region(), nil)
		return base, lanes, err
	}
	base, err := in.register(a.Region())
	if kernelMap {
		base += shm.DataOffset
	}
	return base, lanes, err
}

// deviceCopy allocates the device copy of a host region, filled from it,
// and returns its device address.
func (in *instance) deviceCopy(name string, r *shm.Region, g *shm.Ring) (uint64, error) {
	b := r.Bytes()
	p, err := in.c.MemAlloc(uint64(len(b)))
	if err != nil {
		return 0, err
	}
	in.dev = append(in.dev, p)
	if err := in.c.MemcpyHtoD(p, b); err != nil {
		return 0, err
	}
	mr := mirror{name: name, host: r, dev: p, ring: g}
	if g != nil {
		mr.cons = g.NewConsumer(shm.ConsumerOptions{})
	}
	in.mirrors = append(in.mirrors, mr)
	return uint64(p), nil
}

// mirrored reports whether ring g lives in device memory.
func (in *instance) mirrored(g *shm.Ring) bool {
	for _, m := range in.mirrors {
		if m.ring == g {
			return true
		}
	}
	return false
}

// sync copies the device-resident maps to their host regions whole, with
// the kernels finished (after a synchronize).
func (in *instance) sync() error {
	for _, m := range in.mirrors {
		b := m.host.Bytes()
		keep := consumerWords(b, m.ring != nil)
		if err := in.c.MemcpyDtoH(b, m.dev); err != nil {
			return fmt.Errorf("map %s: %w", m.name, err)
		}
		keep()
		if m.ring != nil {
			// The device's drops are in its shards; on the host they
			// are dev_dropped, as the shim's drainer stores them.
			n := shm.DeviceRingDrops(b)
			for k := 0; k < shm.RingDropShards; k++ {
				clear(b[shm.RingDropShard(k):][:8])
			}
			binary.LittleEndian.PutUint64(b[shm.RingDevDropped:], n)
		}
	}
	return nil
}

// consumerWords saves the words of a ring region that its host consumer
// owns (tail, stalled, the slot_acked array: shm/doc.go), which the
// device copy never holds, and returns the function that puts them back
// after the region is overwritten with the device copy. Not a ring:
// nothing to keep.
func consumerWords(b []byte, ring bool) func() {
	h, err := shm.ParseHeader(b, int64(len(b)), shm.KindRing)
	if !ring || err != nil {
		return func() {}
	}
	slots, stride := uint64(h.MaxEntries), uint64(h.Stride)
	acked := shm.DataOffset + slots*(stride+4)
	spans := [][2]uint64{{shm.RingTailOffset, 8}, {shm.RingStalledOffset, 8}, {acked, 4 * slots}}
	saved := make([][]byte, len(spans))
	for i, sp := range spans {
		saved[i] = append([]byte(nil), b[sp[0]:sp[0]+sp[1]]...)
	}
	return func() {
		for i, sp := range spans {
			copy(b[sp[0]:], saved[i])
		}
	}
}

// records drains the device-resident rings' host regions (after sync)
// into fn (nil: count only), counts them in delivered, and writes each
// consumer's tail back to the device copy, so the GPU sees the room made:
// what the shim's mirror thread does at its poll cadence.
func (in *instance) records(fn func(shm.Record)) int {
	if fn == nil {
		fn = func(shm.Record) {}
	}
	n := 0
	for _, m := range in.mirrors {
		if m.ring == nil {
			continue
		}
		n += m.cons.Read(0, fn)
		tail := m.host.Bytes()[shm.RingTailOffset : shm.RingTailOffset+8]
		if err := in.c.MemcpyHtoD(m.dev+cuda.DevicePtr(shm.RingTailOffset), tail); err != nil {
			in.drainErr = fmt.Errorf("map %s: %w", m.name, err)
		}
	}
	in.delivered += uint64(n)
	return n
}

// register maps a host region into the device's address space.
func (in *instance) register(r *shm.Region) (uint64, error) {
	b := r.Bytes()
	p, err := in.c.HostRegister(unsafe.Pointer(&b[0]), uintptr(len(b)), cuda.HostRegisterDeviceMap|cuda.HostRegisterPortable)
	if err != nil {
		return 0, err
	}
	in.host = append(in.host, r)
	return uint64(p), nil
}

// close releases everything.
func (in *instance) close() {
	if in.stopMailbox != nil {
		in.stopMailbox()
	}
	for _, r := range in.host {
		b := r.Bytes()
		in.c.HostUnregister(unsafe.Pointer(&b[0]))
		r.Close()
	}
	for _, p := range in.dev {
		in.c.MemFree(p)
	}
	in.mod.Unload()
}
