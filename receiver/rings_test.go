package receiver

import "github.com/gpuprobe/gpuprobe/shm"

// AddRing makes the receiver consume ring, which the test produces into,
// as one producer process's stream (the receiver does not own it) and
// returns its source id. Clients of the agent socket get theirs in
// onConnect.
func (r *gpuReceiver) AddRing(ring *shm.Ring) uint32 {
	return r.addSource(ring, false, nil, nil, nil).id
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
	s := r.addSource(ring, false, nil, nil, nil)
	r.mu.Lock() // the poll loop reads s only under r.mu or after taking the list under it
	defer r.mu.Unlock()
	s.launch.perPoll = perPoll
	return s.id
}
