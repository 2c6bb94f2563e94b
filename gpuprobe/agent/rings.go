package agent

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// Ring memory. The rings the owner creates for a session (Callbacks.Connect)
// stay mapped after the session ends, until the owner has drained them: a
// client that connects and leaves at once makes the collector hold them
// for the drain time, beyond the session limits. Every session's rings are
// therefore charged, from its Peer.Reserve until its Lease is released
// (the rings unmapped), against a node-wide budget (RingLimits.Memory)
// and its uid's share (RingLimits.MemoryPerUID), whether the session is
// open or closed and not yet drained. Root's sessions are charged to the
// node's budget only: the share keeps unprivileged uids from each other
// and from root, and on a Kubernetes node every pod without a user
// namespace is uid 0, so a share for root would be one for all pods.
//
// A request gets its rings at full size while they leave the smallest
// rings for every session the session limits still allow (of its uid and
// in all) and take at most half of the rest, else halved
// (RingRequest.Size) as far as needed, down to the smallest; when not
// even those fit within RingLimits.Wait (100 ms: under the shim's 200 ms
// handshake timeout, time for the poll loop to drain sessions that just
// ended), the session is refused with ERROR code 5 (the shim runs the
// application unrecorded). Closed-but-undrained sessions beyond the
// session limits (MaxConnsPerUID of one uid, MaxConns in all), and those
// standing in the way of a request of their uid (or, for the node's
// budget, of the uid holding the most), are evicted, oldest first: the
// owner is asked to drain them now (Lease.OnEvict), what was left in
// them is counted as dropped by the owner.

// Defaults of RingLimits.
const (
	DefaultRingMemory       = agentwire.DefaultRingMemory
	DefaultRingMemoryPerUID = agentwire.DefaultRingMemoryPerUID
	DefaultRingWait         = 100 * time.Millisecond
)

// RingLimits bound the ring memory sessions make the server's owner hold.
type RingLimits struct {
	Memory       int64         // all sessions together, open or undrained (default DefaultRingMemory)
	MemoryPerUID int64         // one uid's sessions (default DefaultRingMemoryPerUID, at most Memory)
	Wait         time.Duration // how long a request waits for room (default DefaultRingWait)
}

// RingStats count the ring budget's decisions.
type RingStats struct {
	Held      int64  // bytes reserved now
	Undrained int64  // closed sessions whose rings are still held
	Shrunk    uint64 // sessions given fewer ring slots than they asked for
	Refused   uint64 // sessions refused for want of ring memory
	Evicted   uint64 // closed sessions asked to be drained early to make room
}

// Lease is the ring memory one session holds, from Peer.Reserve until
// Release. It is safe for concurrent use.
type Lease struct {
	b      *ringBudget
	uid    uint32
	bytes  int64
	closed time.Time // when the session ended (zero: open)
	done   bool      // released
	asked  bool      // evicted: the owner was asked to drain it
	evict  func()    // asks the owner to drain the session's rings now
}

// Bytes returns the bytes the lease holds.
func (l *Lease) Bytes() int64 {
	if l == nil {
		return 0
	}
	return l.bytes
}

// OnEvict sets what asks the owner to drain the session's rings at once
// (called at most once, on a goroutine of the server, after the session
// ended). Without it an undrained session waits for its drain.
func (l *Lease) OnEvict(fn func()) {
	if l == nil {
		return
	}
	l.b.mu.Lock()
	l.evict = fn
	l.b.mu.Unlock()
}

