package adversarial

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// The per-client budget classes: clients that try to make the collector
// hold more than their share of kernel names, handles and series.
const (
	// NamesPerSession is how many kernel names each Names session
	// announces (limits::max_kernel_names' default).
	NamesPerSession = 100
	// NamesDevices is how many device numbers Names launches each name on:
	// every ordinal a client may use before it reports its devices.
	NamesDevices = 64
	// HandleSessions and HandlesPerSession are how many sessions Handles
	// opens and how many function handles each names, with names of
	// HandleNameLen bytes (record.MaxKernelNameLen).
	HandleSessions    = 16
	HandlesPerSession = 16384
	HandleNameLen     = record.MaxKernelNameLen
)

// Names announces NamesPerSession kernel names, launches each of them on
// NamesDevices devices (with completions and copies of every kind, so
// that each (name, device) pair is a series), and leaves; again and again
// until ctx ends. A collector that bounds names or series first come for
// the node counts every later process's launches under "other".
func Names(ctx context.Context, socket string) error {
	for round := uint64(0); ctx.Err() == nil; round++ {
		if err := namesRound(ctx, socket, round); err != nil {
			return err
		}
	}
	return nil
}

// namesRound is one session of Names.
func namesRound(ctx context.Context, socket string, round uint64) error {
	s, err := session(ctx, socket, "names")
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("names: %w", err)
	}
	defer s.Close()
	p, err := launchProducer(s)
	if err != nil {
		return fmt.Errorf("names: %w", err)
	}
	base := round << 32
	for n := range uint64(NamesPerSession) {
		p.putWait(ctx, &record.KernelName{Function: base + n + 1, Name: fmt.Sprintf("hostile_name_%03d", n)})
	}
	id := base
	for dev := range uint32(NamesDevices) {
		for n := range uint64(NamesPerSession) {
			if ctx.Err() != nil {
				return nil
			}
			id++
			now := monoNS()
			p.putWait(ctx, &record.Launch{LaunchID: id, PID: p.pid, EnqueueNS: now, ReturnNS: now + 1, Function: base + n + 1,
				Device: dev, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
			p.putWait(ctx, &record.Completion{LaunchID: id, CompleteNS: now + 2, Device: dev, How: record.SeenByStreamSync})
		}
		for kind := record.MemcpyKind(0); kind <= record.MemcpyPeer; kind++ {
			now := monoNS()
			p.putWait(ctx, &record.Memcpy{PID: p.pid, Device: dev, Kind: kind, Bytes: 1, StartNS: now, EndNS: now + 1})
		}
	}
	return nil
}

// Handles opens HandleSessions sessions that each name HandlesPerSession
// function handles, each with its own HandleNameLen-byte name, through
// their names rings, and stay connected until ctx ends.
func Handles(ctx context.Context, socket string) error {
	return parallel(HandleSessions, func(i int) error {
		s, err := session(ctx, socket, "handles")
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("handles: %w", err)
		}
		defer s.Close()
		r := s.Region(agentwire.RoleNameRing, "")
		if r == nil {
			return errors.New("handles: WELCOME had no names ring")
		}
		ring, err := shm.NewRing(r)
		if err != nil {
			return fmt.Errorf("handles: %w", err)
		}
		p := &producer{ring: ring, pid: uint32(os.Getpid()), buf: make([]byte, 0, HandleNameLen+64)}
		pad := strings.Repeat("h", HandleNameLen)
		for fn := range uint64(HandlesPerSession) {
			if ctx.Err() != nil {
				break
			}
			name := fmt.Sprintf("hostile_handle_%02d_%05d_", i, fn)
			p.putWait(ctx, &record.KernelName{Function: fn + 1, Name: name + pad[len(name):]})
		}
		<-ctx.Done()
		return nil
	})
}

// launchProducer writes to session s's launch ring.
func launchProducer(s *agent.Session) (*producer, error) {
	r := s.Region(agentwire.RoleLaunchRing, "")
	if r == nil {
		return nil, errors.New("WELCOME had no launch ring")
	}
	ring, err := shm.NewRing(r)
	if err != nil {
		return nil, err
	}
	return &producer{ring: ring, pid: uint32(os.Getpid()), buf: make([]byte, 0, 256)}, nil
}
