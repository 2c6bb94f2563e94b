package interp

import (
	"encoding/binary"
	"fmt"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Linux error numbers that map helpers return (negated).
const (
	errENOENT = 2
	errE2BIG  = 7
	errEEXIST = 17
	errEINVAL = 22
	errENOSPC = 28
)

// Map update flags.
const (
	flagAny     = 0
	flagNoExist = 1
	flagExist   = 2
)

// RingRecordHeader is the bytes each ring-buffer record costs on top of its
// payload (rounded up to 8), as in the shm ring layout.
const RingRecordHeader = 8

// region is a piece of addressable memory. A pointer is id<<regionShift |
// offset; elem > 0 confines every access to one elem-sized slot.
type region struct {
	data     []byte
	elem     int
	writable bool
}

const (
	regionShift = 40
	offsetMask  = 1<<regionShift - 1

	regionCtx      = 1 // the context r1 points to
	regionStack    = 2 // all stack frames of the thread
	regionHandles  = 3 // map handles (not memory)
	firstMapRegion = 16
)

// Maps holds the contents of every map the programs run against it use,
// by map name, so that tests can read what a program wrote. It is not safe
// for concurrent use.
type Maps struct {
	byName  map[string]*mapState
	regions []*region // id - firstMapRegion
}

// NewMaps returns an empty map store.
func NewMaps() *Maps {
	return &Maps{byName: map[string]*mapState{}}
}

type mapState struct {
	def    jit.Map
	array  uint64            // region of an array's values (types 2, 1503)
	copies map[uint64]uint64 // thread or warp id -> region (1502, 1600)
	hash   map[string]uint64 // key -> region (type 1)

	gpuHash *gpuHash // table of a GPU hash map (1501)

	records [][]byte // ring buffer (1527)
	used    int
	dropped uint64
}

func (m *Maps) addRegion(r *region) uint64 {
	m.regions = append(m.regions, r)
	return uint64(len(m.regions)-1+firstMapRegion) << regionShift
}

func (m *Maps) region(addr uint64) *region {
	id := int(addr>>regionShift) - firstMapRegion
	if id < 0 || id >= len(m.regions) {
		return nil
	}
	return m.regions[id]
}

// declare creates the storage of def, or checks that an existing map of
// the same name has the same definition.
func (m *Maps) declare(def *jit.Map) (*mapState, error) {
	if s, ok := m.byName[def.Name]; ok {
		if s.def != *def {
			return nil, fmt.Errorf("map %q: definition %+v differs from the stored map %+v", def.Name, *def, s.def)
		}
		return s, nil
	}
	s := &mapState{def: *def}
	switch def.Type {
	case jit.MapTypeArray, jit.MapTypeGPUArray:
		if def.KeySize != 4 {
			return nil, fmt.Errorf("map %q: array key size is %d, must be 4", def.Name, def.KeySize)
		}
		size := uint64(def.ValueSize) * uint64(def.MaxEntries)
		if size > 1<<30 {
			return nil, fmt.Errorf("map %q: %d bytes of values is more than the interpreter holds (1 GiB)", def.Name, size)
		}
		s.array = m.addRegion(&region{data: make([]byte, size), elem: int(def.ValueSize), writable: true})
	case jit.MapTypePerThreadArray, jit.MapTypePerWarpArray, jit.MapTypePerBlockArray:
		if def.KeySize != 4 {
			return nil, fmt.Errorf("map %q: array key size is %d, must be 4", def.Name, def.KeySize)
		}
		s.copies = map[uint64]uint64{}
	case jit.MapTypeHash:
		if def.KeySize == 0 {
			return nil, fmt.Errorf("map %q: hash key size is 0", def.Name)
		}
		s.hash = map[string]uint64{}
	case jit.MapTypeGPUHash:
		h, err := newGPUHash(m, def)
		if err != nil {
			return nil, err
		}
		s.gpuHash = h
	case jit.MapTypeGPURingbuf:
	default:
		return nil, fmt.Errorf("map %q: type %d is not supported", def.Name, def.Type)
	}
	if def.ValueSize == 0 && def.Type != jit.MapTypeGPURingbuf {
		return nil, fmt.Errorf("map %q: value size is 0", def.Name)
	}
	m.byName[def.Name] = s
	return s, nil
}

// copyRegion returns the region of the per-thread or per-warp copy id.
func (m *Maps) copyRegion(s *mapState, id uint64) uint64 {
	if r, ok := s.copies[id]; ok {
		return r
	}
	size := int(s.def.ValueSize) * int(s.def.MaxEntries)
	r := m.addRegion(&region{data: make([]byte, size), elem: int(s.def.ValueSize), writable: true})
	s.copies[id] = r
	return r
}

// lookup returns the address of the value for key (0 = not found).
func (m *Maps) lookup(s *mapState, key []byte, env *Env) uint64 {
	switch s.def.Type {
	case jit.MapTypeArray, jit.MapTypeGPUArray, jit.MapTypePerThreadArray, jit.MapTypePerWarpArray, jit.MapTypePerBlockArray:
		k := binary.LittleEndian.Uint32(key)
		if k >= s.def.MaxEntries {
			return 0
		}
		base := s.array
		switch s.def.Type {
		case jit.MapTypePerThreadArray:
			base = m.copyRegion(s, env.globalThreadID())
		case jit.MapTypePerWarpArray:
			base = m.copyRegion(s, env.globalThreadID()/32)
		case jit.MapTypePerBlockArray:
			// One copy per block, zeroed when first used (on a GPU the
			// block's shared memory is not zeroed: programs set it).
			base = m.copyRegion(s, env.blockID())
		}
		return base + uint64(k)*uint64(s.def.ValueSize)
	case jit.MapTypeHash:
		return s.hash[string(key)]
	case jit.MapTypeGPUHash:
		return s.gpuHash.lookup(key)
	}
	return 0
}

// update stores value under key; it returns 0 or a negative errno.
func (m *Maps) update(s *mapState, key, value []byte, flags uint64, env *Env) int64 {
	if flags > flagExist {
		return -errEINVAL
	}
	switch s.def.Type {
	case jit.MapTypeHash:
		r, ok := s.hash[string(key)]
		switch {
		case ok && flags == flagNoExist:
			return -errEEXIST
		case !ok && flags == flagExist:
			return -errENOENT
		case !ok && len(s.hash) >= int(s.def.MaxEntries):
			return -errE2BIG
		case !ok:
			r = m.addRegion(&region{data: make([]byte, s.def.ValueSize), elem: int(s.def.ValueSize), writable: true})
			s.hash[string(key)] = r
		}
		copy(m.region(r).data, value)
		return 0
	case jit.MapTypeGPUHash:
		return s.gpuHash.update(key, value, flags)
	case jit.MapTypeGPURingbuf:
		return -errEINVAL
	}
	if binary.LittleEndian.Uint32(key) >= s.def.MaxEntries {
		return -errE2BIG
	}
	if flags == flagNoExist {
		return -errEEXIST
	}
	addr := m.lookup(s, key, env)
	r := m.region(addr)
	off := int(addr & offsetMask)
	copy(r.data[off:off+int(s.def.ValueSize)], value)
	return 0
}

// remove deletes key from a hash map; arrays cannot delete.
func (m *Maps) remove(s *mapState, key []byte) int64 {
	if s.gpuHash != nil {
		return s.gpuHash.remove(key)
	}
	if s.def.Type != jit.MapTypeHash {
		return -errEINVAL
	}
	r, ok := s.hash[string(key)]
	if !ok {
		return -errENOENT
	}
	delete(s.hash, string(key))
	reg := m.region(r)
	reg.data, reg.writable = nil, false // later accesses through old pointers fault
	return 0
}

// output appends a ring-buffer record, or counts a drop when the ring's
// MaxEntries bytes are used up. It returns 0 or -ENOSPC.
func (s *mapState) output(data []byte) int64 {
	cost := RingRecordHeader + (len(data)+7)&^7
	if s.used+cost > int(s.def.MaxEntries) {
		s.dropped++
		return -errENOSPC
	}
	s.used += cost
	s.records = append(s.records, append([]byte(nil), data...))
	return 0
}

func (m *Maps) get(name string) (*mapState, error) {
	s, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("no map named %q", name)
	}
	return s, nil
}

