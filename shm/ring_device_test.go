package shm

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDeviceReserverAccounting runs producers with device-side reservation
// against a live consumer on rings small enough to fill, and checks that
// every record is delivered whole or counted as dropped, that late drops
// are resolved through the head mirror, and that nothing stalls.
func TestDeviceReserverAccounting(t *testing.T) {
	tests := []struct {
		name      string
		slots     uint32
		producers int
		each      int
		tick      uint64 // clock step per read: >= RingDeviceRefreshNS refreshes every time
	}{
		{"tiny ring", 2, 4, 2000, 300},
		{"tiny ring, refresh every time", 2, 4, 2000, 5000},
		{"small ring", 8, 8, 2000, 300},
		{"small ring, refresh every time", 8, 8, 2000, 5000},
		{"roomy ring", 1024, 4, 2000, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := CreateRing(64, tt.slots)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			var clock atomic.Uint64
			d := g.NewDeviceReserver(func() uint64 { return clock.Add(tt.tick) })
			var wg sync.WaitGroup
			var offered, published atomic.Uint64
			for p := 0; p < tt.producers; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					buf := make([]byte, 40)
					for i := 0; i < tt.each; i++ {
						v := uint64(p)<<32 | uint64(i)
						for k := 0; k < 5; k++ {
							binary.LittleEndian.PutUint64(buf[8*k:], v)
						}
						offered.Add(1)
						if d.Produce(7, buf) == Published {
							published.Add(1)
						}
					}
				}(p)
			}
			c := g.NewConsumer(ConsumerOptions{StallTimeout: time.Minute})
			check := func(r Record) {
				if r.Type != 7 || len(r.Payload) != 40 {
					t.Errorf("ticket %d: type %d len %d", r.Ticket, r.Type, len(r.Payload))
					return
				}
				v := binary.LittleEndian.Uint64(r.Payload)
				for k := 1; k < 5; k++ {
					if w := binary.LittleEndian.Uint64(r.Payload[8*k:]); w != v {
						t.Errorf("ticket %d: half-written record (%#x vs %#x)", r.Ticket, w, v)
					}
				}
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
		loop:
			for {
				select {
				case <-done:
					break loop
				default:
					c.Read(0, check)
				}
			}
			d.Flush()
			for i := 0; i < 100 && c.Read(0, check) > 0; i++ {
			}
			st, cs := g.Stats(), c.Stats()
			if cs.Delivered != published.Load() {
				t.Errorf("delivered %d, published %d", cs.Delivered, published.Load())
			}
			if cs.Delivered+st.Dropped != offered.Load() {
				t.Errorf("delivered %d + dropped %d (device %d) != offered %d", cs.Delivered, st.Dropped, st.DeviceDropped, offered.Load())
			}
			if cs.Skipped != st.Dropped-st.DeviceDropped {
				t.Errorf("consumer skipped %d late drops, ring counted %d", cs.Skipped, st.Dropped-st.DeviceDropped)
			}
			if st.DeviceDropped != d.DeviceDropped() {
				t.Errorf("host mirror %d, device count %d", st.DeviceDropped, d.DeviceDropped())
			}
			if cs.Stalled != 0 || cs.Corrupt != 0 {
				t.Errorf("stalled %d corrupt %d", cs.Stalled, cs.Corrupt)
			}
			t.Logf("offered %d delivered %d dropped %d (device %d, late %d)", offered.Load(), cs.Delivered, st.Dropped, st.DeviceDropped, cs.Skipped)
		})
	}
}

// TestConsumerStallWithLaggingHead: with device-side reservation the host
// head lags, so a ticket whose producer died is recognised by a later
// published ticket and skipped after the stall timeout.
func TestConsumerStallWithLaggingHead(t *testing.T) {
	g, err := CreateRing(64, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	d := g.NewDeviceReserver(func() uint64 { return 0 })
	atomic.AddUint64(d.word(RingDeviceHead), 1) // ticket 0: taken, producer dies
	if d.Produce(1, []byte("x")) != Published {
		t.Fatal("ticket 1 not published")
	}
	now := time.Unix(0, 0)
	c := g.NewConsumer(ConsumerOptions{StallTimeout: time.Second, Now: func() time.Time { return now }})
	if n := c.Read(0, func(Record) {}); n != 0 {
		t.Fatalf("delivered %d past an unresolved ticket", n)
	}
	now = now.Add(2 * time.Second)
	var got []uint64
	c.Read(0, func(r Record) { got = append(got, r.Ticket) })
	if len(got) != 1 || got[0] != 1 || c.Stats().Stalled != 1 {
		t.Fatalf("got %v, stalled %d; want ticket 1 after one stall", got, c.Stats().Stalled)
	}
	// An empty ring with the same lagging head is not a stall.
	now = now.Add(time.Hour)
	if c.Read(0, func(Record) {}); c.Stats().Stalled != 1 {
		t.Fatalf("an empty ring counted as a stall")
	}
}

// TestDeviceReserverLateDrop: producers racing past the pre-check overshoot
// the ring; the overshooting ticket is a late drop that raises the head
// mirror and its slot's drop counter, and the consumer resolves it.
func TestDeviceReserverLateDrop(t *testing.T) {
	g, err := CreateRing(64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	d := g.NewDeviceReserver(func() uint64 { return 0 })
	for i := 0; i < 3; i++ {
		if d.Produce(1, []byte{byte(i)}) != Published {
			t.Fatalf("record %d not published", i)
		}
	}
	// Three racers take tickets 3..5 between our check and our ticket (6):
	// 3 publishes, 4 and 5 are late drops, and so is ours.
	d.race = func() { atomic.AddUint64(d.word(RingDeviceHead), 3) }
	if r := d.Produce(1, []byte{6}); r != Dropped {
		t.Fatalf("ticket 6: %v, want dropped", r)
	}
	g.publish(3, 1, []byte{3}) // the racers: 3 fits, 4 and 5 overshoot
	d.late(4)
	d.late(5)
	st := g.Stats()
	if st.Head != 7 || st.Dropped != 3 || st.DeviceDropped != 0 {
		t.Fatalf("stats %+v; want head mirror 7, 3 late drops", st)
	}
	c := g.NewConsumer(ConsumerOptions{})
	var got []byte
	c.Read(0, func(r Record) { got = append(got, r.Payload[0]) })
	if string(got) != "\x00\x01\x02\x03" || c.Stats().Skipped != 3 || c.Position() != 7 {
		t.Fatalf("delivered %v, skipped %d, at %d; want 0..3, 3 skipped, at 7", got, c.Stats().Skipped, c.Position())
	}
}

// TestRingDropShards: the shards are distinct 8-byte words of the control
// block that no other control word uses, and DeviceRingDrops sums them.
func TestRingDropShards(t *testing.T) {
	used := map[int]bool{offRingHead: true, offRingTail: true, offRingDropped: true, offRingOversz: true, offRingStalled: true}
	b := make([]byte, DataOffset)
	for k := 0; k < RingDropShards; k++ {
		off := RingDropShard(k)
		if off%8 != 0 || off < HeaderSize || off+8 > DataOffset || used[off] {
			t.Fatalf("shard %d at %d: misplaced or shared", k, off)
		}
		used[off] = true
		b[off] = byte(k + 1)
	}
	if got := DeviceRingDrops(b); got != 136 {
		t.Fatalf("DeviceRingDrops = %d, want 1+2+...+16 = 136", got)
	}
}
