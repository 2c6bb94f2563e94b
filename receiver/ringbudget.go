package receiver

import (
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
)

// Ring sizes under the ring budget (agent::max_ring_memory,
// max_ring_memory_per_uid; gpuprobe/agent/rings.go): a session's rings
// are made at full size or halved together up to maxRingShift times, each
// ring no smaller than its floor.
const (
	maxRingShift     = 6    // at most 1/64 of the configured sizes
	minLaunchSlots   = 1024 // launch ring floor
	minNameSlots     = 64   // names ring floor: a burst of new kernels between polls
	minExecRingSlots = 1024 // kernel_phases ring floor
)

// ringSlots are the slot counts of one session's rings.
type ringSlots struct {
	launch, names, exec uint32 // exec 0: no kernel_phases ring
}

// ringSlotsAt returns the slot counts at a shift of the configured sizes.
func ringSlotsAt(cfg *config.Config, shift uint) ringSlots {
	shrink := func(n, floor uint32) uint32 { return max(n>>shift, min(n, floor)) }
	s := ringSlots{launch: shrink(cfg.Buffers.RingSlots, minLaunchSlots), names: shrink(NameRingSlots, minNameSlots)}
	if cfg.Probes.KernelPhases {
		s.exec = shrink(ExecRingSlots, minExecRingSlots)
	}
	return s
}

// bytes returns the memory of rings of these sizes.
func (s ringSlots) bytes(slotSize uint32) int64 {
	n := shm.RingSize(slotSize, s.launch) + shm.RingSize(NameRingSlotSize, s.names)
	if s.exec > 0 {
		n += shm.RingSize(ExecRingSlotSize, s.exec)
	}
	return int64(n)
}

// reserveRings charges a session's rings to the ring budget and returns
// their sizes and the lease that the launch ring's unmapping releases; an
// error refuses the client (ERROR code 5: it runs unrecorded).
func reserveRings(cfg *config.Config, log *zap.Logger, p *agent.Peer) (ringSlots, *agent.Lease, error) {
	shift, lease, err := p.Reserve(agent.RingRequest{MaxShift: maxRingShift,
		Size: func(k uint) int64 { return ringSlotsAt(cfg, k).bytes(cfg.Buffers.SlotSize) }})
	if err != nil {
		log.Warn("gpuprobe: a client was refused rings: the ring budget is full (agent::max_ring_memory, max_ring_memory_per_uid); it runs unrecorded",
			zap.Int32("pid", p.PID), zap.Uint32("uid", p.UID), zap.Error(err))
		return ringSlots{}, nil, err
	}
	if shift > 0 {
		log.Debug("gpuprobe: a client's rings were made smaller to fit the ring budget",
			zap.Int32("pid", p.PID), zap.Uint32("uid", p.UID), zap.Uint("shift", shift))
	}
	return ringSlotsAt(cfg, shift), lease, nil
}

// dropSessionFiles closes the memfds of the regions made for one session
// once the client has them (agent.Callbacks.Welcomed): the mappings stay,
// so a session closed and not yet drained holds no descriptor.
func dropSessionFiles(r *gpuReceiver, p *agent.Peer) {
	r.mu.Lock()
	s := r.srcs.bySess[p.Session]
	var regions []*shm.Region
	if s != nil {
		for _, g := range s.rings() {
			if g.owned {
				regions = append(regions, g.ring.Region())
			}
		}
		if s.clock != nil {
			regions = append(regions, s.clock.Region())
		}
		if s.calls != nil {
			regions = append(regions, s.calls.srv.Mailbox().Region())
			for _, m := range s.calls.maps {
				regions = append(regions, m.Region())
			}
		}
	}
	r.mu.Unlock()
	for _, reg := range regions {
		if err := reg.DropFile(); err != nil {
			r.log.Debug("gpuprobe: closing a session's memfd", zap.Error(err))
		}
	}
}

// ringSelfMetrics are the ring budget's counters and the idle checks'
// cut /proc reads (none without a server).
func ringSelfMetrics(srv *agent.Server) []translate.SelfMetric {
	if srv == nil {
		return nil
	}
	st := srv.RingStats()
	return []translate.SelfMetric{
		{Name: "gpuprobe.receiver.sessions.maps_truncated", Unit: "{session}", Desc: "Idle sessions ended because their process's /proc/PID/maps was past the 32 MiB read bound before any of their regions.", Value: srv.Stats().MapsTruncated},
		{Name: "gpuprobe.receiver.rings.shrunk", Unit: "{session}", Desc: "Sessions given smaller rings than configured to fit the ring budget (agent::max_ring_memory, max_ring_memory_per_uid).", Value: st.Shrunk},
		{Name: "gpuprobe.receiver.rings.refused", Unit: "{session}", Desc: "Sessions refused because not even their smallest rings fit the ring budget (the application runs unrecorded).", Value: st.Refused},
		{Name: "gpuprobe.receiver.rings.evicted", Unit: "{session}", Desc: "Closed sessions whose rings were asked to be drained early to make room for others.", Value: st.Evicted},
	}
}