func key32(k uint32) []byte { return binary.LittleEndian.AppendUint32(nil, k) }

// valueAt copies the value at addr.
func (m *Maps) valueAt(s *mapState, addr uint64) []byte {
	r := m.region(addr)
	off := int(addr & offsetMask)
	return append([]byte(nil), r.data[off:off+int(s.def.ValueSize)]...)
}

// Value returns a copy of the value at key of an array map (types 2, 1503).
func (m *Maps) Value(name string, key uint32) ([]byte, error) {
	s, err := m.get(name)
	if err != nil {
		return nil, err
	}
	if s.def.Type != jit.MapTypeArray && s.def.Type != jit.MapTypeGPUArray {
		return nil, fmt.Errorf("map %q: type %d is not a shared array (use ThreadValue, WarpValue or HashValue)", name, s.def.Type)
	}
	addr := m.lookup(s, key32(key), nil)
	if addr == 0 {
		return nil, fmt.Errorf("map %q: key %d is beyond max_entries %d", name, key, s.def.MaxEntries)
	}
	return m.valueAt(s, addr), nil
}

// ThreadValue returns a copy of the value at key of a per-thread array
// (1502) for the global thread id (see Env.GlobalThreadID); a thread that
// never touched the map reads zeros.
func (m *Maps) ThreadValue(name string, thread uint64, key uint32) ([]byte, error) {
	return m.copyValue(name, jit.MapTypePerThreadArray, thread, key)
}

