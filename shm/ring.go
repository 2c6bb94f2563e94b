package shm

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Ring is a mapped ring-buffer region: fixed-size slots, many producers, one
// consumer (see the package comment for the algorithm).
type Ring struct {
	r        *Region
	slots    uint64
	mask     uint64
	slotSize uint64
	data     unsafe.Pointer // data area
	drops    unsafe.Pointer // slot_drops[0]
	acked    unsafe.Pointer // slot_acked[0]
}

// ProduceResult says what became of a record offered to a ring.
type ProduceResult int

// Produce results.
const (
	Published ProduceResult = iota // written and visible to the consumer
	Dropped                        // the ring was full; counted in dropped
	Oversize                       // larger than a slot's payload; counted in oversize
)

// String names the result.
func (p ProduceResult) String() string {
	switch p {
	case Published:
		return "published"
	case Dropped:
		return "dropped"
	case Oversize:
		return "oversize"
	}
	return fmt.Sprintf("ProduceResult(%d)", int(p))
}

// RingStats are the counters of a ring's control block.
type RingStats struct {
	Head    uint64 // tickets taken by producers
	Tail    uint64 // tickets resolved by the consumer (as last stored)
	Dropped uint64 // records dropped because the ring was full (DeviceDropped included)
	// DeviceDropped is the part of Dropped that device-side reservation
	// dropped without a ticket (the host mirror; 0 with the host protocol).
	DeviceDropped uint64
	Oversize      uint64 // records rejected as larger than a slot
	Stalled       uint64 // tickets the consumer skipped after the stall timeout
}

// CreateRing creates a ring region of slots slots (a power of two) of
// slotSize bytes each (16-byte slot header included).
func CreateRing(slotSize, slots uint32) (*Ring, error) {
	r, err := Create(Spec{Kind: KindRing, ValueSize: slotSize, MaxEntries: slots})
	if err != nil {
		return nil, err
	}
	return NewRing(r)
}

// RingSize returns the bytes of the region CreateRing(slotSize, slots)
// makes (0: no such ring).
func RingSize(slotSize, slots uint32) uint64 {
	h, err := Spec{Kind: KindRing, ValueSize: slotSize, MaxEntries: slots}.header()
	if err != nil {
		return 0
	}
	return h.RegionSize
}

// NewRing wraps a mapped region of kind KindRing. The ring uses the header
// as it was when the region was mapped, so a peer that scribbles over the
// header later cannot make the ring read outside the region.
func NewRing(r *Region) (*Ring, error) {
	h := r.Header()
	if h.Kind != KindRing {
		return nil, fmt.Errorf("shm: region is a %v, not a ring", h.Kind)
	}
	g := &Ring{r: r, slots: uint64(h.MaxEntries), mask: uint64(h.MaxEntries) - 1, slotSize: uint64(h.Stride)}
	g.data = unsafe.Add(r.base, DataOffset)
	g.drops = unsafe.Add(g.data, g.slots*g.slotSize)
	g.acked = unsafe.Add(g.drops, 4*g.slots)
	return g, nil
}

// Region returns the ring's region.
func (g *Ring) Region() *Region { return g.r }

// Close closes the ring's region.
func (g *Ring) Close() error { return g.r.Close() }

// Slots returns the number of slots.
func (g *Ring) Slots() int { return int(g.slots) }

// MaxPayload returns the largest payload a record may carry.
func (g *Ring) MaxPayload() int { return int(g.slotSize - SlotHeaderSize) }

func (g *Ring) head() *uint64     { return g.r.u64(offRingHead) }
func (g *Ring) tail() *uint64     { return g.r.u64(offRingTail) }
func (g *Ring) dropped() *uint64  { return g.r.u64(offRingDropped) }
func (g *Ring) oversize() *uint64 { return g.r.u64(offRingOversz) }
func (g *Ring) stalled() *uint64  { return g.r.u64(offRingStalled) }

func (g *Ring) slot(t uint64) unsafe.Pointer { return unsafe.Add(g.data, (t&g.mask)*g.slotSize) }
func (g *Ring) slotDrops(t uint64) *uint32   { return (*uint32)(unsafe.Add(g.drops, 4*(t&g.mask))) }
func (g *Ring) slotAcked(t uint64) *uint32   { return (*uint32)(unsafe.Add(g.acked, 4*(t&g.mask))) }

