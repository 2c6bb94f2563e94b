package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// exitLayout is where a ring record keeps a thread's coordinates and its
// exit time: the byte offsets of the u64 members block_x, block_y,
// block_z, thread_x, thread_y, thread_z and timestamp_ns of the map's
// value struct (kernelretsnoop's struct exit_event).
type exitLayout struct {
	coord [6]uint32
	ts    uint32
	size  uint32 // bytes a record needs
}

// exitMembers are the members an exit-record ring's value must have, in
// exitLayout.coord order, then the timestamp.
var exitMembers = []string{"block_x", "block_y", "block_z", "thread_x", "thread_y", "thread_z", "timestamp_ns"}

// dumpProgs is the program set of --patch and the regions each client
// gets for its maps.
type dumpProgs struct {
	progs      []*jit.Program
	maps       []*jit.Map            // GPU maps that get a WELCOME region, by first use
	exits      map[string]exitLayout // rings of per-thread exit records
	phases     bool                  // kernel_phases is in the set
	lanes      uint32                // lanes of per-thread arrays
	ringSlots  uint32                // slots of each program ring
	deviceOnly []string
	deviceMaps []string // the objects' GPU maps: in device memory, mirrored by the shim
}

// loadDumpProgs loads the built-in probe sets and then the objects' GPU
// programs (retargeted to target when it is not empty), in that order, as
// the receiver does: exit probes run in reverse order, so the objects'
// exit probes run before kernel_phases' and their times are at most the
// warp's end.
func loadDumpProgs(builtins, objects []string, target string, lanes, ringSlots uint32) (*dumpProgs, error) {
	d := &dumpProgs{exits: map[string]exitLayout{}, lanes: lanes, ringSlots: ringSlots}
	if target != "" {
		if _, err := filepath.Match(target, ""); err != nil {
			return nil, fmt.Errorf("--target %q: %w", target, err)
		}
	}
	for _, b := range builtins {
		ps, err := probes.Load(b)
		if err != nil {
			return nil, fmt.Errorf("--probes: %w", err)
		}
		if b == probes.KernelPhases {
			d.phases = true
			d.deviceOnly = append(d.deviceOnly, probes.KernelPhasesDeviceOnly...)
		}
		d.progs = append(d.progs, ps...)
	}
	for _, obj := range objects {
		ps, err := jit.LoadELF(obj)
		if err != nil {
			return nil, fmt.Errorf("--programs: %w", err)
		}
		if err := d.exitLayouts(obj, ps); err != nil {
			return nil, err
		}
		for _, p := range ps {
			if !p.IsGPU() {
				continue // host programs (uprobes) need the collector
			}
			if target != "" {
				p.Target = target
			}
			d.progs = append(d.progs, p)
			d.deviceMaps = append(d.deviceMaps, jit.DeviceResidentMaps([]*jit.Program{p})...)
		}
	}
	if len(d.progs) == 0 {
		return nil, fmt.Errorf("--patch: no GPU programs (--probes %q, --programs %q)", strings.Join(builtins, ","), strings.Join(objects, ","))
	}
	seen := map[string]bool{}
	for _, n := range d.deviceOnly {
		seen[n] = true
	}
	for _, p := range d.progs {
		for _, m := range p.Maps {
			// Kernel maps (BPF_F_MMAPABLE, e.g. launchlate's launch_clock)
			// need a BPF map shared with host programs: agent-dump loads
			// none, so the GPU programs see them as absent (the patcher
			// binds 0). Other host-path maps get a plain array region: the
			// patcher wants one for every map global, and their host calls
			// fail fast while the shim maps no mailbox.
			if m.Mmapable() || m.Type == jit.MapTypePerBlockArray {
				continue // per-block arrays live in shared memory: nothing to bind
			}
			if !seen[m.Name] {
				seen[m.Name] = true
				d.maps = append(d.maps, m)
			}
		}
	}
	if len(d.maps)+1 > agentwire.MaxRegions {
		return nil, fmt.Errorf("--patch: %d maps need regions, a WELCOME holds %d", len(d.maps), agentwire.MaxRegions-1)
	}
	return d, nil
}

