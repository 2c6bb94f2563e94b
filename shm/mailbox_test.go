package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newMailbox(t *testing.T, slots uint32, timeout time.Duration) *Mailbox {
	t.Helper()
	m, err := CreateMailbox(slots, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func serve(t *testing.T, m *Mailbox, h Handler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Serve(ctx, h, ServeOptions{}) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v", err)
		}
	}
}

func TestMailboxCalls(t *testing.T) {
	m := newMailbox(t, 4, 2*time.Second)
	var mu sync.Mutex
	var printed []string
	stop := serve(t, m, func(r *Request) int64 {
		switch r.Helper {
		case 6: // trace_printk: returns bytes "printed"
			mu.Lock()
			printed = append(printed, string(r.Payload))
			mu.Unlock()
			return int64(len(r.Payload))
		case 2:
			return int64(r.Args[0] + r.Args[1]*r.Args[4] + r.Caller)
		}
		return -22
	})
	defer stop()
	tests := []struct {
		name    string
		helper  uint32
		args    [5]uint64
		payload string
		caller  uint64
		want    int64
	}{
		{"printk", 6, [5]uint64{}, "hello %d\n", 0, 9},
		{"args and caller", 2, [5]uint64{1, 2, 0, 0, 10}, "", 100, 121},
		{"unknown helper", 99, [5]uint64{}, "", 7, -22},
		{"full payload", 6, [5]uint64{}, string(make([]byte, MailboxPayload)), 3, MailboxPayload},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ret, err := m.Call(tc.helper, tc.args, []byte(tc.payload), tc.caller)
			if err != nil || ret != tc.want {
				t.Fatalf("Call = %d, %v; want %d", ret, err, tc.want)
			}
		})
	}
	if _, err := m.Call(6, [5]uint64{}, make([]byte, MailboxPayload+1), 0); err == nil {
		t.Fatal("oversize payload accepted")
	}
	// Many concurrent callers on few slots: every call gets its own answer.
	var wg sync.WaitGroup
	for c := uint64(0); c < 16; c++ {
		wg.Add(1)
		go func(c uint64) {
			defer wg.Done()
			for i := uint64(0); i < 200; i++ {
				ret, err := m.Call(2, [5]uint64{i, c, 0, 0, 1000}, nil, c)
				if want := int64(i + c*1000 + c); err != nil || ret != want {
					t.Errorf("caller %d call %d: %d, %v; want %d", c, i, ret, err, want)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	if m.Served() < 16*200 {
		t.Fatalf("served %d", m.Served())
	}
}

func TestMailboxTimeoutAndAbandonedSlot(t *testing.T) {
	m := newMailbox(t, 1, 20*time.Millisecond)
	// Nobody serves: the requester gives up with ETIMEDOUT.
	ret, err := m.Call(6, [5]uint64{}, []byte("lost"), 0)
	if ret != -ETIMEDOUT || !errors.Is(err, ErrMailboxTimeout) {
		t.Fatalf("Call = %d, %v", ret, err)
	}
	// The only slot still owes an answer, so a second request cannot claim
	// it (the host may be reading it) and times out too.
	if ret, _ := m.Call(6, [5]uint64{}, []byte("second"), 0); ret != -ETIMEDOUT {
		t.Fatalf("second Call = %d", ret)
	}
	// The host answers the abandoned request late; nobody reads that answer,
	// and the slot is usable again.
	var seen []string
	if n := m.Poll(func(r *Request) int64 { seen = append(seen, string(r.Payload)); return 1 }); n != 1 || seen[0] != "lost" {
		t.Fatalf("Poll served %d: %q", n, seen)
	}
	if m.Late() != 1 {
		t.Fatalf("late answers %d, want 1", m.Late())
	}
	stop := serve(t, m, func(r *Request) int64 { return 42 })
	defer stop()
	if ret, err := m.Call(1, [5]uint64{}, nil, 0); ret != 42 || err != nil {
		t.Fatalf("after recovery: %d, %v", ret, err)
	}
	if m.Late() != 1 {
		t.Fatalf("an answered request counted late: %d", m.Late())
	}
}

func TestMailboxBadPayloadLength(t *testing.T) {
	m := newMailbox(t, 1, time.Second)
	// A requester writes a payload length past the slot.
	s := m.slot(0)
	*field32(s, mbPayloadLen) = 5000
	*field64(s, mbReq) = 1
	var n int
	m.Poll(func(r *Request) int64 { n = len(r.Payload); return 0 })
	if n != MailboxPayload {
		t.Fatalf("host read %d payload bytes, want the clamp %d", n, MailboxPayload)
	}
}

func TestMailboxLockBlock(t *testing.T) {
	m := newMailbox(t, 3, 5*time.Millisecond)
	b := m.LockBlock()
	if len(b) != MailboxLocksHeader || m.LockBlockSize() != MailboxLocksHeader+3*MailboxLockSize {
		t.Fatalf("lock block header %d bytes, size %d", len(b), m.LockBlockSize())
	}
	if n, ns := binary.LittleEndian.Uint32(b[MailboxLocksSlots:]), binary.LittleEndian.Uint64(b[MailboxLocksTimeout:]); n != 3 || ns != uint64(5*time.Millisecond) {
		t.Fatalf("lock block: %d slots, timeout %d ns", n, ns)
	}
}

// TestMailboxAnswerIsPendingValue: an answer equal to the value requesters
// write into ret is still returned (the requester reads ret again).
func TestMailboxAnswerIsPendingValue(t *testing.T) {
	m := newMailbox(t, 1, 2*time.Second)
	stop := serve(t, m, func(r *Request) int64 { return MailboxRetPending })
	defer stop()
	if ret, err := m.Call(1, [5]uint64{}, nil, 0); ret != MailboxRetPending || err != nil {
		t.Fatalf("Call = %#x, %v", ret, err)
	}
	if w := atomic.LoadUint32(field32(m.slot(0), mbWaiting)); w != 1 {
		t.Fatalf("waiting = %d after an answered request, want 1", w)
	}
}

// TestMailboxCountersAreTheHosts: requesters can write the region's served
// and late words; the host's counters are its own (guards against a
// requester that stores 2^63 there making the collector report it).
func TestMailboxCountersAreTheHosts(t *testing.T) {
	m := newMailbox(t, 2, time.Second)
	*field64(m.slot(0), mbReq) = 1 // one request, its requester gone (lock 0)
	atomic.StoreUint64(m.r.u64(offMboxServed), 1<<63)
	atomic.StoreUint64(m.r.u64(offMboxLate), 1<<63)
	if n := m.Poll(func(*Request) int64 { return 0 }); n != 1 {
		t.Fatalf("Poll served %d, want 1", n)
	}
	if m.Served() != 1 || m.Late() != 1 {
		t.Fatalf("served %d, late %d; want 1, 1", m.Served(), m.Late())
	}
	if got := atomic.LoadUint64(m.r.u64(offMboxServed)); got != 1 {
		t.Fatalf("region's served word %d, want the host's count 1", got)
	}
}
