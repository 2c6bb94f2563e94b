package adversarial

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Hostile classes against the per-client budgets of what a session makes
// the collector hold: ring memory (RingHog), sessions closed but not yet
// drained (TicketChurn), both as HostileUID beside root clients whose
// share they must not take, and /proc reads (HugeMaps).

// HostileUID is the allowed, unprivileged uid the budget classes connect
// as (agent::allowed_uids lists it).
const HostileUID = 65534

// The bounds the budget classes hold the collector to.
const (
	// RingSessions is how many sessions RingHog opens: the per-uid
	// session limit (agent::max_connections_per_uid's default).
	RingSessions = agentwire.DefaultMaxConnsPerUID
	// MaxRingMapped bounds the bytes of ring regions the collector maps,
	// all clients together: HostileUID's share
	// (agent::max_ring_memory_per_uid's default) and 16 MiB for the root
	// client's rings. Without a budget, RingSessions sessions of the
	// suite's rings map 435 MiB.
	MaxRingMapped = agent.DefaultRingMemoryPerUID + 16<<20
	// ChurnWorkers is how many sessions TicketChurn opens at once.
	ChurnWorkers = 8
	// MaxRingFds bounds the collector's descriptors of ring memfds while
	// TicketChurn runs: a session holds its three rings' memfds only
	// until WELCOME is sent (and one that ended, none); this leaves room
	// for every churning session and as many others in their handshake.
	MaxRingFds = 2 * 3 * ChurnWorkers
)

// RingHog opens RingSessions sessions as HostileUID, writes one launch
// into each launch ring and holds them: the collector must keep the
// bytes of ring regions it maps under MaxRingMapped (sessions past the
// uid's share get smaller rings or ERROR code 5, which the shim takes as
// "run unrecorded"), while a root client still gets its rings.
func RingHog(ctx context.Context, socket string) error { return ringHog(ctx, socket, MaxRingMapped) }

// ringHog is RingHog holding the collector's mapped rings to bound bytes.
func ringHog(ctx context.Context, socket string, bound int64) error {
	pid, err := collectorPID(socket)
	if err != nil {
		return fmt.Errorf("rings: %w", err)
	}
	var sessions []*agent.Session
	defer func() {
		for _, s := range sessions {
			_ = s.Close()
		}
	}()
	for i := 0; i < RingSessions && ctx.Err() == nil; i++ {
		s, err := dialAsRetry(ctx, HostileUID, socket, "rings")
		var pe *agentwire.ProtocolError
		if errors.As(err, &pe) && pe.Code == agentwire.CodeTooMany {
			continue // refused for want of ring memory: what the budget is for
		}
		if err != nil && ctx.Err() != nil {
			break
		}
		if err != nil {
			return fmt.Errorf("rings: session %d: %w", i, err)
		}
		sessions = append(sessions, s)
		writeOnce(s)
	}
	var worst int64
	var errs []error
	for ctx.Err() == nil {
		if err := legitDial(socket); err != nil {
			errs = append(errs, fmt.Errorf("rings: a root client beside %d hostile sessions: %w", len(sessions), err))
		}
		n, err := ringMapped(pid)
		if err != nil {
			return fmt.Errorf("rings: %w", err)
		}
		worst = max(worst, n)
		pause(ctx, 200*time.Millisecond)
	}
	if worst > bound {
		errs = append(errs, fmt.Errorf("rings: the collector mapped %d MiB of rings for %d sessions of uid %d, bound %d MiB",
			worst>>20, len(sessions), HostileUID, bound>>20))
	}
	return errors.Join(errs...)
}

