package shm

import (
	"errors"
	"sync/atomic"
	"testing"
	"unsafe"
)

// lie writes what a hostile producer may write into a ring's shared bytes.
type lie struct {
	head  uint64            // head (0: leave)
	drops map[uint64]uint32 // slot → slot_drops
	seq   map[uint64]uint64 // slot → seq
	len   map[uint64]uint32 // slot → len
}

func (l lie) write(g *Ring) {
	if l.head != 0 {
		atomic.StoreUint64(g.head(), l.head)
	}
	for s, v := range l.drops {
		atomic.StoreUint32(g.slotDrops(s), v)
	}
	for s, v := range l.len {
		atomic.StoreUint32((*uint32)(unsafe.Add(g.slot(s), 8)), v)
	}
	for s, v := range l.seq {
		atomic.StoreUint64((*uint64)(g.slot(s)), v)
	}
}

// TestRingHostileProducer: a producer that breaks an invariant of the ring
// stops its consumer at once, with the invariant named, whatever the rest
// of the ring says.
func TestRingHostileProducer(t *testing.T) {
	const slots = 4
	every := func(v uint32) map[uint64]uint32 {
		m := map[uint64]uint32{}
		for s := uint64(0); s < slots; s++ {
			m[s] = v
		}
		return m
	}
	tests := []struct {
		name      string
		lie       lie
		want      Violation
		delivered int
	}{
		{"head far ahead, every slot marked dropped", lie{head: 1 << 33, drops: every(1 << 31)}, BadHead, 2},
		{"head at the top", lie{head: ^uint64(0)}, BadHead, 2},
		{"more drop marks than tickets", lie{head: 3, drops: map[uint64]uint32{2: 3}}, BadDrops, 2},
		{"acked beyond drops", lie{head: 3, drops: map[uint64]uint32{2: ^uint32(0)}}, BadDrops, 2},
		{"seq of another slot", lie{seq: map[uint64]uint64{1: 7}}, BadSeq, 1},
		{"seq of a later lap", lie{seq: map[uint64]uint64{1: 1 + slots + 1}}, BadSeq, 1},
		{"length past the slot", lie{len: map[uint64]uint32{1: 1000}}, BadLength, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRing(t, 32, slots)
			g.Produce(1, []byte("a"))
			g.Produce(1, []byte("b"))
			tt.lie.write(g)
			c := g.NewConsumer(ConsumerOptions{})
			n := c.Read(1<<20, func(Record) {})
			var v *ViolationError
			if !errors.As(c.Err(), &v) || v.Reason != tt.want {
				t.Fatalf("Err() = %v, want the %s invariant", c.Err(), tt.want)
			}
			if n != tt.delivered {
				t.Fatalf("delivered %d, want %d", n, tt.delivered)
			}
			if c.Read(0, func(Record) { t.Fatal("read after a violation") }) != 0 || c.Drain(1<<20, nil) {
				t.Fatal("the consumer went on after a violation")
			}
			if tt.want == BadLength && c.Stats().Corrupt != 1 {
				t.Fatalf("corrupt %d, want 1", c.Stats().Corrupt)
			}
		})
	}
}

// TestRingReadBoundsTickets: a producer that keeps within the invariants
// but takes tickets only to drop them (head a lap beyond the consumer,
// every slot's mark set) costs one Read at most max tickets (a bound on
// delivered records only would let Read resolve them all).
func TestRingReadBoundsTickets(t *testing.T) {
	const slots, lapsAhead = 64, 1000
	g := newRing(t, 32, slots)
	drops := map[uint64]uint32{}
	for s := uint64(0); s < slots; s++ {
		drops[s] = lapsAhead
	}
	lie{head: slots * lapsAhead, drops: drops}.write(g)
	c := g.NewConsumer(ConsumerOptions{})
	for poll := 1; poll <= 3; poll++ {
		c.Read(100, func(Record) { t.Fatal("nothing was published") })
		if got := c.Position(); got != uint64(100*poll) {
			t.Fatalf("poll %d: consumer at ticket %d, want %d (100 tickets per Read)", poll, got, 100*poll)
		}
	}
	if c.Err() != nil {
		t.Fatalf("Err() = %v for a ring within its invariants", c.Err())
	}
}

// TestRingDrain: a gone producer's ring is resolved at once: published
// records abandoned, taken but unpublished tickets stalled, so that
// produced = delivered + dropped + stalled + abandoned exactly.
func TestRingDrain(t *testing.T) {
	g := newRing(t, 32, 8)
	for i := 0; i < 5; i++ {
		g.Produce(1, []byte{byte(i)})
	}
	atomic.AddUint64(g.head(), 1) // a producer that died after taking a ticket
	g.Produce(1, []byte("x"))
	c := g.NewConsumer(ConsumerOptions{})
	if n := c.Read(2, func(Record) {}); n != 2 {
		t.Fatalf("Read(2) = %d", n)
	}
	if c.Drain(3, nil) {
		t.Fatal("Drain(3) of 5 tickets left reported done")
	}
	if !c.Drain(100, nil) {
		t.Fatal("Drain did not resolve the ring")
	}
	st := c.Stats()
	if st.Delivered != 2 || st.Abandoned != 4 || st.Stalled != 1 {
		t.Fatalf("stats %+v, want 2 delivered, 4 abandoned, 1 stalled", st)
	}
	// With a callback, Drain delivers what it finds past a dead ticket.
	atomic.AddUint64(g.head(), 1)
	g.Produce(1, []byte("y"))
	var got []byte
	if !c.Drain(100, func(r Record) { got = append(got, r.Payload...) }) || string(got) != "y" {
		t.Fatalf("Drain with a callback delivered %q", got)
	}
	if st := c.Stats(); st.Delivered != 3 || st.Stalled != 2 {
		t.Fatalf("stats %+v, want 3 delivered, 2 stalled", st)
	}
	if c.Position() != g.Stats().Head {
		t.Fatalf("consumer at %d, head %d", c.Position(), g.Stats().Head)
	}
}