// exitLayouts finds, with the object's BTF, the ring maps whose values are
// per-thread exit records.
func (d *dumpProgs) exitLayouts(obj string, ps []*jit.Program) error {
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		return fmt.Errorf("--programs: %s: BTF of the maps: %w", obj, err)
	}
	for name, ms := range spec.Maps {
		if uint32(ms.Type) != uint32(jit.MapTypeGPURingbuf) || ms.Value == nil {
			continue
		}
		st, ok := btf.UnderlyingType(ms.Value).(*btf.Struct)
		if !ok {
			continue
		}
		var l exitLayout
		found := 0
		for i, want := range exitMembers {
			for _, m := range st.Members {
				if m.Name != want {
					continue
				}
				if sz, err := btf.Sizeof(m.Type); err != nil || sz != 8 || m.Offset%64 != 0 {
					return fmt.Errorf("--programs: %s: map %s: member %s must be an aligned u64", obj, name, want)
				}
				off := m.Offset.Bytes()
				if i < 6 {
					l.coord[i] = off
				} else {
					l.ts = off
				}
				l.size = max(l.size, off+8)
				found++
			}
		}
		if found == len(exitMembers) {
			d.exits[name] = l
		}
	}
	return nil
}

// newPatcher returns the patcher of --patch mode.
func (d *dumpProgs) newPatcher() (*patcher.Patcher, error) {
	p, err := patcher.New(patcher.Options{Programs: d.progs, DeviceOnly: d.deviceOnly,
		MaxThreads: d.lanes, RingDevice: probes.KernelPhasesRingDevice, DeviceMaps: d.deviceMaps})
	if err != nil {
		return nil, fmt.Errorf("patcher: %w", err)
	}
	return p, nil
}

// progRing is one program ring of a session and what was read from it.
type progRing struct {
	name    string
	ring    *shm.Ring
	cons    *shm.Consumer
	exit    *exitLayout // per-thread exit records
	warps   bool        // kernel_phases' record.Warp ring
	records int
	errors  int
}

// dumpPatch is one session's --patch state: the regions of its maps and
// what was patched and recorded.
type dumpPatch struct {
	rings   []*progRing
	arrays  map[string]*shm.Array
	binds   map[string]patcher.Binding
	patched map[string]bool // kernel names patched (mangled)
	modules int             // modules patched
	refused int             // PATCH requests answered NOPATCH
}

// patchOffers creates the regions of a session's maps: WELCOME regions
// base.. (after the launch and names rings).
func (d *dumper) patchOffers(s *dumpSession, base uint32) ([]agentwire.Offer, error) {
	s.patch = &dumpPatch{arrays: map[string]*shm.Array{}, binds: map[string]patcher.Binding{},
		patched: map[string]bool{}}
	var offers []agentwire.Offer
	for _, m := range d.progs.maps {
		idx := base + uint32(len(offers))
		switch m.Type {
		case jit.MapTypeGPURingbuf:
			slot := max((shm.SlotHeaderSize+m.ValueSize+7)&^7, 24)
			if m.Name == probes.KernelPhasesRingMap {
				slot = max(record.WarpSize, record.ExecSize) + shm.SlotHeaderSize
			}
			g, err := shm.CreateRing(slot, d.progs.ringSlots)
			if err != nil {
				return nil, fmt.Errorf("ring %s (%d slots of %d bytes): %w", m.Name, d.progs.ringSlots, slot, err)
			}
			pr := &progRing{name: m.Name, ring: g, cons: g.NewConsumer(shm.ConsumerOptions{}),
				warps: m.Name == probes.KernelPhasesRingMap && d.progs.phases}
			if l, ok := d.progs.exits[m.Name]; ok {
				pr.exit = &l
			}
			s.patch.rings = append(s.patch.rings, pr)
			s.patch.binds[m.Name] = patcher.Binding{Region: idx, Lanes: 1, RingBlock: g.DeviceBlock()}
			offers = append(offers, agentwire.Offer{Role: agentwire.RoleMap, Name: m.Name, Region: g.Region()})
		default:
			kind, lanes := shm.KindArray, uint32(1)
			switch m.Type {
			case jit.MapTypePerThreadArray:
				kind, lanes = shm.KindPerThreadArray, d.progs.lanes
			case jit.MapTypePerWarpArray:
				kind, lanes = shm.KindPerWarpArray, (d.progs.lanes+31)/32
			}
			a, err := shm.CreateArray(kind, m.ValueSize, m.MaxEntries, lanes)
			if err != nil {
				return nil, fmt.Errorf("array %s (%d entries × %d lanes): %w", m.Name, m.MaxEntries, lanes, err)
			}
			s.patch.arrays[m.Name] = a
			s.patch.binds[m.Name] = patcher.Binding{Region: idx, Lanes: uint64(lanes)}
			offers = append(offers, agentwire.Offer{Role: agentwire.RoleMap, Name: m.Name, Region: a.Region()})
		}
	}
	return offers, nil
}

