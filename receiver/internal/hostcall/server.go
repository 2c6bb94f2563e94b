// Package hostcall serves the host-call mailbox of one client: the
// requests GPU programs post for trace_printk (6), puts (501) and the map
// helpers on maps that live on the host (shm "Mailbox", jit/ptx "Host
// calls"). printk and puts become Messages for the receiver to export;
// map operations work on the client's HostMaps.
package hostcall

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Polling. A GPU thread spins on its slot until the host answers, so the
// host must be polling when requests come: Serve spins (polls without
// sleeping) for Spin after the last request, then sleeps with intervals
// that double from 1 µs up to MaxSleep. While requests keep coming the
// round trip is the poll loop's (microseconds); idle, a client costs one
// wake-up per MaxSleep.
const (
	// DefaultSpin: printk-heavy kernels post requests microseconds apart;
	// 500 µs covers the gaps between warps and between back-to-back
	// launches while bounding the spin to 0.5 ms of one core per burst.
	DefaultSpin = 500 * time.Microsecond
	// DefaultMaxSleep: the first request after an idle spell waits up to
	// this plus the sleep's overshoot, at 4,000 wake-ups a second per idle
	// client (shm.Mailbox.Serve sleeps with nanosleep: 250 µs took 0.33 ms
	// median, 0.48 ms p99, 1.4 ms p99.9 on the 2-core dev VM).
	DefaultMaxSleep = 250 * time.Microsecond
	// DefaultTimeout is the mailbox's timeout_ns: how long a GPU thread
	// waits for an answer before its helper returns -ETIMEDOUT, so the
	// most a dead or stalled collector adds to a kernel per host call. It
	// covers MaxSleep's overshoot tail (a first request after idle was
	// answered in 0.19 ms median, 2.4-3.6 ms p99 on the same VM).
	DefaultTimeout = 5 * time.Millisecond
	// DefaultSlots: one slot per concurrently waiting GPU thread; 256
	// slots are 64 KiB.
	DefaultSlots = 256
	// DefaultRate and DefaultBurst bound the requests served per second
	// for one client (a token bucket); the excess is answered -EBUSY at
	// once, counted in Counters.Rejected, and does no work.
	DefaultRate  = 200_000
	DefaultBurst = 20_000
)

// Options configure a Server; zero values take the defaults above.
type Options struct {
	Slots    uint32
	Timeout  time.Duration
	Spin     time.Duration
	MaxSleep time.Duration
	Rate     float64 // requests per second served
	Burst    float64
}

func (o Options) withDefaults() Options {
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	if o.MaxSleep == 0 {
		o.MaxSleep = DefaultMaxSleep
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	return o
}

// Message is what a trace_printk or puts call printed.
type Message struct {
	Helper jit.HelperID // HelperTracePrintk or HelperPuts
	Caller uint64       // the GPU thread's global linear index
	Text   string
	Time   time.Time // when the host answered
}

// Counters are a Server's totals.
type Counters struct {
	Served   uint64 // requests answered (rejected ones included)
	Late     uint64 // answered after their GPU thread gave up (timed out)
	Rejected uint64 // over the rate limit: answered -EBUSY, not served
	Invalid  uint64 // unknown helper or map, bad payload or format
}

// Server answers one client's mailbox.
type Server struct {
	mb   *shm.Mailbox
	opts Options
	maps map[uint64]HostMap // by jit.HostMapID
	sink func(Message)

	tokens   float64
	last     time.Time
	rejected atomic.Uint64
	invalid  atomic.Uint64

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex // guards closed and final against Counters
	closed bool
	final  Counters // the counters at Stop (the region is gone)
}

// New creates a mailbox and a Server for it; maps are the client's host
// maps by name, sink receives the messages (from the serving goroutine:
// it must not block for long).
func New(opts Options, maps map[string]HostMap, sink func(Message)) (*Server, error) {
	opts = opts.withDefaults()
	mb, err := shm.CreateMailbox(opts.Slots, opts.Timeout)
	if err != nil {
		return nil, fmt.Errorf("hostcall: mailbox: %w", err)
	}
	s := &Server{mb: mb, opts: opts, maps: map[uint64]HostMap{}, sink: sink, tokens: opts.Burst}
	for name, m := range maps {
		s.maps[jit.HostMapID(name)] = m
	}
	return s, nil
}

// Mailbox returns the mailbox, whose region goes into the client's WELCOME.
func (s *Server) Mailbox() *shm.Mailbox { return s.mb }

// Start serves the mailbox on a goroutine until Stop.
func (s *Server) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.mb.Serve(ctx, s.Handle, shm.ServeOptions{Spin: s.opts.Spin, MaxSleep: s.opts.MaxSleep, Backoff: s.backoff})
	}()
}

