package interp

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/gpuprobe/gpuprobe/jit"
)

// gpuHash is a GPU hash map (1501) in jit's table layout (jit.HashLayout):
// the same slots, in the same order, as the compiled code fills, so that
// tests can compare the two byte for byte. Programs run one at a time
// here, so no slot is ever seen Busy.
type gpuHash struct {
	l     jit.HashLayout
	max   uint32
	base  uint64 // address of the table (the header element)
	table []byte
}

func newGPUHash(m *Maps, def *jit.Map) (*gpuHash, error) {
	l := jit.GPUHashLayout(def)
	if l.Bytes() > 1<<30 {
		return nil, fmt.Errorf("map %q: a table of %d bytes is more than the interpreter holds (1 GiB)", def.Name, l.Bytes())
	}
	h := &gpuHash{l: l, max: def.MaxEntries, table: make([]byte, l.Bytes())}
	h.base = m.addRegion(&region{data: h.table, elem: int(l.Stride), writable: true})
	return h, nil
}

func (h *gpuHash) state(s uint32) uint32 {
	return binary.LittleEndian.Uint32(h.table[h.l.SlotAt(s):])
}

func (h *gpuHash) setState(s, v uint32) {
	binary.LittleEndian.PutUint32(h.table[h.l.SlotAt(s):], v)
}

func (h *gpuHash) keyOf(s uint32, n int) []byte {
	at := h.l.SlotAt(s) + jit.HashKeyAt
	return h.table[at : at+uint64(n)]
}

func (h *gpuHash) valueOf(s uint32, n int) []byte {
	at := h.l.SlotAt(s) + h.l.ValueAt
	return h.table[at : at+uint64(n)]
}

func (h *gpuHash) count() uint32 { return binary.LittleEndian.Uint32(h.table[jit.HashCountAt:]) }

func (h *gpuHash) addCount(d int32) {
	binary.LittleEndian.PutUint32(h.table[jit.HashCountAt:], h.count()+uint32(d))
}

// Full returns how many inserts the table refused.
func (h *gpuHash) full() uint64 { return binary.LittleEndian.Uint64(h.table[jit.HashFullAt:]) }

// find walks key's probe sequence. It returns the slot that holds key
// (live or a tombstone), or the first empty slot (found false), or
// ok false when HashProbeLimit slots hold other keys.
func (h *gpuHash) find(key []byte) (slot uint32, found, ok bool) {
	home := jit.HashKey(key)
	for i := range h.l.Probes() {
		s := (home + i) & (h.l.Slots - 1)
		switch h.state(s) {
		case jit.HashSlotEmpty:
			return s, false, true
		case jit.HashSlotLive, jit.HashSlotDeleted:
			if bytes.Equal(h.keyOf(s, len(key)), key) {
				return s, true, true
			}
		}
	}
	return 0, false, false
}

// lookup returns the address of key's value, or 0.
func (h *gpuHash) lookup(key []byte) uint64 {
	s, found, _ := h.find(key)
	if !found || h.state(s) != jit.HashSlotLive {
		return 0
	}
	return h.base + h.l.SlotAt(s) + h.l.ValueAt
}

// update stores value under key as map_update_elem with flags (already
// checked to be BPF_ANY, BPF_NOEXIST or BPF_EXIST); 0 or a negative errno.
func (h *gpuHash) update(key, value []byte, flags uint64) int64 {
	s, found, ok := h.find(key)
	live := found && h.state(s) == jit.HashSlotLive
	switch {
	case live && flags == flagNoExist:
		return -errEEXIST
	case live:
		copy(h.valueOf(s, len(value)), value)
		return 0
	case flags == flagExist:
		return -errENOENT
	case !ok || h.count() >= h.max:
		binary.LittleEndian.PutUint64(h.table[jit.HashFullAt:], h.full()+1)
		return -errE2BIG
	}
	h.addCount(1)
	copy(h.keyOf(s, len(key)), key)
	copy(h.valueOf(s, len(value)), value)
	h.setState(s, jit.HashSlotLive)
	return 0
}

// remove turns key's slot into a tombstone; 0 or -ENOENT.
func (h *gpuHash) remove(key []byte) int64 {
	s, found, _ := h.find(key)
	if !found || h.state(s) != jit.HashSlotLive {
		return -errENOENT
	}
	h.setState(s, jit.HashSlotDeleted)
	h.addCount(-1)
	return 0
}

// GPUHashTable returns a copy of a GPU hash map's table (jit.HashLayout:
// header, then slots) and how many inserts it refused.
func (m *Maps) GPUHashTable(name string) ([]byte, uint64, error) {
	s, err := m.get(name)
	if err != nil {
		return nil, 0, err
	}
	if s.gpuHash == nil {
		return nil, 0, fmt.Errorf("map %q: type %d is not a GPU hash map", name, s.def.Type)
	}
	return append([]byte(nil), s.gpuHash.table...), s.gpuHash.full(), nil
}
