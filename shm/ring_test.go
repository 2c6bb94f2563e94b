package shm

import (
	"bytes"
	"testing"
	"time"
)

func newRing(t testing.TB, slotSize, slots uint32) *Ring {
	t.Helper()
	g, err := CreateRing(slotSize, slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

type got struct {
	ticket uint64
	typ    uint32
	data   string
}

func readAll(c *Consumer) []got {
	var out []got
	c.Read(0, func(r Record) { out = append(out, got{r.Ticket, r.Type, string(r.Payload)}) })
	return out
}

func TestRingProduceConsumeWrap(t *testing.T) {
	g := newRing(t, 32, 4) // 16-byte payloads
	c := g.NewConsumer(ConsumerOptions{})
	for lap := 0; lap < 5; lap++ {
		for i := 0; i < 3; i++ {
			msg := []byte{byte('a' + lap), byte('0' + i)}
			if r := g.Produce(uint32(lap*10+i), msg); r != Published {
				t.Fatalf("lap %d record %d: %v", lap, i, r)
			}
		}
		out := readAll(c)
		if len(out) != 3 {
			t.Fatalf("lap %d: read %d records, want 3", lap, len(out))
		}
		for i, r := range out {
			want := got{uint64(lap*3 + i), uint32(lap*10 + i), string([]byte{byte('a' + lap), byte('0' + i)})}
			if r != want {
				t.Fatalf("lap %d record %d: got %+v, want %+v", lap, i, r, want)
			}
		}
	}
	if s := g.Stats(); s.Head != 15 || s.Tail != 15 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRingFullDropsAndOversize(t *testing.T) {
	g := newRing(t, 32, 4)
	results := map[ProduceResult]int{}
	for i := 0; i < 10; i++ {
		results[g.Produce(1, []byte{byte(i)})]++
	}
	results[g.Produce(1, make([]byte, 17))]++
	if results[Published] != 4 || results[Dropped] != 6 || results[Oversize] != 1 {
		t.Fatalf("results %v", results)
	}
	if s := g.Stats(); s.Dropped != 6 || s.Oversize != 1 || s.Head != 4 {
		t.Fatalf("stats %+v: a full ring must drop without taking a ticket", s)
	}
	c := g.NewConsumer(ConsumerOptions{})
	out := readAll(c)
	if len(out) != 4 || out[3].data != "\x03" {
		t.Fatalf("read %+v", out)
	}
	// Room again after the consumer stored its tail.
	if r := g.Produce(1, []byte("x")); r != Published {
		t.Fatalf("after draining: %v", r)
	}
	if g.Produce(1, make([]byte, 16)) != Published {
		t.Fatal("a payload of exactly slot size - 16 must fit")
	}
}

// TestRingRacingOvershoot drives the interleavings that only concurrent
// producers reach: producers that loaded the same tail and head all take
// tickets, so some tickets are dropped (holes), and a hole of a later lap
// must not be mistaken for an in-progress ticket of an earlier one.
func TestRingRacingOvershoot(t *testing.T) {
	g := newRing(t, 32, 4)
	c := g.NewConsumer(ConsumerOptions{})
	// Five racers all saw tail 0, head 0.
	var tickets []uint64
	var res []ProduceResult
	for i := 0; i < 5; i++ {
		tk, r := g.reserve(0, 0)
		tickets, res = append(tickets, tk), append(res, r)
	}
	if res[3] != Published || res[4] != Dropped || tickets[4] != 4 {
		t.Fatalf("tickets %v results %v", tickets, res)
	}
	// Tickets 1..3 are published, ticket 0 is still being written, and the
	// hole of ticket 4 sits in the same slot as ticket 0.
	for _, tk := range tickets[1:4] {
		g.publish(tk, 2, []byte{byte(tk)})
	}
	if out := readAll(c); len(out) != 0 {
		t.Fatalf("consumer skipped the in-progress ticket 0: %+v", out)
	}
	g.publish(0, 2, []byte{0})
	out := readAll(c)
	if len(out) != 4 {
		t.Fatalf("read %+v, want tickets 0..3", out)
	}
	if c.Position() != 5 || c.Stats().Skipped != 1 {
		t.Fatalf("position %d stats %+v: the hole of ticket 4 must be skipped", c.Position(), c.Stats())
	}
	// The slot keeps working afterwards.
	if r := g.Produce(3, []byte("next")); r != Published {
		t.Fatal(r)
	}
	if out := readAll(c); len(out) != 1 || out[0].ticket != 5 || out[0].data != "next" {
		t.Fatalf("after the hole: %+v", out)
	}
}

func TestRingStalledTicket(t *testing.T) {
	g := newRing(t, 32, 4)
	now := time.Unix(100, 0)
	c := g.NewConsumer(ConsumerOptions{StallTimeout: time.Second, Now: func() time.Time { return now }})
	tk, r := g.reserve(0, 0) // a producer dies after taking its ticket
	if r != Published || tk != 0 {
		t.Fatal(tk, r)
	}
	if g.Produce(1, []byte("b")) != Published {
		t.Fatal("second record")
	}
	if out := readAll(c); len(out) != 0 {
		t.Fatalf("read %+v before the stall timeout", out)
	}
	now = now.Add(999 * time.Millisecond)
	if out := readAll(c); len(out) != 0 {
		t.Fatalf("read %+v before the stall timeout", out)
	}
	now = now.Add(time.Millisecond)
	out := readAll(c)
	if len(out) != 1 || out[0].data != "b" {
		t.Fatalf("read %+v after the stall timeout", out)
	}
	if c.Stats().Stalled != 1 || g.Stats().Stalled != 1 {
		t.Fatalf("stalled not counted: %+v %+v", c.Stats(), g.Stats())
	}
}

func TestRingReadMax(t *testing.T) {
	g := newRing(t, 32, 8)
	for i := 0; i < 5; i++ {
		g.Produce(0, []byte{byte(i)})
	}
	c := g.NewConsumer(ConsumerOptions{})
	var b bytes.Buffer
	if n := c.Read(2, func(r Record) { b.Write(r.Payload) }); n != 2 {
		t.Fatalf("Read(2) = %d", n)
	}
	if n := c.Read(0, func(r Record) { b.Write(r.Payload) }); n != 3 {
		t.Fatalf("Read(0) = %d", n)
	}
	if b.String() != "\x00\x01\x02\x03\x04" {
		t.Fatalf("order %q", b.String())
	}
	// A second consumer (after a collector restart) resumes at the tail.
	g.Produce(0, []byte{5})
	c2 := g.NewConsumer(ConsumerOptions{})
	if out := readAll(c2); len(out) != 1 || out[0].ticket != 5 {
		t.Fatalf("resumed consumer read %+v", out)
	}
}
