package shm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mailbox slot field offsets.
const (
	mbWaiting    = 0
	mbHelper     = 4
	mbReq        = 8
	mbAck        = 16
	mbRet        = 24
	mbArgs       = 32
	mbPayloadLen = 72
	mbFlags      = 76
	mbCaller     = 80
	mbPayload    = 88
)

// DefaultMailboxTimeout is how long a GPU thread waits for the host by
// default.
const DefaultMailboxTimeout = time.Millisecond

// Mailbox is a mapped mailbox region: fixed slots through which GPU threads
// post host-call requests and wait, bounded, for the answer.
type Mailbox struct {
	r     *Region
	slots uint64
	data  unsafe.Pointer
	locks lockWords // Call's lock block
	// served and late are the host's own counts: the region's copies are
	// for the requesters to read, and any of them may overwrite them.
	served, late atomic.Uint64
}

// CreateMailbox creates a mailbox with slots slots; timeout is how long a
// requester waits for an answer (0: DefaultMailboxTimeout).
func CreateMailbox(slots uint32, timeout time.Duration) (*Mailbox, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("shm: mailbox timeout %v is negative", timeout)
	}
	if timeout == 0 {
		timeout = DefaultMailboxTimeout
	}
	r, err := Create(Spec{Kind: KindMailbox, MaxEntries: slots})
	if err != nil {
		return nil, err
	}
	atomic.StoreUint64(r.u64(offMboxTimeout), uint64(timeout))
	return NewMailbox(r)
}

// NewMailbox wraps a mapped mailbox region.
func NewMailbox(r *Region) (*Mailbox, error) {
	h := r.Header()
	if h.Kind != KindMailbox {
		return nil, fmt.Errorf("shm: region is a %v, not a mailbox", h.Kind)
	}
	n := uint64(h.MaxEntries)
	return &Mailbox{r: r, slots: n, data: unsafe.Add(r.base, DataOffset), locks: newLockWords(n)}, nil
}

// Region returns the mailbox's region.
func (m *Mailbox) Region() *Region { return m.r }

// Close closes the mailbox's region.
func (m *Mailbox) Close() error { return m.r.Close() }

// SetTimeout sets how long requesters wait for the host (the creator's
// choice; a CPU requester may lengthen it for itself, e.g. a test on a
// loaded machine).
func (m *Mailbox) SetTimeout(d time.Duration) {
	atomic.StoreUint64(m.r.u64(offMboxTimeout), uint64(d))
}

// Timeout returns how long a requester waits for the host.
func (m *Mailbox) Timeout() time.Duration {
	return time.Duration(atomic.LoadUint64(m.r.u64(offMboxTimeout)))
}

// Served returns how many requests the host has answered.
func (m *Mailbox) Served() uint64 { return m.served.Load() }

func (m *Mailbox) slot(i uint64) unsafe.Pointer { return unsafe.Add(m.data, i*MailboxSlotSize) }

func field32(s unsafe.Pointer, off uintptr) *uint32 { return (*uint32)(unsafe.Add(s, off)) }
func field64(s unsafe.Pointer, off uintptr) *uint64 { return (*uint64)(unsafe.Add(s, off)) }

// Request is one host-call request as the host sees it. Payload is a view
// into the slot, valid only during the handler.
type Request struct {
	Slot    int       // slot index
	Seq     uint64    // request sequence of this slot
	Helper  uint32    // helper id
	Args    [5]uint64 // r1..r5 of the call
	Caller  uint64    // global linear thread index of the caller
	Payload []byte    // payload bytes (format string etc.)
}

// Handler answers one request; its result becomes the helper's return value.
type Handler func(*Request) int64

// Poll answers every pending request once and returns how many it answered.
// It must not run concurrently with another Poll or Serve on the same
// mailbox.
func (m *Mailbox) Poll(h Handler) int {
	n, late := 0, uint64(0)
	var req Request
	for i := uint64(0); i < m.slots; i++ {
		s := m.slot(i)
		r := atomic.LoadUint64(field64(s, mbReq))
		if r == atomic.LoadUint64(field64(s, mbAck)) {
			continue
		}
		req = Request{Slot: int(i), Seq: r, Helper: atomic.LoadUint32(field32(s, mbHelper)),
			Caller: atomic.LoadUint64(field64(s, mbCaller))}
		for a := range req.Args {
			req.Args[a] = atomic.LoadUint64(field64(s, mbArgs+uintptr(8*a)))
		}
		ln := atomic.LoadUint32(field32(s, mbPayloadLen))
		if ln > MailboxPayload {
			ln = MailboxPayload // a bad requester cannot make us read past the slot
		}
		req.Payload = unsafe.Slice((*byte)(unsafe.Add(s, mbPayload)), ln)
		if atomic.LoadUint32(field32(s, mbWaiting)) == 0 {
			late++ // the requester gave up waiting (doc.go)
		}
		ret := h(&req)
		// Counted before the answer is published: a requester that
		// sees its answer also sees it counted.
		m.served.Add(1)
		atomic.StoreUint64(field64(s, mbRet), uint64(ret))
		atomic.StoreUint64(field64(s, mbAck), r)
		n++
	}
	if n > 0 {
		atomic.StoreUint64(m.r.u64(offMboxServed), m.served.Load())
	}
	if late > 0 {
		atomic.StoreUint64(m.r.u64(offMboxLate), m.late.Add(late))
	}
	return n
}

