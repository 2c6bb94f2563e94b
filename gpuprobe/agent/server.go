package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	Path             string        // socket path
	Mode             os.FileMode   // socket file mode (default 0660)
	AllowedUIDs      []uint32      // admitted uids; with AllowedGIDs empty too: root and our own uid
	AllowedGIDs      []uint32      // admitted gids (primary or supplementary)
	HandshakeTimeout time.Duration // a connection must be WELCOMEd this soon after accept (default 5 s)
	MaxPending       int           // most connections before HELLO (default DefaultMaxPending)
	MaxPendingPerUID int           // most of them of one uid (default DefaultMaxPendingPerUID)
	MaxConns         int           // most sessions, after HELLO (default DefaultMaxConns)
	MaxConnsPerUID   int           // most sessions of one uid (default DefaultMaxConnsPerUID)
	FrameTimeout     time.Duration // a frame's rest must arrive this soon after its first byte (default DefaultFrameTimeout)
	IdleTimeout      time.Duration // a silent session is checked for mapped regions this often (default DefaultIdleTimeout)
	PatchTimeout     time.Duration // bound on answering one PATCH once read (default DefaultPatchTimeout)
	Logger           *zap.Logger   // default: no logging
	// ImageMemory bounds the bytes of PATCH images held at once, all
	// clients together (default DefaultImageMemory); a PATCH that finds
	// no room within ImageWait (default 2 s) is answered NOPATCH.
	ImageMemory int64
	ImageWait   time.Duration
	// Rings bound the ring memory sessions hold, open or closed but not
	// yet drained (rings.go).
	Rings RingLimits
	// Settings go to every client in its WELCOME.
	Settings agentwire.Settings
}

// Peer is one connected client.
type Peer struct {
	Session uint32          // server-assigned session id
	PID     int32           // from SO_PEERCRED
	UID     uint32          // from SO_PEERCRED
	GID     uint32          // from SO_PEERCRED
	Groups  []uint32        // supplementary groups, from /proc/PID/status (nil if unknown)
	Proc    ProcInfo        // its executable, cgroups and start time, from /proc/PID
	Hello   agentwire.Hello // what the client said

	rings *ringBudget // the server's ring budget (nil: Peer made outside a server)
	lease *Lease      // what Reserve took
}

// Reserve charges the rings the owner makes for p's session to the ring
// budget (Options.Rings): at full size (shift 0) when p's uid's share and
// the node's budget have room, else at the smallest shift that fits (at
// most req.MaxShift). It returns the shift granted and the session's
// lease, to Release once the rings are unmapped; when not even the
// smallest fits, a *agentwire.ProtocolError with code 5 (return it from
// Connect: the client is refused with it). Call it once, from Connect.
func (p *Peer) Reserve(req RingRequest) (uint, *Lease, error) {
	if p.rings == nil {
		return 0, nil, nil
	}
	if p.lease != nil {
		return 0, nil, errors.New("agent: a session reserves its rings once")
	}
	slots, l, err := p.rings.reserve(p.UID, req)
	p.lease = l
	return slots, l, err
}

// Callbacks connect the server to its owner (the receiver).
type Callbacks struct {
	// Connect is called after a client's handshake passed; it returns the
	// regions to hand to the client (per-connection or shared ones). An
	// error refuses the client with code 3 and the error's text.
	Connect func(p *Peer) ([]agentwire.Offer, error)
	// Disconnect is called once for every peer whose Connect succeeded, when
	// the client goes away or the server closes.
	Disconnect func(p *Peer)
	// Patch answers a client's PATCH (nil: every PATCH gets NOPATCH code
	// 4). A *NoPatch error is sent as is; any other error as NOPATCH code
	// 3 with its text. Calls for one peer never overlap.
	Patch func(p *Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error)
	// Welcomed, if set, is called once the client has its WELCOME and
	// descriptors: the memfds made for this session alone may be closed
	// (their mappings stay), so a session holds none while it is drained.
	Welcomed func(p *Peer)
	// PatchRefused, if set, is called when a PATCH is answered NOPATCH
	// without reaching Patch (a bad frame, an oversized or sparse image
	// memfd, no room in Options.ImageMemory), with the reason.
	PatchRefused func(p *Peer, id uint32, err error)
}

