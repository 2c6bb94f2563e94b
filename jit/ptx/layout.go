package ptx

import "github.com/gpuprobe/gpuprobe/shm"

// Byte offsets of the shm layout (version 1, shm/doc.go) that generated code
// uses. The region's data area starts at shm.DataOffset for every kind.
const (
	dataOffset = shm.DataOffset

	hdrMaxEntries = 36 // u32: ring, mailbox: number of slots
	hdrStride     = 40 // u32: bytes between slots

	ringHead     = 128                // u64: tickets taken
	ringTail     = 192                // u64: next ticket the consumer reads
	ringDropped  = 256                // u64: records dropped, ring full
	ringOversize = 320                // u64: records larger than a slot
	ringDevDrops = shm.RingDevDropped // u64: device-side reservation: mirror of the device block's dropped

	// The device block of device-side reservation (shm.RingDevice*).
	devHead     = shm.RingDeviceHead     // u64: tickets taken (gpu-scope atomics)
	devTail     = shm.RingDeviceTail     // u64: the host tail as last seen (a lower bound)
	devDropped  = shm.RingDeviceDropped  // u64: records dropped before taking a ticket
	devRefresh  = shm.RingDeviceRefresh  // u64: %globaltimer of the last tail refresh
	devSlots    = shm.RingDeviceSlots    // u32: slot_count, copied from the ring header
	devSlotSize = shm.RingDeviceSlotSize // u32: slot_size, copied from the ring header

	slotHeader = shm.SlotHeaderSize // seq u64, len u32, type u32

	mboxTimeout = 128 // u64: how long a GPU thread waits, ns

	mailboxSlotSize = shm.MailboxSlotSize
	mailboxPayload  = shm.MailboxPayload
	mslotWaiting    = 0  // u32
	mslotHelper     = 4  // u32
	mslotReq        = 8  // u64
	mslotAck        = 16 // u64
	mslotRet        = 24 // i64
	mslotArgs       = 32 // u64[5]
	mslotPayloadLen = 72 // u32
	mslotFlags      = 76 // u32
	mslotCaller     = 80 // u64
	mslotPayload    = 88 // u8[168]

	// The mailbox's lock block in device memory (shm.MailboxLock*).
	mlocksSlots   = shm.MailboxLocksSlots   // u32: number of slots
	mlocksTimeout = shm.MailboxLocksTimeout // u64: timeout_ns
	mlocksHeader  = shm.MailboxLocksHeader  // bytes before slot 0's lock
	mlockSize     = shm.MailboxLockSize     // bytes per slot
	mlockLock     = shm.MailboxLockLock     // u32: 0 free, 1 claimed
	mlockBusy     = shm.MailboxLockBusy     // u32: 1: last request timed out, answer unseen
	mlockReq      = shm.MailboxLockReq      // u64: last request sequence posted
)

// Errors that inline helpers return (negated, as Linux does).
const (
	errNOENT  = 2  // map or ring not attached
	errE2BIG  = 7  // key out of range / record larger than a slot
	errEXIST  = 17 // BPF_NOEXIST on an array
	errINVAL  = 22 // bad flags, delete on an array, bad map handle
	errNOSPC  = 28 // ring full: the record was dropped
	errNOTSUP = 95 // helper not available for this map type
)

// RingRecordType is the slot type of records written by perf_event_output.
const RingRecordType = 0

// mapHandleBase tags the value an LD_IMM64 map reference puts in a
// register: mapHandleBase + the map's index in Program.Maps. It is never a
// valid address; helpers find the map from it.
const mapHandleBase = 0x6770_0000_0000_0000