// Release gives the lease's bytes back: call it when the rings are
// unmapped. It is safe to call more than once.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	b.used -= l.bytes
	if b.byUID[l.uid] -= l.bytes; b.byUID[l.uid] <= 0 {
		delete(b.byUID, l.uid)
	}
	if l.closed.IsZero() {
		b.leave(l.uid)
	} else {
		b.dropClosed(l)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// ringBudget is the server's ledger of ring memory.
type ringBudget struct {
	lim            RingLimits
	maxSessions    int // sessions in all (Options.MaxConns), open or undrained
	maxSessionsUID int // of one uid (Options.MaxConnsPerUID)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every Release
	used    int64
	byUID   map[uint32]int64
	open    map[uint32]int      // open sessions holding a lease, per uid
	nopen   int                 // in all
	closed  map[uint32][]*Lease // undrained sessions per uid, oldest first
	nclose  int

	shrunk, refused, evicted atomic.Uint64
}

func newRingBudget(lim RingLimits, maxSessions, maxSessionsUID int) *ringBudget {
	if lim.Memory <= 0 {
		lim.Memory = DefaultRingMemory
	}
	if lim.MemoryPerUID <= 0 {
		lim.MemoryPerUID = DefaultRingMemoryPerUID
	}
	lim.MemoryPerUID = min(lim.MemoryPerUID, lim.Memory)
	if lim.Wait <= 0 {
		lim.Wait = DefaultRingWait
	}
	return &ringBudget{lim: lim, maxSessions: maxSessions, maxSessionsUID: maxSessionsUID, changed: make(chan struct{}),
		byUID: map[uint32]int64{}, open: map[uint32]int{}, closed: map[uint32][]*Lease{}}
}

// stats returns the budget's counters.
func (b *ringBudget) stats() RingStats {
	b.mu.Lock()
	held, undrained := b.used, int64(b.nclose)
	b.mu.Unlock()
	return RingStats{Held: held, Undrained: undrained, Shrunk: b.shrunk.Load(), Refused: b.refused.Load(), Evicted: b.evicted.Load()}
}

// RingRequest is what a session asks of the ring budget: its rings at
// full size (shift 0) or smaller, down to shift MaxShift.
type RingRequest struct {
	MaxShift uint             // the most the rings may be shrunk
	Size     func(uint) int64 // bytes of the session's rings at a shift (non-increasing in it)
}

// grantable says whether n bytes may go to a session of uid. The
// smallest rings (minN bytes) fit when they fit the uid's share and the
// node's budget. Larger ones leave room for the smallest rings of every
// session the session limits still allow (of the uid, and in all), and
// take at most half of what is left after that: one session never takes
// the last of a share. b.mu is held.
func (b *ringBudget) grantable(uid uint32, n, minN int64, smallest bool) bool {
	uidFree, allFree := b.lim.MemoryPerUID-b.byUID[uid], b.lim.Memory-b.used
	if smallest {
		return (n <= uidFree || uid == 0) && n <= allFree
	}
	uidFree -= int64(max(b.maxSessionsUID-b.open[uid]-1, 0)) * minN
	allFree -= int64(max(b.maxSessions-b.nopen-1, 0)) * minN
	if uid == 0 {
		uidFree = allFree // root: the node's budget only
	}
	return n <= min(uidFree, allFree)/2
}

// reserve grants uid's request: the smallest shift whose rings fit and
// the lease holding them, waiting up to b.lim.Wait for room; or a
// *agentwire.ProtocolError (code 5) saying which budget is full.
func (b *ringBudget) reserve(uid uint32, req RingRequest) (uint, *Lease, error) {
	timer := time.NewTimer(b.lim.Wait)
	defer timer.Stop()
	for try := 0; ; try++ {
		b.mu.Lock()
		k, l, msg, evict := b.tryReserve(uid, req, try == 0)
		ch := b.changed
		b.mu.Unlock()
		for _, fn := range evict {
			fn()
		}
		if l != nil {
			return k, l, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			b.refused.Add(1)
			return 0, nil, &agentwire.ProtocolError{Code: agentwire.CodeTooMany, Message: msg}
		}
	}
}

// tryReserve grants uid's request now, or says which budget is full and,
// on the first try, asks undrained sessions of uid (or, for the node's
// budget, of the uid holding the most) to make room. b.mu is held.
func (b *ringBudget) tryReserve(uid uint32, req RingRequest, first bool) (uint, *Lease, string, []func()) {
	n := req.Size(req.MaxShift)
	for k := uint(0); k <= req.MaxShift; k++ {
		if size := req.Size(k); b.grantable(uid, size, n, k == req.MaxShift) {
			if k > 0 {
				b.shrunk.Add(1)
			}
			b.used += size
			b.byUID[uid] += size
			b.open[uid]++
			b.nopen++
			return k, &Lease{b: b, uid: uid, bytes: size}, "", nil
		}
	}
	var evict []func()
	if uid != 0 && b.byUID[uid]+n > b.lim.MemoryPerUID {
		if first {
			evict = b.evictOldest(uid, nil)
		}
		return 0, nil, fmt.Sprintf("uid %d holds %d bytes of rings, its share is %d (agent::max_ring_memory_per_uid); the session needs %d",
			uid, b.byUID[uid], b.lim.MemoryPerUID, n), evict
	}
	if first {
		evict = b.evictOldest(b.busiestClosed(), nil)
	}
	return 0, nil, fmt.Sprintf("sessions hold %d bytes of rings, the budget is %d (agent::max_ring_memory); the session needs %d",
		b.used, b.lim.Memory, n), evict
}

// close records that l's session ended (its rings wait to be drained)
// and evicts the oldest undrained sessions beyond the session limits.
func (b *ringBudget) close(l *Lease, now time.Time) {
	if l == nil {
		return
	}
	b.mu.Lock()
	var evict []func()
	if !l.done && l.closed.IsZero() {
		l.closed = now
		b.leave(l.uid)
		b.closed[l.uid] = append(b.closed[l.uid], l)
		b.nclose++
		for len(b.closed[l.uid])-b.asked(l.uid) > b.maxSessionsUID {
			n := len(evict)
			if evict = b.evictOldest(l.uid, evict); len(evict) == n {
				break
			}
		}
		for b.nclose-b.askedAll() > b.maxSessions {
			n := len(evict)
			if evict = b.evictOldest(b.busiestClosed(), evict); len(evict) == n {
				break
			}
		}
	}
	b.mu.Unlock()
	for _, fn := range evict {
		fn()
	}
}

// leave counts an open session of uid less. b.mu is held.
func (b *ringBudget) leave(uid uint32) {
	b.nopen--
	if b.open[uid]--; b.open[uid] <= 0 {
		delete(b.open, uid)
	}
}

// asked counts uid's undrained sessions already asked to drain. b.mu is held.
func (b *ringBudget) asked(uid uint32) int {
	n := 0
	for _, l := range b.closed[uid] {
		if l.asked {
			n++
		}
	}
	return n
}

// askedAll counts the undrained sessions already asked to drain. b.mu is held.
func (b *ringBudget) askedAll() int {
	n := 0
	for uid := range b.closed {
		n += b.asked(uid)
	}
	return n
}

// evictOldest marks the oldest undrained session of uid that can be
// asked to drain (it has an OnEvict) and was not yet, counts it, and
// appends what asks its owner. b.mu is held.
func (b *ringBudget) evictOldest(uid uint32, evict []func()) []func() {
	for _, l := range b.closed[uid] {
		if l.asked || l.evict == nil {
			continue
		}
		l.asked = true
		b.evicted.Add(1)
		return append(evict, l.evict)
	}
	return evict
}

// busiestClosed returns the uid with the most undrained sessions not yet
// asked to drain. b.mu is held.
func (b *ringBudget) busiestClosed() uint32 {
	var uid uint32
	most := 0
	for u, ls := range b.closed {
		if n := len(ls) - b.asked(u); n > most {
			uid, most = u, n
		}
	}
	return uid
}

// dropClosed forgets released lease l from the undrained list. b.mu is held.
func (b *ringBudget) dropClosed(l *Lease) {
	ls := b.closed[l.uid]
	for i, x := range ls {
		if x == l {
			ls = append(ls[:i], ls[i+1:]...)
			b.nclose--
			break
		}
	}
	if len(ls) == 0 {
		delete(b.closed, l.uid)
	} else {
		b.closed[l.uid] = ls
	}
}