// Stats reads the ring's counters.
func (g *Ring) Stats() RingStats {
	dev := atomic.LoadUint64(g.devDropped())
	return RingStats{
		Head:          atomic.LoadUint64(g.head()),
		Tail:          atomic.LoadUint64(g.tail()),
		Dropped:       atomic.LoadUint64(g.dropped()) + dev,
		DeviceDropped: dev,
		Oversize:      atomic.LoadUint64(g.oversize()),
		Stalled:       atomic.LoadUint64(g.stalled()),
	}
}

// Produce writes one record of the given type. It never blocks; any number of
// goroutines and processes may produce into the same ring at once (but not
// GPU threads at the same time: producers stay on one side of the bus).
func (g *Ring) Produce(typ uint32, payload []byte) ProduceResult {
	if uint64(len(payload)) > g.slotSize-SlotHeaderSize {
		atomic.AddUint64(g.oversize(), 1)
		return Oversize
	}
	tl := atomic.LoadUint64(g.tail())
	t, res := g.reserve(tl, atomic.LoadUint64(g.head()))
	if res == Published {
		g.publish(t, typ, payload)
	}
	return res
}

// reserve runs steps 2 (with tail tl and head h as loaded) to 4 of the
// producer algorithm; on Published the caller owns ticket t.
func (g *Ring) reserve(tl, h uint64) (uint64, ProduceResult) {
	if h-tl >= g.slots {
		atomic.AddUint64(g.dropped(), 1)
		return 0, Dropped
	}
	t := atomic.AddUint64(g.head(), 1) - 1
	if t-tl >= g.slots {
		atomic.AddUint64(g.dropped(), 1)
		atomic.AddUint32(g.slotDrops(t), 1)
		return t, Dropped
	}
	return t, Published
}

// publish runs step 5: it writes the record of ticket t and releases it.
func (g *Ring) publish(t uint64, typ uint32, payload []byte) {
	s := g.slot(t)
	*(*uint32)(unsafe.Add(s, 8)) = uint32(len(payload))
	*(*uint32)(unsafe.Add(s, 12)) = typ
	if len(payload) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Add(s, SlotHeaderSize)), len(payload)), payload)
	}
	atomic.StoreUint64((*uint64)(s), t+1)
}

// ConsumerOptions tune a Consumer.
type ConsumerOptions struct {
	// StallTimeout is how long a taken but unresolved ticket may hold up
	// the consumer before it is skipped and counted as stalled (its producer
	// died mid-record). Default 5 s.
	StallTimeout time.Duration
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time
}

// Consumer reads a ring in ticket order. A ring has exactly one consumer at
// a time; a Consumer is not safe for concurrent use.
type Consumer struct {
	g          *Ring
	pos        uint64
	published  uint64 // tail value last stored
	opts       ConsumerOptions
	stuckAt    uint64
	stuckSince time.Time
	stuck      bool
	draining   bool // in Drain: unresolved tickets are skipped at once
	err        *ViolationError
	stats      ConsumerStats
}

// ConsumerStats count what one Consumer has seen.
type ConsumerStats struct {
	Delivered uint64 // records handed to the callback
	Skipped   uint64 // tickets resolved as dropped
	Stalled   uint64 // tickets skipped after the stall timeout (or by Drain)
	Corrupt   uint64 // records skipped because their length exceeded the slot
	Abandoned uint64 // published records Drain skipped unread (fn nil)
}

// Record is one record as the consumer sees it. Payload points into the
// shared region and is valid only during the callback.
type Record struct {
	Ticket  uint64 // position in the ring's stream
	Type    uint32 // record type set by the producer
	Payload []byte // the payload bytes (a view, not a copy)
}

// NewConsumer returns the ring's consumer, starting at the stored tail.
func (g *Ring) NewConsumer(opts ConsumerOptions) *Consumer {
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := atomic.LoadUint64(g.tail())
	return &Consumer{g: g, pos: t, published: t, opts: opts}
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return c.stats }

// Position returns the next ticket the consumer will resolve.
func (c *Consumer) Position() uint64 { return c.pos }

// Err returns the invariant the ring's producers broke (a
// *ViolationError), or nil. Once it is set the consumer reads no more.
func (c *Consumer) Err() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

// tailBatch is how many tickets the consumer resolves between tail stores.
const tailBatch = 64

