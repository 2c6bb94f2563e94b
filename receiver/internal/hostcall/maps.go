package hostcall

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Errno values the handlers return (negated), as Linux's map helpers do.
const (
	errNOENT  = 2
	errBUSY   = 16
	errEXIST  = 17
	errINVAL  = 22
	errNOSPC  = 28
	errE2BIG  = 7
	errNOTSUP = 95
)

// Update flags of bpf_map_update_elem.
const (
	flagAny     = 0
	flagNoExist = 1
	flagExist   = 2
)

// HostMap is a map that lives on the host (BPF_MAP_TYPE_HASH or ARRAY
// without BPF_F_MMAPABLE): the host serves its helpers, and keeps its
// values in an shm array region that the client registers with the device,
// so that a lookup's answer is the value's byte offset in that region and
// the GPU reads and writes the value in place (jit/ptx hostMapOp).
type HostMap interface {
	Lookup(key []byte) int64                      // the value's offset, or -ENOENT
	Update(key, value []byte, flags uint64) int64 // 0 or -errno
	Delete(key []byte) int64                      // 0 or -errno
	Region() *shm.Region                          // the values' region
	Sizes() (key, value int)                      // key and value bytes
	Close() error
}

// NewHostMap creates the host side of map m for one client: an shm array
// of m's value size and max_entries, indexed by key (ARRAY) or by a slot
// the host assigns to each key (HASH).
func NewHostMap(m *jit.Map) (HostMap, error) {
	if m.MaxEntries == 0 || m.ValueSize == 0 {
		return nil, fmt.Errorf("map %s: max_entries %d and value_size %d must be positive", m.Name, m.MaxEntries, m.ValueSize)
	}
	a, err := shm.CreateArray(shm.KindArray, m.ValueSize, m.MaxEntries, 1)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", m.Name, err)
	}
	switch m.Type {
	case jit.MapTypeArray:
		if m.KeySize != 4 {
			a.Close()
			return nil, fmt.Errorf("map %s: an array's key_size must be 4, got %d", m.Name, m.KeySize)
		}
		return &arrayMap{a: a}, nil
	case jit.MapTypeHash:
		return &hashMap{a: a, keySize: int(m.KeySize), slots: map[string]uint64{}}, nil
	}
	a.Close()
	return nil, fmt.Errorf("map %s: type %d is not a host map", m.Name, m.Type)
}

// IsHostMap reports whether GPU programs reach m through host calls.
func IsHostMap(m *jit.Map) bool {
	return (m.Type == jit.MapTypeHash || m.Type == jit.MapTypeArray) && !m.Mmapable()
}

// arrayMap is a BPF_MAP_TYPE_ARRAY: key k's value at a fixed offset.
type arrayMap struct{ a *shm.Array }

func (m *arrayMap) Region() *shm.Region { return m.a.Region() }
func (m *arrayMap) Close() error        { return m.a.Close() }
func (m *arrayMap) Sizes() (int, int)   { return 4, m.a.ValueSize() }

func (m *arrayMap) index(key []byte) (uint64, bool) {
	if len(key) != 4 {
		return 0, false
	}
	return m.a.Offset(uint64(binary.LittleEndian.Uint32(key)), 0)
}

func (m *arrayMap) Lookup(key []byte) int64 {
	off, ok := m.index(key)
	if !ok {
		return -errNOENT
	}
	return int64(off)
}

func (m *arrayMap) Update(key, value []byte, flags uint64) int64 {
	switch {
	case flags > flagExist:
		return -errINVAL
	case flags == flagNoExist:
		return -errEXIST // every key of an array exists
	}
	off, ok := m.index(key)
	if !ok {
		return -errE2BIG
	}
	copy(m.a.Region().Bytes()[off:off+uint64(m.a.ValueSize())], value)
	return 0
}

// Delete fails as on Linux: an array's elements cannot be deleted.
func (m *arrayMap) Delete([]byte) int64 { return -errINVAL }

// hashMap is a BPF_MAP_TYPE_HASH: keys get slots of the array region from
// a free list; the key → slot index is the host's alone.
type hashMap struct {
	mu      sync.Mutex
	a       *shm.Array
	keySize int
	slots   map[string]uint64
	free    []uint64 // slots freed by Delete
	next    uint64   // slots [next, max_entries) were never used
}

func (m *hashMap) Region() *shm.Region { return m.a.Region() }
func (m *hashMap) Close() error        { return m.a.Close() }
func (m *hashMap) Sizes() (int, int)   { return m.keySize, m.a.ValueSize() }

func (m *hashMap) Lookup(key []byte) int64 {
	if len(key) != m.keySize {
		return -errINVAL
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.slots[string(key)]
	if !ok {
		return -errNOENT
	}
	off, _ := m.a.Offset(s, 0)
	return int64(off)
}

func (m *hashMap) Update(key, value []byte, flags uint64) int64 {
	if len(key) != m.keySize || flags > flagExist {
		return -errINVAL
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.slots[string(key)]
	switch {
	case ok && flags == flagNoExist:
		return -errEXIST
	case !ok && flags == flagExist:
		return -errNOENT
	case !ok:
		if s, ok = m.alloc(); !ok {
			return -errE2BIG // full, as Linux's hash map says
		}
		m.slots[string(bytes.Clone(key))] = s
	}
	v, _ := m.a.Value(s, 0)
	copy(v, value)
	return 0
}

// alloc takes a free slot.
func (m *hashMap) alloc() (uint64, bool) {
	if n := len(m.free); n > 0 {
		s := m.free[n-1]
		m.free = m.free[:n-1]
		return s, true
	}
	if m.next >= uint64(m.a.Keys()) {
		return 0, false
	}
	m.next++
	return m.next - 1, true
}

func (m *hashMap) Delete(key []byte) int64 {
	if len(key) != m.keySize {
		return -errINVAL
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.slots[string(key)]
	if !ok {
		return -errNOENT
	}
	delete(m.slots, string(key))
	v, _ := m.a.Value(s, 0)
	clear(v)
	m.free = append(m.free, s)
	return 0
}

// Needs reports whether GPU program p makes host calls: it calls
// trace_printk or puts, or uses a host map (IsHostMap).
func Needs(p *jit.Program) bool {
	for _, m := range p.Maps {
		if IsHostMap(m) {
			return true
		}
	}
	for _, ins := range p.Insns {
		if ins.IsBuiltinCall() && (ins.Constant == int64(jit.HelperTracePrintk) || ins.Constant == int64(jit.HelperPuts)) {
			return true
		}
	}
	return false
}
