package shm

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Device-side reservation (see the package comment): the layout of the
// 64-byte device block that holds a ring's reservation counter in device
// memory, and the control-block word it adds to the ring region.
const (
	RingDeviceBlockSize = 64 // bytes of the device block
	RingDeviceHead      = 0  // u64: tickets taken (gpu-scope atomic add)
	RingDeviceTail      = 8  // u64: the host tail as last read (max; a lower bound)
	RingDeviceDropped   = 16 // u64: records dropped without a ticket
	RingDeviceRefresh   = 24 // u64: %globaltimer ns of the last tail refresh
	RingDeviceSlots     = 32 // u32: slot_count, copied from the ring header
	RingDeviceSlotSize  = 36 // u32: slot_size, copied from the ring header

	// RingDropShards is how many drop counters GPU producers of a
	// device-resident ring spread their drops over (by %smid), at
	// RingDropShardLow (the first 8) and RingDropShardHigh (the rest): the
	// control words a device copy leaves unused.
	RingDropShards    = 16
	RingDropShardLow  = 64
	RingDropShardHigh = 448

	// RingTailOffset is the offset of a ring's tail word, which the
	// drainer of a device-resident ring writes back to the device copy.
	RingTailOffset = offRingTail
	// RingStalledOffset is the offset of a ring's stalled count, which
	// its consumer owns.
	RingStalledOffset = offRingStalled

	// RingDevDropped is the offset in the ring's control block of the host
	// mirror of the device block's dropped count (producers: atomic max).
	RingDevDropped = 448

	// RingDeviceRefreshNS is the least time between two reads of the host
	// tail by producers that find the ring full.
	RingDeviceRefreshNS = 1000
	// RingDeviceDropMirror: the host mirror of the device drop count is
	// raised every this many drops and at every tail refresh.
	RingDeviceDropMirror = 32
)

// DeviceBlock returns the initial contents of the ring's device block:
// counters zero, slot_count and slot_size from the ring header. The loader
// allocates RingDeviceBlockSize bytes of device memory, copies this in and
// stores the address in the program's GlobalRingDevice global.
func (g *Ring) DeviceBlock() []byte {
	b := make([]byte, RingDeviceBlockSize)
	binary.LittleEndian.PutUint32(b[RingDeviceSlots:], uint32(g.slots))
	binary.LittleEndian.PutUint32(b[RingDeviceSlotSize:], uint32(g.slotSize))
	return b
}

func (g *Ring) devDropped() *uint64 { return g.r.u64(RingDevDropped) }

// DeviceReserver is the producer side of device-side reservation with the
// device block in process memory: the same algorithm as the GPU code of
// jit/ptx (Options.RingDevice), for tests and for producers that share one
// private counter. Safe for concurrent use.
type DeviceReserver struct {
	g     *Ring
	block []uint64 // the device block, 8 words
	now   func() uint64
	race  func() // tests: runs between the full check and taking the ticket
}

// NewDeviceReserver returns a reserver with a fresh device block; now is the
// clock in ns (the GPU's %globaltimer).
func (g *Ring) NewDeviceReserver(now func() uint64) *DeviceReserver {
	d := &DeviceReserver{g: g, block: make([]uint64, RingDeviceBlockSize/8), now: now}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&d.block[0])), RingDeviceBlockSize), g.DeviceBlock())
	return d
}

func (d *DeviceReserver) word(off int) *uint64 { return &d.block[off/8] }

// Produce writes one record by the device-side reservation algorithm.
func (d *DeviceReserver) Produce(typ uint32, payload []byte) ProduceResult {
	g := d.g
	if uint64(len(payload)) > g.slotSize-SlotHeaderSize {
		atomic.AddUint64(g.oversize(), 1)
		return Oversize
	}
	tl := atomic.LoadUint64(d.word(RingDeviceTail))
	h := atomic.LoadUint64(d.word(RingDeviceHead))
	if h-tl >= g.slots { // D1: looks full
		var room bool
		if tl, room = d.refresh(h); !room {
			d.drop()
			return Dropped
		}
	}
	if d.race != nil {
		d.race()
	}
	t := atomic.AddUint64(d.word(RingDeviceHead), 1) - 1 // D2
	if t-tl >= g.slots {
		tl = atomic.LoadUint64(g.tail()) // D3
		maxU64(d.word(RingDeviceTail), tl)
		if t-tl >= g.slots { // D5
			d.late(t)
			return Dropped
		}
	}
	g.publish(t, typ, payload) // D4
	return Published
}

