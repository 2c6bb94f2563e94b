package shm

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// The mailbox's lock block (package comment, "Mailbox"): DEVICE memory
// that holds the requesters' slot locks, so claiming a slot costs a
// gpu-scope atomic instead of a PCIe round trip. One per mailbox and
// process, shared by every module; the host never reads it.
const (
	MailboxLocksSlots   = 0  // u32: number of slots, copied from the region header
	MailboxLocksTimeout = 8  // u64: timeout_ns, copied from the control block
	MailboxLocksHeader  = 16 // bytes before the first slot's lock
	MailboxLockSize     = 16 // bytes per slot
	MailboxLockLock     = 0  // u32: 0 free, 1 claimed (gpu-scope cas / store-release)
	MailboxLockBusy     = 4  // u32: 1: the last request timed out, its answer not yet seen
	MailboxLockReq      = 8  // u64: the last request sequence posted to the slot

	// MailboxRetPending is what a requester writes into ret with its
	// request. Reading ack and ret in one 16-byte load, a requester that
	// sees its ack and this value reads ret once more: the load's two
	// halves are not ordered, and the host's answer may be this value.
	MailboxRetPending = 0x7ffd_ead0_ead0_0000
)

// LockBlockSize is the bytes of the mailbox's lock block.
func (m *Mailbox) LockBlockSize() uint64 { return MailboxLocksHeader + m.slots*MailboxLockSize }

// LockBlock returns the initial contents of the lock block's header (the
// rest is zeros): the loader allocates LockBlockSize bytes of device
// memory, zeroes it, copies this in and stores the address in the
// programs' mailbox-locks global (jit/ptx GlobalMailboxLocks).
func (m *Mailbox) LockBlock() []byte {
	b := make([]byte, MailboxLocksHeader)
	binary.LittleEndian.PutUint32(b[MailboxLocksSlots:], uint32(m.slots))
	binary.LittleEndian.PutUint64(b[MailboxLocksTimeout:], uint64(m.Timeout()))
	return b
}

// lockWords is the lock block of Call's requesters, in process memory:
// Go requesters and GPU requesters never share a mailbox.
type lockWords []uint64

func newLockWords(slots uint64) lockWords {
	return make(lockWords, (MailboxLocksHeader+slots*MailboxLockSize)/8)
}

func (l lockWords) base(i uint64) unsafe.Pointer {
	return unsafe.Pointer(&l[(MailboxLocksHeader+i*MailboxLockSize)/8])
}

// claim takes slot i's lock if it is free and the host answered the
// slot's last request, and returns that request's sequence.
func (m *Mailbox) claim(i uint64) (uint64, bool) {
	d := m.locks.base(i)
	if !atomic.CompareAndSwapUint32(field32(d, MailboxLockLock), 0, 1) {
		return 0, false
	}
	r := atomic.LoadUint64(field64(d, MailboxLockReq))
	if atomic.LoadUint32(field32(d, MailboxLockBusy)) != 0 {
		if atomic.LoadUint64(field64(m.slot(i), mbAck)) != r {
			atomic.StoreUint32(field32(d, MailboxLockLock), 0)
			return 0, false
		}
		atomic.StoreUint32(field32(d, MailboxLockBusy), 0)
	}
	return r, true
}

// release frees slot i's lock; busy: its request r is still unanswered.
func (m *Mailbox) release(i, r uint64, busy bool) {
	d := m.locks.base(i)
	atomic.StoreUint64(field64(d, MailboxLockReq), r)
	if busy {
		atomic.StoreUint32(field32(d, MailboxLockBusy), 1)
	}
	atomic.StoreUint32(field32(d, MailboxLockLock), 0)
}