// closePatch releases a session's map regions.
func (p *dumpPatch) close() {
	for _, r := range p.rings {
		r.ring.Close()
	}
	for _, a := range p.arrays {
		a.Close()
	}
}

// onPatch answers a client's PATCH with the program set, bound to the
// client's regions.
func (d *dumper) onPatch(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
	d.mu.Lock()
	var s *dumpSession
	for _, c := range d.sessions {
		if c.peer == p {
			s = c
		}
	}
	d.mu.Unlock()
	if s == nil || s.patch == nil {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: "unknown session"}
	}
	a, err := d.patcher.Patch(req, func(name string) (patcher.Binding, bool) {
		b, ok := s.patch.binds[name]
		return b, ok
	})
	if err != nil {
		d.mu.Lock()
		s.patch.refused++
		d.mu.Unlock()
		fmt.Fprintf(d.out, "agent-dump: session %d: not patched: %v\n", p.Session, err)
		return nil, err
	}
	d.mu.Lock()
	for _, k := range a.Kernels {
		s.patch.patched[k.Name] = true
	}
	s.patch.modules++
	d.mu.Unlock()
	fmt.Fprintf(d.out, "agent-dump: session %d: patched a module for sm_%d: %d kernels, %d globals\n",
		p.Session, req.Arch, len(a.Kernels), len(a.Globals))
	return a, nil
}

// patchPoll drains a session's program rings.
func (d *dumper) patchPoll(s *dumpSession) {
	if s.patch == nil {
		return
	}
	for _, r := range s.patch.rings {
		r.cons.Read(0, func(rec shm.Record) {
			r.records++
			switch {
			case r.warps:
				if p, err := record.ParsePrefix(rec.Payload); err == nil && p.Type == record.TypeExec {
					var e record.Exec
					if err := e.Decode(rec.Payload); err != nil {
						r.errors++
						s.acct.fail("exec record", err)
						return
					}
					s.acct.exec(&e)
					return
				}
				var w record.Warp
				if err := w.Decode(rec.Payload); err != nil {
					r.errors++
					s.acct.fail("warp record", err)
					return
				}
				s.acct.warp(&w)
			case r.exit != nil:
				if err := s.acct.exit(r.exit, rec.Payload); err != nil {
					r.errors++
					s.acct.fail("exit record of "+r.name, err)
				}
			}
		})
	}
}

// patchSummary prints a session's patch accounting.
func (d *dumper) patchSummary(s *dumpSession) {
	if s.patch == nil {
		return
	}
	var kp *progRing
	for _, r := range s.patch.rings {
		st := r.ring.Stats()
		fmt.Fprintf(d.out, "agent-dump: session %d: ring %s: records=%d dropped=%d errors=%d\n",
			s.peer.Session, r.name, r.records, st.Dropped+st.Oversize, r.errors)
		if r.warps {
			kp = r
		}
	}
	line := fmt.Sprintf("agent-dump: session %d: patched modules=%d kernels=%d refused=%d", s.peer.Session,
		s.patch.modules, len(s.patch.patched), s.patch.refused)
	if kp != nil {
		st := kp.ring.Stats()
		if len(s.acct.warpByID) > 0 && len(s.acct.execByID) == 0 {
			line += fmt.Sprintf(" warps expected=%d recorded=%d dropped=%d errors=%d",
				s.acct.expectedWarps(s.patch.patched), kp.records, st.Dropped+st.Oversize, kp.errors)
		} else {
			line += fmt.Sprintf(" windows expected=%d recorded=%d dropped=%d errors=%d",
				len(s.acct.patchedLaunches(s.patch.patched)), kp.records, st.Dropped+st.Oversize, kp.errors)
		}
	}
	fmt.Fprintln(d.out, line)
}
