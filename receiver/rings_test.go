package receiver

import (
	"fmt"

	"github.com/gpuprobe/gpuprobe/shm"
)

// AddRing makes the receiver consume ring, which the test produces into,
// as one producer process's stream, and returns its source id. Clients of
// the agent socket get theirs in onConnect.
func (r *gpuReceiver) AddRing(ring *shm.Ring) uint32 {
	return r.addSource(ownMapping(ring), true, nil, nil, nil).id
}

// ownMapping maps ring's memfd a second time for the receiver, which owns
// that mapping and closes it, as a client's ring is mapped on both sides:
// a test that closes its own ring while a shutdown past its deadline
// still reads leaves the receiver's mapping whole.
func ownMapping(ring *shm.Ring) *shm.Ring {
	f := ring.Region().File()
	if f == nil {
		panic("receiver test: the ring has no memfd to map again")
	}
	reg, err := shm.Map(int(f.Fd()), shm.KindRing)
	if err != nil {
		panic(fmt.Sprintf("receiver test: mapping the ring again: %v", err))
	}
	g, err := shm.NewRing(reg)
	if err != nil {
		reg.Close()
		panic(fmt.Sprintf("receiver test: the ring's second mapping: %v", err))
	}
	return g
}

// RemoveRing stops consuming the ring of source id once what it holds is
// read (at most drainTime), as onDisconnect does for a client's.
func (r *gpuReceiver) RemoveRing(id uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.srcs.list {
		if s.id == id {
			s.closing = true
		}
	}
}

// AddRingReading is AddRing with a bound of perPoll tickets a poll on the
// ring instead of maxReadPerPoll, so that a test can hold more than a
// poll's records without the cost of 65,536 of them.
func (r *gpuReceiver) AddRingReading(ring *shm.Ring, perPoll int) uint32 {
	s := r.newSource(ownMapping(ring), true, nil, nil, nil)
	s.launch.perPoll = perPoll // before the poll loop can read it
	return r.publishSource(s).id
}
