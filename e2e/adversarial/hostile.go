package adversarial

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Class is one hostile client: it runs until ctx ends. It returns an
// error only when something the suite asserts failed (e.g. a legitimate
// client was not welcomed) or the client itself could not be set up;
// what it does to the collector is judged by the watchdog.
type Class func(ctx context.Context, socket string) error

// Classes are the hostile classes by name, in the order the suite runs them.
var Classes = []ClassInfo{
	{"bomb", Bomb, Duration},
	{"ring", LyingRing, Duration},
	{"fds", FdTrickle, Duration},
	{"idle", IdlePreHello, Duration},
	// Twice as long: on a 2-core machine the collector takes about 10 s
	// to read a launch for each of the 200k device numbers.
	{"devices", ManyDevices, 2 * Duration},
	{"calibration", HostileCalibration, Duration},
	{"names", Names, Duration},         // budget.go
	{"handles", Handles, 2 * Duration}, // budget.go; twice as long: 262,144 names of 4 KiB to read
	{"rings", RingHog, Duration},       // ringbudget.go
	{"tickets", TicketChurn, Duration}, // ringbudget.go
	{"maps", HugeMaps, Duration},       // ringbudget.go
}

// ClassInfo names a hostile class and how long the suite runs it.
type ClassInfo struct {
	Name string
	Run  Class
	Time time.Duration
}

// ClassByName returns the class called name.
func ClassByName(name string) (Class, bool) {
	for _, c := range Classes {
		if c.Name == name {
			return c.Run, true
		}
	}
	return nil, false
}

func hello(name string) agentwire.Hello {
	return agentwire.Hello{PID: uint32(os.Getpid()), Name: "adversarial-" + name}
}

// parallel runs n copies of f and waits for them; the first error wins.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Bomb sends PATCH requests with decompression bombs and huge images from
// two connections at once, reconnecting whenever the collector hangs up.
func Bomb(ctx context.Context, socket string) error {
	imgs, err := bombImages()
	if err != nil {
		return fmt.Errorf("bomb images: %w", err)
	}
	return parallel(2, func(int) error {
		for ctx.Err() == nil {
			s, err := agent.DialTimeout(socket, hello("bomb"), 2*time.Second)
			if err != nil {
				pause(ctx, 50*time.Millisecond)
				continue
			}
			for _, img := range imgs {
				if ctx.Err() != nil {
					break
				}
				// The answer does not matter (NOPATCH is right); the
				// collector's memory and liveness do.
				_, _ = s.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: img}, 5*time.Second)
			}
			_ = s.Close()
		}
		return nil
	})
}

// LyingRing takes a session and keeps rewriting its launch ring's header:
// head 2^40 tickets ahead of tail, the dropped counter near 2^63, and every
// slot's drop mark set.
func LyingRing(ctx context.Context, socket string) error {
	s, err := session(ctx, socket, "ring")
	if err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	defer s.Close()
	r := s.Region(agentwire.RoleLaunchRing, "")
	if r == nil {
		return errors.New("ring: WELCOME had no launch ring")
	}
	h := r.Header()
	b := r.Bytes()
	le := binary.LittleEndian
	drops := shm.DataOffset + uint64(h.MaxEntries)*uint64(h.Stride)
	for ctx.Err() == nil {
		tail := le.Uint64(b[192:])
		le.PutUint64(b[128:], tail+1<<40)  // head
		le.PutUint64(b[256:], 1<<63-1<<20) // dropped
		for i := uint64(0); i < uint64(h.MaxEntries) && drops+4*i+4 <= uint64(len(b)); i++ {
			le.PutUint32(b[drops+4*i:], ^uint32(0))
		}
		pause(ctx, time.Millisecond)
	}
	return nil
}

// FdTrickle opens 16 connections that send their HELLO, and then PATCH
// frames, one byte per sendmsg, each carrying 32 descriptors.
func FdTrickle(ctx context.Context, socket string) error {
	return parallel(16, func(int) error {
		fds := make([]int, 32)
		for i := range fds {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("fds: %w", err)
			}
			defer unix.Close(fd)
			fds[i] = fd
		}
		rights := unix.UnixRights(fds...)
		hf, err := agentwire.MarshalHello(hello("fds"))
		if err != nil {
			return fmt.Errorf("fds: %w", err)
		}
		patch, err := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 90, API: agentwire.APIModule, Image: []byte("x")}, false)
		if err != nil {
			return fmt.Errorf("fds: %w", err)
		}
		for ctx.Err() == nil {
			c, err := dialRaw(socket)
			if err != nil {
				pause(ctx, 50*time.Millisecond)
				continue
			}
			go drain(c)
			trickle(ctx, c, append(hf, patch...), rights)
			_ = c.Close()
		}
		return nil
	})
}

// trickle sends msg one byte per sendmsg with rights attached, then keeps
// sending PATCH bytes' worth of descriptors until the peer hangs up.
func trickle(ctx context.Context, c *net.UnixConn, msg, rights []byte) {
	for i := 0; ctx.Err() == nil; i++ {
		if _, _, err := c.WriteMsgUnix(msg[i%len(msg):i%len(msg)+1], rights, nil); err != nil {
			return
		}
		pause(ctx, 5*time.Millisecond)
	}
}

// drain reads and discards what the server sends, closing any descriptors.
func drain(c *net.UnixConn) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*64))
	for {
		_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		closeRights(oob[:oobn])
		if err != nil {
			return
		}
	}
}

func closeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := unix.ParseUnixRights(&m); err == nil {
			for _, fd := range fds {
				_ = unix.Close(fd)
			}
		}
	}
}