// Stats count the server's connections.
type Stats struct {
	Accepted  uint64 // connections whose handshake succeeded
	Rejected  uint64 // connections refused by the peer-credential check
	Failed    uint64 // connections that failed the handshake otherwise (limits included)
	Active    int64  // connections open now
	Evicted   uint64 // connections closed before HELLO to make room for newer ones
	Reclaimed uint64 // idle sessions ended because their process mapped none of their regions
	// MapsTruncated counts the idle sessions of them whose process's
	// /proc/PID/maps was past the read bound before any of their regions.
	MapsTruncated uint64
}

// Server is the agent socket server.
type Server struct {
	opts    Options
	cb      Callbacks
	log     *zap.Logger
	ln      *net.UnixListener
	selfUID uint32

	mu     sync.Mutex
	conns  map[*net.UnixConn]*connState
	slots  slots // admission counts (admit.go)
	closed bool
	wg     sync.WaitGroup

	images *agentwire.Budget // Options.ImageMemory
	rings  *ringBudget       // Options.Rings (rings.go)
	idle   *idleMaps         // the idle checks' maps reads (idlemaps.go)

	session   atomic.Uint32
	accepted  atomic.Uint64
	rejected  atomic.Uint64
	failed    atomic.Uint64
	active    atomic.Int64
	evicted   atomic.Uint64
	reclaimed atomic.Uint64
	mapsCut   atomic.Uint64
}

// Listen creates the socket and starts serving. A stale socket file at
// opts.Path (nobody listening) is replaced; a live one is an error.
func Listen(opts Options, cb Callbacks) (*Server, error) {
	if opts.Path == "" {
		return nil, errors.New("agent: socket path is empty")
	}
	if opts.Mode == 0 {
		opts.Mode = 0o660
	}
	if opts.Mode&^os.ModePerm != 0 {
		return nil, fmt.Errorf("agent: socket mode %v has bits beyond permissions", opts.Mode)
	}
	setDefaults(&opts)
	if cb.Connect == nil {
		return nil, errors.New("agent: Callbacks.Connect is nil")
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if err := removeStale(opts.Path); err != nil {
		return nil, err
	}
	// Bind under a temporary name, set the mode, then rename into place, so
	// the socket is never reachable with the umask's permissions.
	tmp := filepath.Join(filepath.Dir(opts.Path), "."+filepath.Base(opts.Path)+".tmp"+strconv.Itoa(os.Getpid()))
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent: listening on %s: %w", opts.Path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, opts.Mode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("agent: chmod %s to %v: %w", opts.Path, opts.Mode, err)
	}
	if err := os.Rename(tmp, opts.Path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("agent: moving the socket to %s: %w", opts.Path, err)
	}
	s := &Server{opts: opts, cb: cb, log: log, ln: ln, selfUID: uint32(os.Getuid()), conns: map[*net.UnixConn]*connState{}, slots: newSlots(),
		images: agentwire.NewBudget(opts.ImageMemory, opts.ImageWait),
		rings:  newRingBudget(opts.Rings, opts.MaxConns, opts.MaxConnsPerUID), idle: newIdleMaps()}
	s.wg.Add(1)
	go s.acceptLoop()
	log.Info("agent socket listening", zap.String("path", opts.Path), zap.Stringer("mode", opts.Mode))
	return s, nil
}

func setDefaults(o *Options) {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defn := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.HandshakeTimeout, agentwire.DefaultHandshakeTimeout)
	def(&o.FrameTimeout, agentwire.DefaultFrameTimeout)
	def(&o.IdleTimeout, agentwire.DefaultIdleTimeout)
	def(&o.PatchTimeout, DefaultPatchTimeout)
	defn(&o.MaxPending, agentwire.DefaultMaxPending)
	defn(&o.MaxPendingPerUID, min(agentwire.DefaultMaxPendingPerUID, o.MaxPending))
	defn(&o.MaxConns, agentwire.DefaultMaxConns)
	defn(&o.MaxConnsPerUID, min(agentwire.DefaultMaxConnsPerUID, o.MaxConns))
	if o.ImageMemory <= 0 {
		o.ImageMemory = DefaultImageMemory
	}
	def(&o.ImageWait, 2*time.Second)
}

// removeStale removes a socket file nobody listens on.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: %s: %w", path, err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("agent: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("agent: another server is listening on %s", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("agent: removing stale socket %s: %w", path, err)
	}
	return nil
}

// Path returns the socket path.
func (s *Server) Path() string { return s.opts.Path }