// Stop ends the serving goroutine (if started), answers what is pending,
// and closes the mailbox. It is safe to call more than once.
func (s *Server) Stop() error {
	var err error
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
		s.mb.Poll(s.Handle)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.final, s.closed = s.counters(), true
		err = s.mb.Close()
	})
	return err
}

// Counters returns the totals so far (after Stop: the final ones).
func (s *Server) Counters() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.final
	}
	return s.counters()
}

func (s *Server) counters() Counters {
	return Counters{Served: s.mb.Served(), Late: s.mb.Late(), Rejected: s.rejected.Load(), Invalid: s.invalid.Load()}
}

// allow takes a token of the rate limit (serving goroutine only).
func (s *Server) allow(now time.Time) bool {
	if !s.last.IsZero() {
		s.tokens = min(s.opts.Burst, s.tokens+now.Sub(s.last).Seconds()*s.opts.Rate)
	}
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// backoff is how long a client over its rate waits for its next token:
// Serve sleeps that long, so such a client costs no more polling than its
// rate (serving goroutine only).
func (s *Server) backoff() time.Duration {
	tokens := min(s.opts.Burst, s.tokens+time.Since(s.last).Seconds()*s.opts.Rate)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / s.opts.Rate * float64(time.Second))
}

// Handle answers one request; it is the shm.Handler of Serve and Poll.
func (s *Server) Handle(r *shm.Request) int64 {
	now := time.Now()
	if !s.allow(now) {
		s.rejected.Add(1)
		return -errBUSY
	}
	ret, err := s.dispatch(r, now)
	if err != nil {
		s.invalid.Add(1)
	}
	return ret
}

var errInvalid = errors.New("invalid request")

// dispatch runs the helper of a request.
func (s *Server) dispatch(r *shm.Request, now time.Time) (int64, error) {
	switch jit.HelperID(r.Helper) {
	case jit.HelperTracePrintk:
		return s.printk(r, now)
	case jit.HelperPuts:
		s.emit(jit.HelperPuts, r.Caller, cstring(r.Payload), now)
		return 0, nil
	case jit.HelperMapLookupElem, jit.HelperMapUpdateElem, jit.HelperMapDeleteElem:
		return s.mapOp(r)
	}
	return -errNOTSUP, errInvalid
}

// printk renders trace_printk(fmt, fmt_size, a1, a2, a3): the payload
// is the format, the values are args[2..4]. It returns the message's
// length, as bpf_trace_printk does.
func (s *Server) printk(r *shm.Request, now time.Time) (int64, error) {
	text, err := Format(cstring(r.Payload), r.Args[2:5])
	if err != nil {
		s.emit(jit.HelperTracePrintk, r.Caller, "(bad trace_printk format: "+err.Error()+")", now)
		return -errINVAL, err
	}
	s.emit(jit.HelperTracePrintk, r.Caller, text, now)
	return int64(len(text)), nil
}

func (s *Server) emit(h jit.HelperID, caller uint64, text string, now time.Time) {
	if s.sink != nil {
		s.sink(Message{Helper: h, Caller: caller, Text: text, Time: now})
	}
}

// mapOp serves a host-map helper: args = (map index, r2, r3, r4, map id);
// the payload is the key, then (update) the value.
func (s *Server) mapOp(r *shm.Request) (int64, error) {
	m := s.maps[r.Args[4]]
	if m == nil {
		return -errNOENT, errInvalid
	}
	ks, vs := m.Sizes()
	n := ks
	if jit.HelperID(r.Helper) == jit.HelperMapUpdateElem {
		n += vs
	}
	if len(r.Payload) != n {
		return -errINVAL, errInvalid // the GPU code sends exactly the key (and value)
	}
	key, val := r.Payload[:ks], r.Payload[ks:]
	switch jit.HelperID(r.Helper) {
	case jit.HelperMapLookupElem:
		return m.Lookup(key), nil
	case jit.HelperMapUpdateElem:
		return m.Update(key, val, r.Args[3]), nil
	}
	return m.Delete(key), nil
}

// cstring is b up to its first NUL.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
