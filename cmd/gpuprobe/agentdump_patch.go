package main

import (
	"fmt"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// warpSlots is the size of each client's kp_warps ring in --patch mode.
const warpSlots = 1 << 18

// dumpPatch is one session's --patch state: its kp_warps ring and what was
// patched and recorded.
type dumpPatch struct {
	warps    *shm.Ring
	cons     *shm.Consumer
	patched  map[string]bool // kernel names patched (mangled)
	modules  int             // modules patched
	expected uint64          // warps of launches of patched kernels
	recorded int             // warp records read
	errors   int
}

// newPatcher returns the kernel_phases patcher of --patch mode.
func newPatcher() (*patcher.Patcher, error) {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		return nil, fmt.Errorf("loading kernel_phases: %w", err)
	}
	p, err := patcher.New(patcher.Options{Programs: progs, DeviceOnly: []string{probes.KernelPhasesStartMap},
		RingDevice: probes.KernelPhasesRingDevice})
	if err != nil {
		return nil, fmt.Errorf("kernel_phases patcher: %w", err)
	}
	return p, nil
}

// patchOffer creates a session's kp_warps ring and its WELCOME offer.
func (d *dumper) patchOffer(s *dumpSession) (agent.Offer, error) {
	w, err := shm.CreateRing(record.WarpSize+shm.SlotHeaderSize, warpSlots) // 80-byte slots
	if err != nil {
		return agent.Offer{}, fmt.Errorf("kp_warps ring: %w", err)
	}
	s.patch = &dumpPatch{warps: w, cons: w.NewConsumer(shm.ConsumerOptions{}), patched: map[string]bool{}}
	return agent.Offer{Role: agent.RoleMap, Name: probes.KernelPhasesRingMap, Region: w.Region()}, nil
}

// onPatch answers a client's PATCH with kernel_phases; kp_warps is WELCOME
// region 1.
func (d *dumper) onPatch(p *agent.Peer, req *agent.PatchRequest) (*agent.Patched, error) {
	d.mu.Lock()
	var s *dumpSession
	for _, c := range d.sessions {
		if c.peer == p {
			s = c
		}
	}
	d.mu.Unlock()
	if s == nil || s.patch == nil {
		return nil, &agent.NoPatch{Code: agent.NoPatchError, Message: "unknown session"}
	}
	block := s.patch.warps.DeviceBlock()
	a, err := d.patcher.Patch(req, func(name string) (patcher.Binding, bool) {
		if name != probes.KernelPhasesRingMap {
			return patcher.Binding{}, false
		}
		return patcher.Binding{Region: 1, Lanes: 1, RingBlock: block}, true
	})
	if err != nil {
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

// patchLaunch counts the warps a launch of a patched kernel runs.
func (d *dumper) patchLaunch(s *dumpSession, name string, l *record.Launch) {
	if s.patch == nil || l.Result != 0 {
		return
	}
	d.mu.Lock()
	ok := s.patch.patched[name]
	d.mu.Unlock()
	if !ok {
		return
	}
	threads := uint64(l.Block[0]) * uint64(l.Block[1]) * uint64(l.Block[2])
	s.patch.expected += uint64(l.Grid[0]) * uint64(l.Grid[1]) * uint64(l.Grid[2]) * ((threads + 31) / 32)
}

// patchPoll drains a session's kp_warps ring.
func (d *dumper) patchPoll(s *dumpSession) {
	if s.patch == nil {
		return
	}
	s.patch.cons.Read(0, func(r shm.Record) {
		var w record.Warp
		if err := w.Decode(r.Payload); err != nil {
			s.patch.errors++
			return
		}
		s.patch.recorded++
	})
}

// patchSummary prints a session's warp accounting.
func (d *dumper) patchSummary(s *dumpSession) {
	if s.patch == nil {
		return
	}
	st := s.patch.warps.Stats()
	fmt.Fprintf(d.out, "agent-dump: session %d: patched modules=%d kernels=%d warps expected=%d recorded=%d dropped=%d errors=%d\n",
		s.peer.Session, s.patch.modules, len(s.patch.patched), s.patch.expected, s.patch.recorded, st.Dropped+st.Oversize, s.patch.errors)
}