// BlockValue returns a copy of the value at key of a per-block array (1601)
// for the linear block index; a block that never touched the map reads
// zeros.
func (m *Maps) BlockValue(name string, block uint64, key uint32) ([]byte, error) {
	return m.copyValue(name, jit.MapTypePerBlockArray, block, key)
}

// WarpValue returns a copy of the value at key of a per-warp array (1600)
// for the global warp id (see Env.GlobalWarpID).
func (m *Maps) WarpValue(name string, warp uint64, key uint32) ([]byte, error) {
	return m.copyValue(name, jit.MapTypePerWarpArray, warp, key)
}

func (m *Maps) copyValue(name string, typ jit.MapType, id uint64, key uint32) ([]byte, error) {
	s, err := m.get(name)
	if err != nil {
		return nil, err
	}
	if s.def.Type != typ {
		return nil, fmt.Errorf("map %q: type %d, not %d", name, s.def.Type, typ)
	}
	if key >= s.def.MaxEntries {
		return nil, fmt.Errorf("map %q: key %d is beyond max_entries %d", name, key, s.def.MaxEntries)
	}
	r, ok := s.copies[id]
	if !ok {
		return make([]byte, s.def.ValueSize), nil
	}
	return m.valueAt(s, r+uint64(key)*uint64(s.def.ValueSize)), nil
}

// HashValue returns a copy of the value stored under key in a hash map
// (1 or 1501).
func (m *Maps) HashValue(name string, key []byte) ([]byte, bool, error) {
	s, err := m.get(name)
	if err != nil {
		return nil, false, err
	}
	if s.def.Type != jit.MapTypeHash && s.def.Type != jit.MapTypeGPUHash {
		return nil, false, fmt.Errorf("map %q: type %d is not a hash", name, s.def.Type)
	}
	if len(key) != int(s.def.KeySize) {
		return nil, false, fmt.Errorf("map %q: key is %d bytes, want %d", name, len(key), s.def.KeySize)
	}
	if s.gpuHash != nil {
		addr := s.gpuHash.lookup(key)
		if addr == 0 {
			return nil, false, nil
		}
		return m.valueAt(s, addr), true, nil
	}
	r, ok := s.hash[string(key)]
	if !ok {
		return nil, false, nil
	}
	return m.valueAt(s, r), true, nil
}

// Declare creates the storage for def now (runs create it on first use),
// so that Update can seed it before a program runs.
func (m *Maps) Declare(def *jit.Map) error {
	_, err := m.declare(def)
	return err
}

// Update stores value under key in an array (key: 4 bytes) or hash map, as
// map_update_elem with BPF_ANY would.
func (m *Maps) Update(name string, key, value []byte) error {
	s, err := m.get(name)
	if err != nil {
		return err
	}
	if len(key) != int(s.def.KeySize) || len(value) != int(s.def.ValueSize) {
		return fmt.Errorf("map %q: key/value are %d/%d bytes, want %d/%d", name, len(key), len(value), s.def.KeySize, s.def.ValueSize)
	}
	if s.def.Type == jit.MapTypePerThreadArray || s.def.Type == jit.MapTypePerWarpArray || s.def.Type == jit.MapTypePerBlockArray {
		return fmt.Errorf("map %q: per-thread, per-warp and per-block arrays are written by programs only", name)
	}
	if rc := m.update(s, key, value, flagAny, nil); rc != 0 {
		return fmt.Errorf("map %q: update failed with errno %d", name, -rc)
	}
	return nil
}

// Records returns the ring-buffer records of a 1527 map in the order they
// were written, and how many were dropped because the ring was full.
func (m *Maps) Records(name string) ([][]byte, uint64, error) {
	s, err := m.get(name)
	if err != nil {
		return nil, 0, err
	}
	if s.def.Type != jit.MapTypeGPURingbuf {
		return nil, 0, fmt.Errorf("map %q: type %d is not a GPU ring buffer", name, s.def.Type)
	}
	return s.records, s.dropped, nil
}

// Drain empties a ring buffer (as a consumer would) and returns what it held.
func (m *Maps) Drain(name string) ([][]byte, error) {
	recs, _, err := m.Records(name)
	if err != nil {
		return nil, err
	}
	s := m.byName[name]
	s.records, s.used = nil, 0
	return recs, nil
}