// IdleConnections is how many pre-HELLO connections IdlePreHello holds.
const IdleConnections = 400

// IdlePreHello opens IdleConnections connections that never send a byte
// (reopening those the server closes); while they are open, a legitimate
// client must get WELCOME within 2 s, every second.
func IdlePreHello(ctx context.Context, socket string) error { return idleFlood(ctx, socket, true) }

// idleFlood holds the idle connections and, with legit, checks that a
// legitimate client still gets WELCOME every second.
func idleFlood(ctx context.Context, socket string, legit bool) error {
	conns := make(chan *net.UnixConn, IdleConnections)
	defer func() {
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	}()
	hold := func() {
		for len(conns) < cap(conns) && ctx.Err() == nil {
			c, err := dialRaw(socket)
			if err != nil {
				return
			}
			conns <- c
		}
	}
	hold()
	var failures []error
	for ctx.Err() == nil {
		if !legit {
			pause(ctx, time.Second)
			hold()
			continue
		}
		start := time.Now()
		s, err := agent.DialTimeout(socket, hello("legit"), 2*time.Second)
		if err != nil {
			failures = append(failures, fmt.Errorf("legitimate client beside %d idle connections: %w (after %s)",
				len(conns), err, time.Since(start).Round(time.Millisecond)))
		} else {
			_ = s.Close()
		}
		pause(ctx, time.Second)
		hold()
	}
	if len(failures) > 0 {
		return fmt.Errorf("idle: %d legitimate dials failed; first: %w", len(failures), failures[0])
	}
	return nil
}

// DistinctDevices is how many device numbers ManyDevices names.
const DistinctDevices = 200_000

// DevicesReached is how many distinct device numbers the last ManyDevices
// run got into its ring (the suite logs it).
var DevicesReached atomic.Uint64

// ManyDevices writes a launch record for each of DistinctDevices distinct
// device numbers, waiting while the ring is full so that every number gets
// in, then device, calibration and completion records for them.
func ManyDevices(ctx context.Context, socket string) error {
	DevicesReached.Store(0)
	return produce(ctx, socket, "devices", func(p *producer, i uint64) {
		dev := uint32(i % DistinctDevices)
		now := monoNS()
		if i < DistinctDevices {
			p.putWait(ctx, &record.Launch{LaunchID: i + 1, PID: p.pid, EnqueueNS: now, ReturnNS: now + 1, Function: 1,
				Device: dev, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
			DevicesReached.Store(i + 1)
			return
		}
		p.put(&record.Device{Device: dev, PID: p.pid, SMCount: 132, ComputeCap: 90, Name: "fake"})
		p.put(&record.Calibration{MonoNS: now, RealtimeNS: now + 1, GPUNS: now, Device: dev})
		p.put(&record.Completion{LaunchID: uint64(dev) + 1, CompleteNS: now + 2, Device: dev, How: record.SeenByStreamSync})
	})
}

// HostileCalibration writes calibration records with absurd and
// contradictory values for device 0 (the honest client's) and others.
func HostileCalibration(ctx context.Context, socket string) error {
	extremes := []uint64{0, 1, 1 << 63, ^uint64(0), ^uint64(0) - 1}
	return produce(ctx, socket, "calibration", func(p *producer, i uint64) {
		pick := func() uint64 {
			if i%2 == 0 {
				return extremes[rand.IntN(len(extremes))]
			}
			return rand.Uint64()
		}
		p.put(&record.Calibration{MonoNS: pick(), RealtimeNS: pick() | 1, GPUNS: pick(), Device: uint32(i % 4),
			UncertaintyNS: uint32(pick())})
	})
}

type producer struct {
	ring *shm.Ring
	pid  uint32
	buf  []byte
	full int
}

func (p *producer) put(r interface{ Append([]byte) []byte }) {
	p.buf = r.Append(p.buf[:0])
	pre, _ := record.ParsePrefix(p.buf)
	if p.ring.Produce(uint32(pre.Type), p.buf) == shm.Dropped {
		p.full++
	}
}

// putWait is put that waits (1 ms at a time) while the ring is full.
func (p *producer) putWait(ctx context.Context, r interface{ Append([]byte) []byte }) {
	p.buf = r.Append(p.buf[:0])
	pre, _ := record.ParsePrefix(p.buf)
	for p.ring.Produce(uint32(pre.Type), p.buf) == shm.Dropped && ctx.Err() == nil {
		pause(ctx, time.Millisecond)
	}
}

// produce takes a session and calls step with 0, 1, ... until ctx ends,
// yielding for a millisecond whenever the ring was full.
func produce(ctx context.Context, socket, name string, step func(p *producer, i uint64)) error {
	s, err := session(ctx, socket, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer s.Close()
	r := s.Region(agentwire.RoleLaunchRing, "")
	if r == nil {
		return fmt.Errorf("%s: WELCOME had no launch ring", name)
	}
	ring, err := shm.NewRing(r)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	p := &producer{ring: ring, pid: uint32(os.Getpid()), buf: make([]byte, 0, 256)}
	for i := uint64(0); ctx.Err() == nil; i++ {
		full := p.full
		step(p, i)
		if p.full != full {
			pause(ctx, time.Millisecond)
		}
	}
	return nil
}

func monoNS() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// session dials a session for a hostile class, retrying for up to 5 s:
// when the classes run all at once as one uid, the others' dials can
// evict this one before its HELLO (pre-HELLO slots are per uid), which
// says nothing about the collector's bounds.
func session(ctx context.Context, socket, name string) (*agent.Session, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := agent.DialTimeout(socket, hello(name), 5*time.Second)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
		pause(ctx, 50*time.Millisecond)
	}
}
