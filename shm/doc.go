// Package shm defines and implements the shared-memory regions through which
// GPU code, the in-application C shim and the collector exchange data: maps
// (arrays, per-thread and per-warp arrays), multi-producer ring buffers and
// the GPU→host mailbox for host-call helpers.
//
// A region is a memfd (memfd_create + ftruncate) mapped MAP_SHARED in every
// process that uses it, and registered with cuMemHostRegister(DEVICEMAP) in
// the application so that kernels write into it over PCIe. The same bytes are
// described in C by include/gpuprobe_shm.h; the two must agree exactly.
// Everything is little-endian. This comment is the normative description of
// layout version 1.
//
// # Region header (offset 0, 64 bytes)
//
//	off size field        meaning
//	  0  u32  magic        0x52425047, the bytes "GPBR"
//	  4  u16  version      layout version, 1
//	  6  u16  kind         1 ring, 2 array, 3 per-thread array,
//	                       4 per-warp array, 5 mailbox
//	  8  u32  header_size  64
//	 12  u32  flags        0 (reserved; readers reject unknown bits)
//	 16  u64  data_size    bytes of the data area
//	 24  u64  data_offset  offset of the data area from the region start: 512
//	 32  u32  value_size   array: value bytes; ring, mailbox: slot bytes
//	 36  u32  max_entries  array: keys; ring, mailbox: number of slots
//	 40  u32  stride       bytes from one value/slot to the next
//	 44  u32  lanes        per-thread array: threads per key; per-warp
//	                       array: warps per key; every other kind: 1
//	 48  u64  region_size  bytes of the whole region (a multiple of 4096,
//	                       >= data_offset + data_size)
//	 56  u32  id           owner-assigned id (e.g. the map's index); free use
//	 60  u32  reserved     0
//
// Bytes 64..511 are the control block: counters that each live on their own
// 64-byte cache line (below). The data area starts at DataOffset (512) for
// every kind, so generated code can use the constant: a GPU map's module
// global holds the region's device base address, and its data is at
// base+512.
//
// A reader (Map/Open) rejects a region whose magic, version, kind,
// header_size, flags, reserved word or sizes disagree with each other or with
// the file size, with an error naming the field and its offset.
//
// # Arrays (kinds 2, 3, 4)
//
// stride = value_size rounded up to a multiple of 8. data_size =
// max_entries*lanes*stride. The value for key k is at
//
//	array:            data + k*stride
//	per-thread array: data + (k*lanes + thread)*stride
//	per-warp array:   data + (k*lanes + warp)*stride
//
// where thread is the global linear thread index of the calling GPU thread,
//
//	block  = (ctaid.z*nctaid.y + ctaid.y)*nctaid.x + ctaid.x
//	thread = block*(ntid.x*ntid.y*ntid.z) + (tid.z*ntid.y + tid.y)*ntid.x + tid.x
//
// and warp = thread/32. A key >= max_entries, or a thread/warp >= lanes,
// gives NULL (no access). Values start zeroed; GPU code updates them in
// place (with atomics where the program asks for them); the host only reads
// them.
//
// # Ring buffer (kind 1)
//
// Fixed-size slots, many producers, one consumer. Producers are all on one
// side of the bus: all GPU threads, or all CPU threads (the shim, tests). The
// consumer (the collector) uses only plain loads and stores on the ring, never
// a read-modify-write, so it does not rely on atomics being atomic across
// PCIe. value_size = stride = slot_size (a multiple of 8, >= 24, <= 65536);
// max_entries = slot_count (a power of two, >= 2). Control block:
//
//	off 128 u64 head      tickets taken (producers: atomic add)
//	off 192 u64 tail      next ticket the consumer reads (consumer: store)
//	off 256 u64 dropped   records dropped because the ring was full
//	                      (producers: atomic add)
//	off 320 u64 oversize  records rejected as larger than a slot (producers)
//	off 384 u64 stalled   tickets the consumer gave up on (consumer: store)
//
// Data area: slot_count slots of slot_size bytes, then two u32 arrays of
// slot_count entries each:
//
//	data + i*slot_size                  slot i
//	data + slot_count*slot_size + 4*i   slot_drops[i]  (producers: atomic add)
//	data + slot_count*(slot_size+4) + 4*i  slot_acked[i]  (consumer: store)
//
// so data_size = slot_count*(slot_size+8). A slot:
//
//	off 0  u64 seq    ticket+1 once the record for ticket is published
//	off 8  u32 len    payload bytes (<= slot_size-16)
//	off 12 u32 type   record type, chosen by the producer
//	off 16 ...        payload
//
// A ticket t lives in slot t & (slot_count-1). Producer (reserve + publish):
//
//  1. if len > slot_size-16: atomic add 1 to oversize; return "too big".
//  2. tl = load-acquire(tail); h = load(head).
//     If h - tl >= slot_count: atomic add 1 to dropped; return "dropped".
//     (No ticket is taken, so nothing is left for the consumer to resolve.)
//  3. t = atomic fetch-add(head, 1).
//  4. If t - tl >= slot_count (racing producers overshot; tl is the value
//     from step 2: tail only grows, so an old value is conservative):
//     atomic add 1 to dropped; atomic add 1 with release ordering to
//     slot_drops[t & mask] (the release orders it after step 3); return
//     "dropped".
//  5. Write len, type and the payload into the slot; then store-release
//     seq = t+1 (on the GPU: st.release.sys, or membar.sys then a volatile
//     store). Return "published".
//
// A producer never waits: every path above is straight-line.
//
// Consumer, at its private position t (initially tail), slot s = t & mask:
//
//  1. If load-acquire(slot.seq) == t+1: the record is complete. Read len,
//     type and payload; deliver; advance t. (A len > slot_size-16 is a
//     misbehaving producer: the record is skipped and counted as corrupt.)
//     Store tail = t after each batch (and at least every 64 records)
//     with a release store.
//  2. Otherwise c = load-acquire(slot_drops[s]) - slot_acked[s] (u32
//     arithmetic, modulo 2^32), then H = load(head). If H <= t the ring is
//     empty. Otherwise let later = (H-1-t) / slot_count, the number of
//     tickets of later laps of slot s already taken. While the consumer sits
//     at t, tail <= t, so every such later ticket fails step 4 and adds one
//     to slot_drops[s]. Hence c <= later + (1 if ticket t was dropped), and
//     c > later proves ticket t was dropped: store slot_acked[s] += 1,
//     advance t. If c <= later, ticket t is being written (or its drop is not
//     visible yet): come back later.
//  3. A ticket that stays unresolved for the stall timeout (its producer died
//     between steps 3 and 5) is skipped and counted in stalled, so a dead
//     producer cannot stop the ring. The stall timeout is seconds (default
//     5 s), far beyond any live producer's few instructions between steps 3
//     and 5; a producer that is alive but frozen that long (a preempted GPU
//     context) and then publishes could overwrite the slot's next record,
//     which is why the timeout is long and the skip is counted.
//
// Accounting: every record offered is exactly one of delivered, dropped,
// oversize, or (only with dead producers) stalled.
//
// The producers are not trusted. The consumer bounds its work per read by
// the tickets it resolves, whatever became of them, and stops for good
// (Consumer.Err) at a value no producer following the steps above can
// leave: head more than slot_count + MaxOvershoot beyond t; c > later + 1
// (plus the tickets it skipped as stalled, whose marks may come late); a
// seq other than 0 that is above t+1 or names another slot; len >
// slot_size-16. A consumer whose producers are gone resolves what is left
// without waiting (Consumer.Drain): published records are abandoned and
// counted, unresolved tickets count as stalled.
//
// # Ring buffer: device-side reservation (opt-in)
//
// With the protocol above every GPU record does a sys-scope atomic with a
// return on head, in host memory: a PCIe round trip, and all producers of
// the GPU serialize on that one address. Device-side reservation (jit/ptx
// Options.RingDevice) keeps the counters in a 64-byte block of DEVICE
// memory, so that a published record costs only posted writes over PCIe.
// The ring region, its slots and the consumer are unchanged; one control
// word is added:
//
//	off 448 u64 dev_dropped  host mirror of the device block's dropped
//	                         (producers: atomic max); Stats adds it to dropped
//
// Device block (device memory, allocated and filled by the loader from
// Ring.DeviceBlock, its address in the program's ring_device global; one
// block per ring, so all producers of a ring must be on one device):
//
//	off 0  u64 head      tickets taken (gpu-scope atomic add)
//	off 8  u64 tail      the host tail as last read (gpu-scope max): a
//	                     lower bound of the real tail
//	off 16 u64 dropped   records dropped without a ticket (gpu-scope add)
//	off 24 u64 refresh   %globaltimer of the last tail refresh
//	off 32 u32 slots     slot_count, copied from the ring header
//	off 36 u32 slot_size slot_size, copied from the ring header
//
// In device mode the region's head (off 128) is a MIRROR: producers raise it
// (atomic max) only for late drops (step D5), so it may lag the tickets
// taken. Producer (each path straight-line; no thread ever waits):
//
//	D0. len > slot_size-16: as step 1 above (oversize).
//	D1. tl = load-acquire.gpu(block.tail); h = load(block.head). If
//	    h - tl >= slot_count the ring looks full: if no producer re-read the
//	    host tail in the last RingDeviceRefreshNS (1 µs; claimed with an
//	    exchange on block.refresh), read tl = load-acquire.sys(host tail),
//	    max it into block.tail (release), max block.dropped into
//	    dev_dropped, and go on to D2 if h - tl < slot_count now. Otherwise
//	    n = atomic add(block.dropped, 1)+1; if n is a multiple of 32, atomic
//	    max(dev_dropped, n); return "dropped". No ticket was taken.
//	D2. t = atomic fetch-add(block.head, 1) (gpu scope, in L2).
//	D3. If t - tl >= slot_count (racing producers overshot the cached tail):
//	    tl = load-acquire.sys(host tail); max it into block.tail; if still
//	    t - tl >= slot_count, go to D5.
//	D4. Write len, type, payload; store-release.sys seq = t+1. Published.
//	D5. Late drop: atomic max(host head, t+1); then release-add 1 to
//	    slot_drops[t & mask]; add 1 to dropped; return "dropped".
//
// Why the consumer (unchanged, above) stays correct. Published records:
// step 1 needs only seq, and a slot is written only for a ticket t with
// t - tl < slot_count where tl <= the real tail (tail only grows; the block
// holds values read from it, and the acquire/release chain host tail →
// block.tail → producer orders the write after the consumer's last read of
// the slot's previous record). So no record overwrites an unread one.
// Drops: step 2 needs, for the c drop increments it sees in slot s while at
// t, that every ticket t' behind them satisfies t' < H (H = host head read
// after the acquire of slot_drops). D5 raises head to t'+1 BEFORE its
// release-add to slot_drops, so H > t' for every increment seen; and every
// ticket below H was taken (tickets are handed out in order). While the
// consumer sits at t, tail <= t, so each taken ticket t' >= t+slot_count of
// slot s fails D3 and ends in D5. Hence c <= later + [t dropped] with later
// = (H-1-t)/slot_count as before, and c > later still proves t dropped; a
// lagging H only makes the consumer wait. Drops at D1 take no ticket and
// leave nothing to resolve. A lagging head also means H <= t does not prove
// the ring empty: the consumer then looks at the next slots (up to 16), and
// a published later ticket proves t was taken, so the stall timeout (step
// 3) still covers a producer that died between D2 and D4.
//
// Accounting as above, with dropped = dropped + dev_dropped. dev_dropped
// lags the device count by fewer than 32 drops until the next refresh or
// the 32nd drop; a loader may copy block.dropped to it after a launch.
//
// # Device-resident maps (GPU programs' arrays and rings)
//
// A GPU map that the host only reads (arrays of kinds 2-4, rings) may live
// in DEVICE memory: an exact copy of its region (header, control block,
// data area), allocated by the loader in the application's device memory
// and filled once from the host region (so values the collector seeded in
// the host region are the map's initial values). GPU code then reads and
// writes it at L2 speed instead of over PCIe (measured on an H100: a
// per-thread ring record costs 1.01x on a 2048 SGEMM in device memory and
// 66x in host memory). The loader keeps the host region current by DMA
// from a thread of its own, on a stream of its own that does not order
// against the application's streams, every mirror period:
//
//   - Array (kinds 2, 3, 4): copy the data area, device -> host. The host
//     sees each 8-byte word as some value the GPU stored; a value wider
//     than 8 bytes may be torn across a GPU update (as with the host
//     protocol).
//
//   - Ring (kind 1): GPU producers run the ring protocol above on the
//     device copy (steps 1-5, with gpu-scope atomics and release stores;
//     the compiler takes one ticket per warp: the lowest active lane does
//     the full check and one fetch-add of the number of active lanes, and
//     lane i takes ticket base + rank(i)). Drops are not added to dropped
//     but to one of 16 drop shards, shard %smid mod 16, the u64 words at
//     64-127 (shards 0-7) and 448-511 (shards 8-15) of the device copy,
//     which the device copy does not otherwise use (RingDropShard): when
//     the ring is full every warp of the GPU drops, and one counter would
//     serialize them all in L2. The loader's drainer is the
//     device ring's consumer and the host ring's (only) producer. At its
//     private position p (initially 0), in one pass:
//
//     R1. Copy the device control block (offsets 64-511) to the host: H0
//     = head. If H0 == p go to R5.
//     R2. n = min(H0 - p, slot_count). Copy, in this order on the stream,
//     the first 16 bytes (seq, len, type) of the slots of tickets
//     p..p+n-1, the slot_drops words of those slots, then the control
//     block again (H1 = head). Wait for the copies.
//     R3. Walk t from p while t < p+n: seq == t+1 is a published record;
//     else c = slot_drops[s] - acked[s] (acked is the drainer's own array)
//     and c > (H1-1-t)/slot_count proves t dropped (acked[s] += 1); else
//     stop (being written). A ticket left unresolved for the stall
//     timeout (5 s) is skipped and counted as a device drop.
//     R4. Copy the published slots found in R3 (at most two contiguous
//     pieces) to a private buffer and wait. Because a producer stores seq
//     with release after its payload, and R4's copy starts after R2's
//     completed, every payload read is complete. Offer each record (len,
//     type, payload) to the host ring with the host protocol; a full host
//     ring drops it and counts it in the host ring's dropped.
//     R5. Set p to the first unresolved ticket; write p to the device
//     copy's tail (offset 192). Producers never overwrite a slot whose
//     ticket is >= p, so R2's view of it stays valid until the next pass.
//     Store the device's dropped + its drop shards (their growth since
//     the copy was filled) + the drainer's stalls into the host
//     region's dev_dropped (offset 448, a max) and the device's oversize
//     into the host's oversize (a max).
//
//     Accounting: every record a GPU thread offers is exactly one of
//     delivered (by the host ring's consumer), dropped (device dropped,
//     device stalls, host dropped) or oversize.
//
// At process exit the loader runs one last pass (bounded: at most 100 ms).
// If the device copy cannot be allocated, the map's globals stay 0: GPU
// code sees the map as absent and the application runs unchanged.
//
// # Mailbox (kind 5)
//
// GPU threads post host-call requests (trace_printk, puts, host map
// operations) and wait, bounded, for the answer. value_size = stride =
// MailboxSlotSize (256); max_entries = number of slots (>= 1). Control block:
//
//	off 128 u64 timeout_ns  how long a GPU thread waits (set by the creator)
//	off 192 u64 served      requests answered (host: store)
//	off 256 u64 heartbeat   host CLOCK_MONOTONIC ns of its last poll
//	off 320 u64 late        requests answered after their requester gave
//	                        up (timed out): waiting was 0 when the host
//	                        read the request (host: store)
//
// A slot (256 bytes):
//
//	off 0   u32 waiting      1 with a request, 0 once its requester gave up
//	off 4   u32 helper       helper id
//	off 8   u64 req          request sequence (requester: store-release)
//	off 16  u64 ack          answered sequence (host: store-release)
//	off 24  i64 ret          return value (host, before ack)
//	off 32  u64 args[5]      r1..r5 of the helper call
//	off 72  u32 payload_len  bytes of payload used (<= 168)
//	off 76  u32 flags        0 (reserved)
//	off 80  u64 caller       global linear thread index of the caller
//	off 88  u8  payload[168] e.g. the format string and its arguments
//
// The requesters' locks live in a lock block in DEVICE memory, one per
// mailbox and process (cuMemAlloc, shared by every module; jit/ptx
// GlobalMailboxLocks), so that claiming a slot crosses no bus; the host
// never reads it. It is MailboxLocksHeader + slots × MailboxLockSize
// bytes, zero but for its header, which the loader copies from the region
// (Mailbox.LockBlock):
//
//	off 0   u32 slots        max_entries of the region
//	off 8   u64 timeout_ns   timeout_ns of the control block
//	off 16 + 16i, slot i:
//	  off 0 u32 lock         0 free, 1 claimed (atom.cas, gpu scope)
//	  off 4 u32 busy         1: the slot's last request timed out and
//	                         nobody has seen its answer yet
//	  off 8 u64 req          the slot's last request sequence (the host
//	                         copy is never read by requesters)
//
// lock orders busy and req: a claimant reads them after its acquire cas,
// writes them before its release store of lock 0.
//
// Requester (a GPU thread; atomics only on the lock block):
//
//  1. deadline = %globaltimer + timeout_ns (both from the lock block).
//  2. Walk the slots from (caller mod n): if the acquire cas of lock from
//     0 to 1 (gpu scope) succeeds, r = req; if busy, load-acquire the host's ack (the one
//     round trip of a claim, only after a timeout): if ack == r, busy = 0
//     and the slot is ours; otherwise the host still owes an answer for an
//     abandoned request: store-release lock = 0 and try the next slot.
//     After a full pass with no slot, retry until the deadline, then
//     return -110 (ETIMEDOUT).
//  3. Write waiting = 1, helper, ret = MailboxRetPending, args,
//     payload_len, flags, caller, payload (8-byte and 16-byte stores:
//     bytes past payload_len are garbage); then store-release req = r+1.
//  4. Spin on one 16-byte load-acquire of {ack, ret} until ack == r+1, or
//     until %globaltimer passes the deadline: then write waiting = 0 (for
//     the host's late count), busy = 1, req = r+1, store-release lock = 0
//     and return -110. The slot stays busy until a later claimant sees the
//     answer, so no request can reuse it while the host may still read it.
//  5. The load's two halves are not ordered: if ret == MailboxRetPending,
//     load ret once more (after the acquire, so the host's answer). Then
//     req = r+1, store-release lock = 0; return ret.
//
// Without a lock block (its global 0) host calls return -110 at once:
// requesters of one mailbox must all use the same locks.
//
// Host (Mailbox.Serve): poll every slot; where r = load-acquire(req) differs
// from ack, read the request, run the handler, store ret, then store-release
// ack = r. A late answer to an abandoned request is harmless: nobody reads
// it but the claimant that clears busy; the host counts it in late when it
// finds waiting = 0. waiting is written without ordering against req, so
// late can be off by the few requests that time out while the host reads
// them. The host never writes waiting, req or the request fields, and
// reads nothing but the region, so no read-modify-write crosses the bus.
package shm