// Stats returns the connection counters.
func (s *Server) Stats() Stats {
	return Stats{Accepted: s.accepted.Load(), Rejected: s.rejected.Load(), Failed: s.failed.Load(), Active: s.active.Load(),
		Evicted: s.evicted.Load(), Reclaimed: s.reclaimed.Load(), MapsTruncated: s.mapsCut.Load()}
}

// RingStats returns the ring budget's counters.
func (s *Server) RingStats() RingStats { return s.rings.stats() }

// Close stops accepting, closes every connection, waits for their
// goroutines (Disconnect callbacks included) and removes the socket file.
// It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if rerr := os.Remove(s.opts.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("agent: closing %s: %w", s.opts.Path, err)
	}
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("agent socket accept failed", zap.Error(err))
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		// SO_PEERCRED does not block: read it here, to count the
		// connection against its uid's pre-HELLO slots at once.
		cred, err := peerCred(c)
		if err != nil {
			s.failed.Add(1)
			s.log.Warn("agent: reading peer credentials failed", zap.Error(err))
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		st := s.admitPending(c, cred.Uid)
		if st == nil {
			s.mu.Unlock()
			s.failed.Add(1)
			c.Close() // 4 × MaxPending connections wait for their HELLO to be read
			continue
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c, cred, st)
	}
}

func (s *Server) forget(c *net.UnixConn) {
	s.mu.Lock()
	if st := s.conns[c]; st != nil {
		s.slots.release(st)
	}
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// allowed applies the peer-credential policy to a uid, its primary gid
// and its supplementary groups.
func (s *Server) allowed(uid, gid uint32, groups []uint32) bool {
	if len(s.opts.AllowedUIDs) == 0 && len(s.opts.AllowedGIDs) == 0 {
		return uid == 0 || uid == s.selfUID
	}
	if slices.Contains(s.opts.AllowedUIDs, uid) || slices.Contains(s.opts.AllowedGIDs, gid) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(s.opts.AllowedGIDs, g) {
			return true
		}
	}
	return false
}

// refuse sends an ERROR frame, half-closes, and drains what the client
// already sent (so that closing does not reset the connection before the
// client read the ERROR). Everything is bounded by the connection deadline
// and at most one second of draining.
func (s *Server) refuse(c *net.UnixConn, code agentwire.ErrorCode, msg string) {
	if _, err := c.Write(agentwire.MarshalError(code, msg)); err != nil {
		return
	}
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(c, agentwire.FrameHeader+agentwire.MaxPayload))
}