// Late returns how many requests the host answered after their requester
// had given up waiting (timed out).
func (m *Mailbox) Late() uint64 { return m.late.Load() }

// ServeOptions tune Serve's polling.
type ServeOptions struct {
	// Spin is how long Serve keeps polling without sleeping after the last
	// request (default 50 µs): a busy mailbox is answered in microseconds.
	Spin time.Duration
	// MaxSleep caps the idle sleep, which doubles from 1 µs (default 200 µs).
	MaxSleep time.Duration
	// Backoff, if set, is asked after every poll that answered requests
	// how long to sleep before the next (0: poll at once; at most 10 ms
	// is slept, so ctx is still checked), so that a handler that
	// rate-limits its requesters also bounds the polling they cause.
	Backoff func() time.Duration
}

// maxBackoff caps one Backoff sleep.
const maxBackoff = 10 * time.Millisecond

// Serve answers requests with h until ctx is done, then returns ctx.Err().
// It polls: busy-spinning (with runtime.Gosched) while requests arrive, then
// sleeping with exponential backoff up to MaxSleep when idle. The sleep is
// nanosleep(2), not a Go timer: on a 2-core Linux 6.x VM with Go 1.26 a
// 250 µs timer fired after 1.07-3.6 ms (200 tries), nanosleep after
// 0.31-0.38 ms, and a GPU thread waits only the mailbox timeout. It holds
// an OS thread while asleep; ctx is checked after each sleep.
func (m *Mailbox) Serve(ctx context.Context, h Handler, opts ServeOptions) error {
	if opts.Spin <= 0 {
		opts.Spin = 50 * time.Microsecond
	}
	if opts.MaxSleep <= 0 {
		opts.MaxSleep = 200 * time.Microsecond
	}
	last := time.Now()
	sleep := time.Microsecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		atomic.StoreUint64(m.r.u64(offMboxBeat), uint64(monotonicNS()))
		if m.Poll(h) > 0 {
			last, sleep = now, time.Microsecond
			if opts.Backoff != nil {
				if d := min(opts.Backoff(), maxBackoff); d > 0 {
					ts := unix.NsecToTimespec(d.Nanoseconds())
					_ = unix.Nanosleep(&ts, nil)
				}
			}
			continue
		}
		if now.Sub(last) < opts.Spin {
			runtime.Gosched()
			continue
		}
		ts := unix.NsecToTimespec(sleep.Nanoseconds())
		_ = unix.Nanosleep(&ts, nil) // EINTR: poll early
		if sleep *= 2; sleep > opts.MaxSleep {
			sleep = opts.MaxSleep
		}
	}
}

func monotonicNS() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// ErrMailboxTimeout is returned by Call when the host did not answer in time;
// GPU code returns -ETIMEDOUT (-110) in the same case.
var ErrMailboxTimeout = errors.New("shm: mailbox: host did not answer in time (ETIMEDOUT)")

// Call posts a request the way GPU code does (the requester algorithm of the
// package comment, with the lock block in process memory) and waits for
// the answer until the mailbox timeout. It is the reference requester for
// tests, the interpreter and CPU producers; they must not share a mailbox
// with GPU requesters, whose lock block is another.
func (m *Mailbox) Call(helper uint32, args [5]uint64, payload []byte, caller uint64) (int64, error) {
	if len(payload) > MailboxPayload {
		return 0, fmt.Errorf("shm: mailbox payload of %d bytes exceeds %d", len(payload), MailboxPayload)
	}
	deadline := time.Now().Add(m.Timeout())
	var i, r uint64
claim:
	for {
		for k := uint64(0); k < m.slots; k++ {
			var ok bool
			i = (caller + k) % m.slots
			if r, ok = m.claim(i); ok {
				break claim
			}
		}
		if time.Now().After(deadline) {
			return -ETIMEDOUT, ErrMailboxTimeout
		}
		runtime.Gosched()
	}
	s := m.slot(i)
	atomic.StoreUint32(field32(s, mbWaiting), 1)
	atomic.StoreUint32(field32(s, mbHelper), helper)
	atomic.StoreUint64(field64(s, mbRet), MailboxRetPending)
	for a, v := range args {
		atomic.StoreUint64(field64(s, mbArgs+uintptr(8*a)), v)
	}
	atomic.StoreUint32(field32(s, mbPayloadLen), uint32(len(payload)))
	atomic.StoreUint32(field32(s, mbFlags), 0)
	atomic.StoreUint64(field64(s, mbCaller), caller)
	copy(unsafe.Slice((*byte)(unsafe.Add(s, mbPayload)), MailboxPayload), payload)
	atomic.StoreUint64(field64(s, mbReq), r+1)
	for spins := 0; ; spins++ {
		if atomic.LoadUint64(field64(s, mbAck)) == r+1 {
			ret := int64(atomic.LoadUint64(field64(s, mbRet)))
			m.release(i, r+1, false)
			return ret, nil
		}
		if spins&63 == 63 {
			if time.Now().After(deadline) {
				atomic.StoreUint32(field32(s, mbWaiting), 0)
				m.release(i, r+1, true)
				return -ETIMEDOUT, ErrMailboxTimeout
			}
			runtime.Gosched()
		}
	}
}