// Read hands records to fn in ticket order and returns how many it
// delivered. max (<= 0: no limit) bounds the tickets it resolves, whatever
// became of them (delivered, skipped as dropped, stalled, corrupt), so the
// work of one call is bounded whatever the producers wrote. It returns when
// the ring holds no more complete records, at the bound, or at a violation
// (Err); it never waits.
func (c *Consumer) Read(max int, fn func(Record)) int {
	before := c.stats.Delivered
	c.read(max, fn)
	return int(c.stats.Delivered - before)
}

// Drain resolves up to max (> 0) of the tickets left in the ring without
// waiting, for a ring whose producers are gone: taken tickets that are
// neither published nor provably dropped are counted in Stalled at once;
// published records go to fn, or with fn nil are counted in Abandoned. It
// reports whether every ticket producers took was resolved (false: the
// bound was reached or Err is set).
func (c *Consumer) Drain(max int, fn func(Record)) bool {
	c.draining = true
	defer func() { c.draining = false }()
	return c.read(max, fn) && c.err == nil
}

// read runs the consumer loop; it reports whether it stopped because the
// ring held nothing more to resolve.
func (c *Consumer) read(max int, fn func(Record)) bool {
	defer c.storeTail()
	g := c.g
	for n := 0; c.err == nil && (max <= 0 || n < max); n++ {
		t := c.pos
		s := g.slot(t)
		seq := atomic.LoadUint64((*uint64)(s))
		if seq != t+1 {
			if seq != 0 && (seq > t+1 || (seq-1)&g.mask != t&g.mask) {
				c.violate(BadSeq, t, seq)
				return false
			}
			if !c.resolve(t) {
				return c.err == nil
			}
			continue
		}
		ln := uint64(*(*uint32)(unsafe.Add(s, 8)))
		switch {
		case ln > g.slotSize-SlotHeaderSize:
			c.stats.Corrupt++
			c.advance()
			c.violate(BadLength, t, ln)
			return false
		case fn == nil:
			c.stats.Abandoned++
		default:
			fn(Record{Ticket: t, Type: *(*uint32)(unsafe.Add(s, 12)),
				Payload: unsafe.Slice((*byte)(unsafe.Add(s, SlotHeaderSize)), ln)})
			c.stats.Delivered++
		}
		c.advance()
	}
	return false
}

// resolve decides an unpublished ticket t: it reports whether the consumer
// moved past it.
func (c *Consumer) resolve(t uint64) bool {
	g := c.g
	acked := g.slotAcked(t)
	cnt := atomic.LoadUint32(g.slotDrops(t)) - atomic.LoadUint32(acked)
	h := atomic.LoadUint64(g.head())
	var later uint64
	if h > t {
		if h-t > g.slots+MaxOvershoot {
			c.violate(BadHead, t, h)
			return false
		}
		later = (h - 1 - t) / g.slots
	} else if !g.takenBeyond(t) {
		// Empty. (With device-side reservation head is a mirror that may
		// lag; a later ticket published proves t was taken, so the stall
		// timeout below still applies to a producer that died.)
		c.stuck = false
		return false
	}
	// A mark of a ticket skipped as stalled may show up late: allow those.
	if uint64(cnt) > later+1+c.stats.Stalled {
		c.violate(BadDrops, t, uint64(cnt))
		return false
	}
	if uint64(cnt) > later {
		atomic.StoreUint32(acked, atomic.LoadUint32(acked)+1)
		c.stats.Skipped++
		c.advance()
		return true
	}
	// Ticket t is being written, or its drop is not visible yet.
	now := c.opts.Now()
	if !c.draining && (!c.stuck || c.stuckAt != t) {
		c.stuck, c.stuckAt, c.stuckSince = true, t, now
		return false
	}
	if !c.draining && now.Sub(c.stuckSince) < c.opts.StallTimeout {
		return false
	}
	c.stats.Stalled++
	atomic.StoreUint64(g.stalled(), atomic.LoadUint64(g.stalled())+1)
	c.advance()
	return true
}

func (c *Consumer) advance() {
	c.pos++
	c.stuck = false
	if c.pos-c.published >= tailBatch {
		c.storeTail()
	}
}

func (c *Consumer) storeTail() {
	if c.pos != c.published {
		atomic.StoreUint64(c.g.tail(), c.pos)
		c.published = c.pos
	}
}