// writeOnce writes one launch record into s's launch ring.
func writeOnce(s *agent.Session) {
	r := s.Region(agentwire.RoleLaunchRing, "")
	if r == nil {
		return
	}
	g, err := shm.NewRing(r)
	if err != nil {
		return
	}
	now := monoNS()
	l := record.Launch{LaunchID: 1, PID: uint32(os.Getpid()), EnqueueNS: now, ReturnNS: now + 1, Function: 1,
		Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
	b := l.Append(nil)
	pre, _ := record.ParsePrefix(b)
	g.Produce(uint32(pre.Type), b)
}

// TicketChurn runs ChurnWorkers loops, as HostileUID, of: take a session,
// take a ticket of its launch ring without publishing it (so its rings
// wait the whole drain time), disconnect. The collector's ring memfds
// must stay under MaxRingFds, and a root client must never be refused.
func TicketChurn(ctx context.Context, socket string) error {
	pid, err := collectorPID(socket)
	if err != nil {
		return fmt.Errorf("tickets: %w", err)
	}
	var sessions atomic.Int64
	var wg sync.WaitGroup
	for range ChurnWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s, err := dialAs(HostileUID, socket, "tickets", time.Second)
				if err != nil {
					pause(ctx, time.Millisecond)
					continue
				}
				if r := s.Region(agentwire.RoleLaunchRing, ""); r != nil {
					b := r.Bytes()
					le := binary.LittleEndian
					le.PutUint64(b[128:], le.Uint64(b[128:])+1) // head: a ticket taken, never published
				}
				_ = s.Close()
				sessions.Add(1)
			}
		}()
	}
	worst := 0
	var errs []error
	for ctx.Err() == nil {
		n, err := ringFds(pid)
		if err == nil {
			worst = max(worst, n)
		}
		if err := legitDial(socket); err != nil {
			errs = append(errs, fmt.Errorf("tickets: a root client beside the churn: %w", err))
		}
		pause(ctx, 200*time.Millisecond)
	}
	wg.Wait()
	if worst > MaxRingFds {
		errs = append(errs, fmt.Errorf("tickets: the collector held %d ring memfds (bound %d) during %d sessions of uid %d",
			worst, MaxRingFds, sessions.Load(), HostileUID))
	}
	return errors.Join(errs...)
}

// ringFds counts pid's descriptors of ring memfds.
func ringFds(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("ring fds: %w", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "/memfd:gpuprobe-ring") {
			n++
		}
	}
	return n, nil
}

// legitDial checks that a root client is not refused: WELCOME with a
// launch ring. Only an answer counts: when every class runs at once as
// root, the others' dials may close this one before its HELLO (all.go).
func legitDial(socket string) error {
	s, err := agent.DialTimeout(socket, hello("legit"), 2*time.Second)
	var pe *agentwire.ProtocolError
	if errors.As(err, &pe) {
		return err
	}
	if err != nil {
		return nil
	}
	defer s.Close()
	if s.Region(agentwire.RoleLaunchRing, "") == nil {
		return errors.New("WELCOME had no launch ring")
	}
	return nil
}

// dialAs dials a session with uid's credentials. SO_PEERCRED takes them
// from the thread that connects, so only this locked thread changes
// uid, keeping root as its saved uid to come back to.
func dialAs(uid int, socket, name string, timeout time.Duration) (*agent.Session, error) {
	runtime.LockOSThread()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setresuid(%d): %w", uid, e)
	}
	s, err := agent.DialTimeout(socket, hello(name), timeout)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e != 0 {
		// The thread stays locked: it ends with this goroutine.
		if s != nil {
			_ = s.Close()
		}
		return nil, fmt.Errorf("setresuid(0) after dialing as %d: %w", uid, e)
	}
	runtime.UnlockOSThread()
	return s, err
}