func (s *Server) handle(c *net.UnixConn, cred *unix.Ucred, st *connState) {
	defer s.wg.Done()
	defer s.forget(c)
	s.active.Add(1)
	defer s.active.Add(-1)
	c.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))

	proc := openPeerProc(c, cred.Pid)
	defer proc.close()
	groups, gerr := proc.groups()
	log := s.log.With(zap.Int32("pid", cred.Pid), zap.Uint32("uid", cred.Uid), zap.Uint32("gid", cred.Gid))
	if gerr != nil {
		log.Debug("agent: supplementary groups unknown; only uid and primary gid are checked", zap.Error(gerr))
	}
	if !s.allowed(cred.Uid, cred.Gid, groups) {
		s.rejected.Add(1)
		msg := fmt.Sprintf("peer uid %d gid %d (pid %d) is not allowed by allowed_uids %v / allowed_gids %v",
			cred.Uid, cred.Gid, cred.Pid, s.opts.AllowedUIDs, s.opts.AllowedGIDs)
		if len(s.opts.AllowedUIDs) == 0 && len(s.opts.AllowedGIDs) == 0 {
			msg = fmt.Sprintf("peer uid %d gid %d (pid %d) is not allowed: with no allowed_uids/allowed_gids only root and uid %d may connect",
				cred.Uid, cred.Gid, cred.Pid, s.selfUID)
		}
		log.Warn("agent: connection rejected", zap.String("reason", msg))
		s.refuse(c, agentwire.CodePermissionDenied, msg)
		return
	}
	t, p, err := agentwire.ReadFrame(c)
	if err == nil && t != agentwire.FrameHello {
		err = &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("first frame is type %d, want HELLO (%d)", t, agentwire.FrameHello)}
	}
	var hello agentwire.Hello
	if err == nil {
		hello, err = agentwire.UnmarshalHello(p)
	}
	if err != nil && s.evictedConn(st) {
		return // counted in Stats.Evicted, logged by evictPending
	}
	if err != nil {
		s.failed.Add(1)
		log.Warn("agent: bad handshake", zap.Error(err))
		var pe *agentwire.ProtocolError
		if errors.As(err, &pe) {
			s.refuse(c, pe.Code, pe.Message)
		}
		return
	}
	if msg := s.promote(st); msg != "" {
		s.failed.Add(1)
		log.Warn("agent: too many sessions", zap.String("reason", msg))
		s.refuse(c, agentwire.CodeTooMany, msg)
		return
	}
	peer := &Peer{Session: s.session.Add(1), PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Groups: groups, Proc: proc.info(), Hello: hello,
		rings: s.rings}
	log = log.With(zap.Uint32("session", peer.Session), zap.String("process", hello.Name))
	offers, err := s.cb.Connect(peer)
	if err != nil {
		peer.lease.Release() // the owner made no rings
		s.failed.Add(1)
		log.Warn("agent: session setup failed", zap.Error(err))
		code := agentwire.CodeServer
		if pe := (*agentwire.ProtocolError)(nil); errors.As(err, &pe) {
			code = pe.Code
		}
		s.refuse(c, code, err.Error())
		return
	}
	for i, o := range offers {
		if _, _, err := o.Descriptor(); err != nil {
			s.failed.Add(1)
			log.Warn("agent: bad offer", zap.Int("offer", i), zap.String("name", o.Name), zap.Error(err))
			s.refuse(c, agentwire.CodeServer, fmt.Sprintf("offer %d (%q): %v", i, o.Name, err))
			s.disconnect(peer)
			s.rings.close(peer.lease, time.Now())
			return
		}
	}
	regions, err := s.welcome(c, peer, offers)
	if err != nil {
		s.failed.Add(1)
		log.Warn("agent: sending WELCOME failed", zap.Error(err))
		s.disconnect(peer)
		s.rings.close(peer.lease, time.Now())
		return
	}
	if s.cb.Welcomed != nil {
		s.cb.Welcomed(peer)
	}
	s.accepted.Add(1)
	log.Info("agent: client connected", zap.Int("regions", len(offers)))
	if hello.Flags&agentwire.HelloReconnect != 0 {
		log.Warn("agent: client reconnected", zap.Uint32("earlier_sessions", hello.Sessions), zap.Uint64("lost_records", hello.Lost))
	}
	c.SetDeadline(time.Time{})
	// The session lasts until the client closes (or Close closes us); in
	// between, the client may send PATCH requests.
	opaque := len(offers) - len(regions) // regions liveness cannot be told of (kernel maps)
	s.idle.add(proc, regions)
	s.serve(c, &session{peer: peer, proc: proc, regions: regions, opaque: opaque}, log)
	s.idle.remove(proc, regions)
	s.leave(st)
	s.disconnect(peer)
	s.rings.close(peer.lease, time.Now())
	log.Info("agent: client disconnected")
}

func (s *Server) disconnect(p *Peer) {
	if s.cb.Disconnect != nil {
		s.cb.Disconnect(p)
	}
}

// welcome sends the WELCOME frame with the offered regions' memfds and
// returns the file identities of the shm regions among them.
func (s *Server) welcome(c *net.UnixConn, p *Peer, offers []agentwire.Offer) ([]fileID, error) {
	w := agentwire.Welcome{Session: p.Session, Settings: s.opts.Settings}
	fds := make([]int, 0, len(offers))
	var ids []fileID
	for i, o := range offers {
		d, fd, err := o.Descriptor()
		if err != nil {
			return nil, fmt.Errorf("offer %d (%q, role %d): %w", i, o.Name, o.Role, err)
		}
		w.Regions = append(w.Regions, d)
		fds = append(fds, fd)
		var st unix.Stat_t
		if o.Region != nil && unix.Fstat(fd, &st) == nil {
			ids = append(ids, fileID{dev: st.Dev, ino: st.Ino})
		}
	}
	frame, err := agentwire.MarshalWelcome(w)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return nil, fmt.Errorf("sendmsg: %w", err)
	}
	if n < len(frame) {
		if _, err := c.Write(frame[n:]); err != nil {
			return nil, fmt.Errorf("writing the rest of WELCOME: %w", err)
		}
	}
	return ids, nil
}

// peerCred reads SO_PEERCRED of a unix connection.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("agent: raw conn: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("agent: raw conn control: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("agent: SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}