// late drops ticket t, which cannot be published: the head mirror first
// covers t, then its slot's drop counter and dropped count it.
func (d *DeviceReserver) late(t uint64) {
	maxU64(d.g.head(), t+1)
	atomic.AddUint32(d.g.slotDrops(t), 1)
	atomic.AddUint64(d.g.dropped(), 1)
}

// refresh re-reads the host tail if no one did in the last refresh
// interval; it returns the tail to use and whether the ring has room.
func (d *DeviceReserver) refresh(h uint64) (uint64, bool) {
	now := d.now()
	tl := atomic.LoadUint64(d.word(RingDeviceTail))
	if now-atomic.LoadUint64(d.word(RingDeviceRefresh)) < RingDeviceRefreshNS {
		return tl, false
	}
	if now-atomic.SwapUint64(d.word(RingDeviceRefresh), now) < RingDeviceRefreshNS {
		return tl, false
	}
	tl = atomic.LoadUint64(d.g.tail())
	maxU64(d.word(RingDeviceTail), tl)
	maxU64(d.g.devDropped(), atomic.LoadUint64(d.word(RingDeviceDropped)))
	return tl, h-tl < d.g.slots
}

func (d *DeviceReserver) drop() {
	n := atomic.AddUint64(d.word(RingDeviceDropped), 1)
	if n%RingDeviceDropMirror == 0 {
		maxU64(d.g.devDropped(), n)
	}
}

// Flush raises the host mirror of the drop count to the device count (the
// GPU side does this every RingDeviceDropMirror drops and at every tail
// refresh; a loader may do it after a launch with a device-to-host copy).
func (d *DeviceReserver) Flush() {
	d.g.RaiseDeviceDropped(atomic.LoadUint64(d.word(RingDeviceDropped)))
}

// RaiseDeviceDropped raises the host mirror of a device block's drop count
// to n (never lowers it): what a loader does after a launch with the count
// it copied from the device block.
func (g *Ring) RaiseDeviceDropped(n uint64) { maxU64(g.devDropped(), n) }

// DeviceDropped returns the device block's count of drops without a ticket.
func (d *DeviceReserver) DeviceDropped() uint64 {
	return atomic.LoadUint64(d.word(RingDeviceDropped))
}

// maxU64 is an atomic max (the GPU's red.max).
func maxU64(p *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(p)
		if old >= v || atomic.CompareAndSwapUint64(p, old, v) {
			return
		}
	}
}

// takenBeyond reports whether a ticket after t is visibly published in one
// of the next few slots, which proves ticket t was taken (tickets are
// handed out in order). With device-side reservation the host head is only
// a mirror that may lag, so this is how the consumer tells a ticket whose
// producer died from an empty ring.
func (g *Ring) takenBeyond(t uint64) bool {
	n := min(g.slots-1, 16)
	for j := uint64(1); j <= n; j++ {
		if atomic.LoadUint64((*uint64)(g.slot(t+j))) > t+1 {
			return true
		}
	}
	return false
}

// RingDropShard returns the offset of drop shard k (0 <= k < 16) in the
// device copy of a ring region.
func RingDropShard(k int) int {
	if k < 8 {
		return RingDropShardLow + 8*k
	}
	return RingDropShardHigh + 8*(k-8)
}

// DeviceRingDrops returns the sum of the drop shards of a ring region's
// device copy (the whole region, copied back).
func DeviceRingDrops(devCopy []byte) uint64 {
	var n uint64
	for k := 0; k < RingDropShards; k++ {
		n += binary.LittleEndian.Uint64(devCopy[RingDropShard(k):])
	}
	return n
}