// dialAsRetry is dialAs retried for up to 5 s while the connection is
// closed before its answer: when every class runs at once, the others'
// dials of the same uid can evict it before its HELLO (as session does).
func dialAsRetry(ctx context.Context, uid int, socket, name string) (*agent.Session, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := dialAs(uid, socket, name, 2*time.Second)
		var pe *agentwire.ProtocolError
		if err == nil || errors.As(err, &pe) || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// collectorPID returns the pid serving socket (SO_PEERCRED of a plain
// connection, closed before its HELLO).
func collectorPID(socket string) (int, error) {
	c, err := dialRaw(socket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("collector pid: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, fmt.Errorf("collector pid: %w", err)
	}
	if cerr != nil {
		return 0, fmt.Errorf("collector pid: SO_PEERCRED: %w", cerr)
	}
	return int(cred.Pid), nil
}

// ringMapped sums the sizes of pid's mappings of ring memfds
// (/proc/PID/maps lines naming memfd:gpuprobe-ring).
func ringMapped(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, fmt.Errorf("ring mappings: %w", err)
	}
	defer f.Close()
	var sum int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "memfd:gpuprobe-ring") {
			continue
		}
		from, to, ok := strings.Cut(strings.Fields(line)[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(from, 16, 64)
		b, err2 := strconv.ParseUint(to, 16, 64)
		if err1 == nil && err2 == nil && b > a {
			sum += int64(b - a)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("ring mappings: %w", err)
	}
	return sum, nil
}

// The bounds of HugeMaps.
const (
	// IdleSessions is how many idle sessions HugeMaps holds.
	IdleSessions = 16
	// junkMappings of a junkPath-long path make the test process's
	// /proc/PID/maps about 150 MiB.
	junkMappings = 40000
	junkDirs     = 15 // components of 250 bytes
)

// HugeMaps takes IdleSessions sessions over raw connections, maps their
// regions as a shim would, then maps one page of a 3,800-byte path
// junkMappings times, so that /proc/PID/maps lists 150 MiB before the
// sessions' regions, and stays silent. The collector's idle checks
// (agent::idle_timeout) must read that within their bound and end every
// one of the sessions before the class's time is up, instead of keeping
// them (and reading 32 MiB per session per check) for good.
func HugeMaps(ctx context.Context, socket string) error {
	var conns []*net.UnixConn
	var regions []*shm.Region
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
		for _, r := range regions {
			_ = r.Close()
		}
	}()
	for i := 0; i < IdleSessions && ctx.Err() == nil; i++ {
		c, rs, err := rawSessionRetry(ctx, socket)
		if err != nil && ctx.Err() != nil {
			break
		}
		if err != nil {
			return fmt.Errorf("maps: session %d: %w", i, err)
		}
		conns, regions = append(conns, c), append(regions, rs...)
	}
	unmap, err := junkMaps()
	if err != nil {
		return fmt.Errorf("maps: %w", err)
	}
	defer unmap()
	var ended atomic.Int64
	var wg sync.WaitGroup
	deadline, _ := ctx.Deadline()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			var b [1]byte
			if _, err := c.Read(b[:]); errors.Is(err, io.EOF) {
				ended.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := ended.Load(); n < int64(len(conns)) && len(conns) == IdleSessions {
		return fmt.Errorf("maps: the collector ended %d of %d idle sessions of a process whose /proc/PID/maps lists 150 MiB before their regions",
			n, len(conns))
	}
	return nil
}

// rawSessionRetry is rawSession retried for up to 5 s, as session is:
// when every class runs at once, the others' dials can close this one
// before its HELLO.
func rawSessionRetry(ctx context.Context, socket string) (*net.UnixConn, []*shm.Region, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, rs, err := rawSession(socket)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return c, rs, err
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// rawSession says HELLO on a plain connection, takes the WELCOME and maps
// its shm regions (the headerless ones are left out).
func rawSession(socket string) (*net.UnixConn, []*shm.Region, error) {
	c, err := dialRaw(socket)
	if err != nil {
		return nil, nil, err
	}
	hf, err := agentwire.MarshalHello(hello("maps"))
	if err == nil {
		_, err = c.Write(hf)
	}
	buf := make([]byte, agentwire.FrameHeader+agentwire.MaxPayload)
	oob := make([]byte, unix.CmsgSpace(4*64))
	var n, oobn int
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, oobn, _, _, err = c.ReadMsgUnix(buf, oob)
		_ = c.SetReadDeadline(time.Time{})
	}
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("handshake: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	var regions []*shm.Region
	for _, fd := range fds {
		if r, err := shm.Map(fd, 0); err == nil {
			regions = append(regions, r)
		}
		_ = unix.Close(fd)
	}
	if t, _, err := agentwire.ReadFrame(bytes.NewReader(buf[:n])); err != nil || t != agentwire.FrameWelcome {
		_ = c.Close()
		for _, r := range regions {
			_ = r.Close()
		}
		return nil, nil, fmt.Errorf("handshake: frame type %d, %v; want WELCOME", t, err)
	}
	return c, regions, nil
}

// junkMaps maps one page of a file with a 3,800-byte path junkMappings
// times and returns what unmaps them and removes the file.
func junkMaps() (func(), error) {
	root, err := os.MkdirTemp("", "gpuprobe-adversarial-maps-")
	if err != nil {
		return nil, err
	}
	dir := root
	for range junkDirs {
		dir = filepath.Join(dir, strings.Repeat("d", 250))
	}
	var mems [][]byte
	undo := func() {
		for _, m := range mems {
			_ = unix.Munmap(m)
		}
		_ = os.RemoveAll(root)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		undo()
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "page"))
	if err != nil {
		undo()
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		undo()
		return nil, err
	}
	for range junkMappings {
		m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			undo()
			return nil, fmt.Errorf("mmap: %w", err)
		}
		mems = append(mems, m)
	}
	return undo, nil
}
