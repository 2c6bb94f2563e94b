package agent

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// Admission. Every accepted connection takes a pre-HELLO slot of its uid
// (Options.MaxPending in all, MaxPendingPerUID per uid) until it says
// HELLO or the handshake deadline passes. When its uid's share or the
// pool is full, the oldest pre-HELLO connection of that uid (or of the uid
// holding the most) is closed to make room: connections that never speak
// cannot keep a client that says HELLO at once from getting in. HELLO
// moves a connection to a session slot (MaxConns in all, MaxConnsPerUID
// per uid); beyond them it is refused with ERROR code 5.
//
// A connection whose whole first frame waits in its socket (MSG_PEEK) is
// about to be served and is never evicted: closing it would reset a
// client that did everything right. When every pre-HELLO connection of
// the uid is such, the newcomer is admitted beyond the share (they leave
// the pool within microseconds), up to 4 × MaxPending in all; past that
// it is closed.

type phase uint8

const (
	phaseNone    phase = iota // counted nowhere (evicted, or leaving)
	phasePending              // before HELLO
	phaseSession              // after HELLO
)

// connState is the server's record of one connection (guarded by Server.mu).
type connState struct {
	conn    *net.UnixConn
	uid     uint32
	since   time.Time
	phase   phase
	evicted bool // closed by evictPending
}

// slots count the connections of each phase, in all and per uid.
type slots struct {
	pending, sessions     int
	pendingBy, sessionsBy map[uint32]int
}

func newSlots() slots {
	return slots{pendingBy: map[uint32]int{}, sessionsBy: map[uint32]int{}}
}

func dec(m map[uint32]int, uid uint32) {
	if m[uid]--; m[uid] <= 0 {
		delete(m, uid)
	}
}

// release gives back st's slot.
func (sl *slots) release(st *connState) {
	switch st.phase {
	case phasePending:
		sl.pending--
		dec(sl.pendingBy, st.uid)
	case phaseSession:
		sl.sessions--
		dec(sl.sessionsBy, st.uid)
	}
	st.phase = phaseNone
}

// busiestPending returns the uid with the most pre-HELLO connections.
func (sl *slots) busiestPending() uint32 {
	var uid uint32
	most := 0
	for u, n := range sl.pendingBy {
		if n > most {
			uid, most = u, n
		}
	}
	return uid
}

// admitPending gives c a pre-HELLO slot, evicting an older connection
// when the slots are full; nil: there was none to evict, c is not
// admitted. s.mu is held.
func (s *Server) admitPending(c *net.UnixConn, uid uint32) *connState {
	switch {
	case s.slots.pendingBy[uid] >= s.opts.MaxPendingPerUID:
		s.evictPending(uid)
	case s.slots.pending >= s.opts.MaxPending:
		s.evictPending(s.slots.busiestPending())
	}
	if s.slots.pending >= 4*s.opts.MaxPending {
		return nil
	}
	st := &connState{conn: c, uid: uid, since: time.Now(), phase: phasePending}
	s.conns[c] = st
	s.slots.pending++
	s.slots.pendingBy[uid]++
	return st
}

// evictPending closes the oldest pre-HELLO connection of uid whose first
// frame has not wholly arrived, and says whether there was one. s.mu is
// held.
func (s *Server) evictPending(uid uint32) bool {
	var old *connState
	for _, st := range s.conns {
		if st.phase == phasePending && st.uid == uid && (old == nil || st.since.Before(old.since)) && !frameWaiting(st.conn) {
			old = st
		}
	}
	if old == nil {
		return false
	}
	s.slots.release(old)
	old.evicted = true
	old.conn.Close()
	if n := s.evicted.Add(1); n&(n-1) == 0 {
		s.log.Warn("agent: connections that sent no HELLO were closed to make room for newer ones (logged at powers of two)",
			zap.Uint32("uid", uid), zap.Uint64("evicted", n))
	}
	return true
}

// frameWaiting says whether a whole frame waits in c's receive queue: its
// header, peeked, and as many bytes queued (SIOCINQ) as it announces.
func frameWaiting(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		var h [agentwire.FrameHeader]byte
		n, _, err := unix.Recvfrom(int(fd), h[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err != nil || n < agentwire.FrameHeader {
			return
		}
		q, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		ok = err == nil && uint64(q) >= agentwire.FrameHeader+uint64(binary.LittleEndian.Uint32(h[8:]))
	})
	return ok
}

// evictedConn says whether st was closed by evictPending.
func (s *Server) evictedConn(st *connState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.evicted
}

// promote moves a connection that said HELLO to a session slot, or says
// why there is none (the connection then keeps its pre-HELLO slot while
// it is refused).
func (s *Server) promote(st *connState) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st.phase != phasePending:
		return "the connection was closed to make room for newer ones before its HELLO"
	case s.slots.sessions >= s.opts.MaxConns:
		return fmt.Sprintf("%d sessions are open, the limit is %d", s.slots.sessions, s.opts.MaxConns)
	case s.slots.sessionsBy[st.uid] >= s.opts.MaxConnsPerUID:
		return fmt.Sprintf("uid %d has %d sessions open, the limit per uid is %d", st.uid, s.slots.sessionsBy[st.uid], s.opts.MaxConnsPerUID)
	}
	s.slots.release(st)
	st.phase = phaseSession
	s.slots.sessions++
	s.slots.sessionsBy[st.uid]++
	return ""
}

// leave gives back st's slot (a session that ended).
func (s *Server) leave(st *connState) {
	s.mu.Lock()
	s.slots.release(st)
	s.mu.Unlock()
}
