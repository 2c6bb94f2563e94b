package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The GPU hash map (bpftime's BPF_MAP_TYPE_GPU_HASH_MAP, 1501) is one
// table shared by every GPU thread, in the map's region: an open-addressing
// table with linear probing that GPU code updates lock-free. The compiled
// code, the interpreter and the collector all read this layout; it is
// defined here once.
//
// The region's values are HashLayout.Slots+1 elements of Stride bytes.
// Element 0 is the table header:
//
//	offset 0  u32 count  live entries (reserved by a claimed insert, at most MaxEntries)
//	offset 8  u64 full   inserts refused: max_entries reached or no free slot within HashProbeLimit
//
// Element 1+s is slot s:
//
//	offset 0        u32 state   HashSlotEmpty, Busy, Live or Deleted
//	offset 8        key         KeySize bytes
//	offset ValueAt  value       ValueSize bytes
//
// A key hashes (HashKey) to its home slot h & (Slots-1); an operation
// looks at slots h, h+1, ... (mod Slots), at most HashProbeLimit of them.
// A slot is claimed once, from Empty, by a compare-and-swap to Busy, and
// keeps its key for the life of the table: delete turns it into a
// tombstone (Deleted) that only an insert of the same key revives. So two
// threads inserting one key meet on the same slot, and one key never has
// two slots; the price is that a table which sees more than Slots distinct
// keys in its life fills up even if few are live at once.
const (
	HashMaxKeySize   = 64      // bytes of a key
	HashMaxValueSize = 4096    // bytes of a value
	HashMaxEntries   = 1 << 20 // max_entries
	HashProbeLimit   = 64      // slots one operation looks at before it gives up
	// HashSpinLimit bounds how often an update rereads a slot that another
	// thread has claimed but not yet published; it then returns -EBUSY.
	HashSpinLimit = 1 << 16

	HashCountAt = 0 // header: u32 live entries
	HashFullAt  = 8 // header: u64 refused inserts
	HashKeyAt   = 8 // slot: key
)

// Slot states of a GPU hash map.
const (
	HashSlotEmpty   = 0 // never used
	HashSlotBusy    = 1 // claimed by an insert that has not published it yet
	HashSlotLive    = 2 // holds key and value
	HashSlotDeleted = 3 // tombstone: keeps its key, no value
)

// HashLayout is the shape of a GPU hash map's table.
type HashLayout struct {
	Slots   uint32 // a power of two ≥ 2 × MaxEntries
	Stride  uint64 // bytes of a slot (and of the header element)
	ValueAt uint64 // offset of the value in a slot
}

// Bytes is the size of the table: the header and every slot.
func (l HashLayout) Bytes() uint64 { return uint64(l.Slots+1) * l.Stride }

// SlotAt is the offset of slot s from the start of the table.
func (l HashLayout) SlotAt(s uint32) uint64 { return uint64(s+1) * l.Stride }

// Probes is how many slots one operation looks at: HashProbeLimit, or
// every slot of a smaller table.
func (l HashLayout) Probes() uint32 { return min(l.Slots, HashProbeLimit) }

// GPUHashLayout returns the table layout of a GPU hash map. Twice as many
// slots as entries keep the probe sequences of a full map short.
func GPUHashLayout(m *Map) HashLayout {
	slots := uint32(1) << bits.Len32(max(2*m.MaxEntries, 2)-1)
	k, v := (uint64(m.KeySize)+7)&^7, (uint64(m.ValueSize)+7)&^7
	return HashLayout{Slots: slots, Stride: HashKeyAt + k + v, ValueAt: HashKeyAt + k}
}

// HashKey is the hash of a GPU hash map key: FNV-1a over its bytes, then
// a 32-bit finaliser so that small integer keys spread over the table.
func HashKey(key []byte) uint32 {
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	h ^= h >> 16
	h *= 0x7feb352d
	h ^= h >> 15
	h *= 0x846ca68b
	h ^= h >> 16
	return h
}

// checkGPUHash validates the definition of a GPU hash map.
func checkGPUHash(m *Map) error {
	switch {
	case m.KeySize == 0 || m.KeySize > HashMaxKeySize:
		return fmt.Errorf("key size %d, want 1..%d", m.KeySize, HashMaxKeySize)
	case m.ValueSize == 0 || m.ValueSize > HashMaxValueSize:
		return fmt.Errorf("value size %d, want 1..%d", m.ValueSize, HashMaxValueSize)
	case m.MaxEntries == 0:
		return errors.New("max_entries 0")
	case m.MaxEntries > HashMaxEntries:
		return fmt.Errorf("max_entries %d exceeds %d", m.MaxEntries, HashMaxEntries)
	}
	return nil
}

// HashEntry is one live entry of a GPU hash map's table.
type HashEntry struct {
	Key, Value []byte
}

// Entries decodes the live entries of a table of map m (laid out as l):
// elem(i) returns the l.Stride bytes of element i (0: the header, 1+s:
// slot s), from wherever the table was read or mirrored. A slot that
// another thread is filling is skipped.
func (l HashLayout) Entries(m *Map, elem func(i uint32) ([]byte, error)) ([]HashEntry, error) {
	var out []HashEntry
	for s := range l.Slots {
		b, err := l.elem(elem, s+1)
		if err != nil {
			return nil, err
		}
		if binary.LittleEndian.Uint32(b) != HashSlotLive {
			continue
		}
		out = append(out, HashEntry{
			Key:   append([]byte(nil), b[HashKeyAt:HashKeyAt+uint64(m.KeySize)]...),
			Value: append([]byte(nil), b[l.ValueAt:l.ValueAt+uint64(m.ValueSize)]...),
		})
	}
	return out, nil
}

// Put stores value under key as map_update_elem with BPF_ANY would, in a
// table of map m that no GPU code is using yet (the host seeding a map
// before the first launch); elem gives writable elements as for Entries.
func (l HashLayout) Put(m *Map, elem func(i uint32) ([]byte, error), key, value []byte) error {
	if len(key) != int(m.KeySize) || len(value) > int(m.ValueSize) {
		return fmt.Errorf("key/value of %d/%d bytes, want %d/at most %d", len(key), len(value), m.KeySize, m.ValueSize)
	}
	home := HashKey(key)
	for i := range l.Probes() {
		s := (home + i) & (l.Slots - 1)
		b, err := l.elem(elem, s+1)
		if err != nil {
			return err
		}
		st := binary.LittleEndian.Uint32(b)
		same := bytes.Equal(b[HashKeyAt:HashKeyAt+uint64(m.KeySize)], key)
		if st == HashSlotLive && same {
			copy(b[l.ValueAt:], value)
			return nil
		}
		if st != HashSlotEmpty && !(st == HashSlotDeleted && same) {
			continue
		}
		h, err := l.elem(elem, 0)
		if err != nil {
			return err
		}
		n := binary.LittleEndian.Uint32(h[HashCountAt:])
		if n >= m.MaxEntries {
			return fmt.Errorf("more than max_entries (%d) keys", m.MaxEntries)
		}
		binary.LittleEndian.PutUint32(h[HashCountAt:], n+1)
		copy(b[HashKeyAt:], key)
		copy(b[l.ValueAt:], value)
		binary.LittleEndian.PutUint32(b, HashSlotLive)
		return nil
	}
	return fmt.Errorf("no free slot among the %d its key probes", l.Probes())
}

func (l HashLayout) elem(elem func(i uint32) ([]byte, error), i uint32) ([]byte, error) {
	b, err := elem(i)
	if err != nil {
		return nil, fmt.Errorf("table element %d: %w", i, err)
	}
	if uint64(len(b)) < l.Stride {
		return nil, fmt.Errorf("table element %d: %d bytes, want %d", i, len(b), l.Stride)
	}
	return b, nil
}
