package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Array is a mapped array region: a plain GPU array, a per-thread array or a
// per-warp array. Values sit in flat 8-byte aligned slots (see the package
// comment).
type Array struct {
	r         *Region
	kind      Kind
	valueSize uint64
	keys      uint64
	lanes     uint64
	stride    uint64
	data      unsafe.Pointer
}

// CreateArray creates an array region: kind is KindArray (lanes is then 1),
// KindPerThreadArray (lanes = threads per key) or KindPerWarpArray (lanes =
// warps per key).
func CreateArray(kind Kind, valueSize, maxEntries, lanes uint32) (*Array, error) {
	if kind != KindArray && kind != KindPerThreadArray && kind != KindPerWarpArray {
		return nil, fmt.Errorf("shm: CreateArray: kind %v is not an array kind", kind)
	}
	if kind == KindArray && lanes == 0 {
		lanes = 1
	}
	r, err := Create(Spec{Kind: kind, ValueSize: valueSize, MaxEntries: maxEntries, Lanes: lanes})
	if err != nil {
		return nil, err
	}
	return NewArray(r)
}

// NewArray wraps a mapped array region (using its header as mapped).
func NewArray(r *Region) (*Array, error) {
	h := r.Header()
	switch h.Kind {
	case KindArray, KindPerThreadArray, KindPerWarpArray:
	default:
		return nil, fmt.Errorf("shm: region is a %v, not an array", h.Kind)
	}
	return &Array{r: r, kind: h.Kind, valueSize: uint64(h.ValueSize), keys: uint64(h.MaxEntries),
		lanes: uint64(h.Lanes), stride: uint64(h.Stride), data: unsafe.Add(r.base, DataOffset)}, nil
}

// Region returns the array's region.
func (a *Array) Region() *Region { return a.r }

// Close closes the array's region.
func (a *Array) Close() error { return a.r.Close() }

// Keys returns the number of keys (max_entries).
func (a *Array) Keys() int { return int(a.keys) }

// Lanes returns the threads (or warps) per key; 1 for a plain array.
func (a *Array) Lanes() int { return int(a.lanes) }

// ValueSize returns the bytes of one value.
func (a *Array) ValueSize() int { return int(a.valueSize) }

// Offset returns the byte offset of the value of key for lane (thread or
// warp index; 0 for a plain array) from the start of the region, or false
// when key or lane is out of range (where generated code gives NULL).
func (a *Array) Offset(key, lane uint64) (uint64, bool) {
	if key >= a.keys || lane >= a.lanes {
		return 0, false
	}
	return DataOffset + (key*a.lanes+lane)*a.stride, true
}

// Value returns the value bytes of key for lane, a view into shared memory
// (valid until Close), or an error naming the bad index.
func (a *Array) Value(key, lane uint64) ([]byte, error) {
	off, ok := a.Offset(key, lane)
	if !ok {
		return nil, a.rangeErr(key, lane)
	}
	return unsafe.Slice((*byte)(unsafe.Add(a.r.base, off)), a.valueSize), nil
}

// Uint64 atomically loads the first 8 bytes of the value of key for lane,
// little-endian (values of 8 bytes or more; counters).
func (a *Array) Uint64(key, lane uint64) (uint64, error) {
	p, err := a.word(key, lane)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint64(p), nil
}

// AddUint64 atomically adds delta to the first 8 bytes of the value of key
// for lane, as a probe's __sync_fetch_and_add does, and returns the new value.
func (a *Array) AddUint64(key, lane, delta uint64) (uint64, error) {
	p, err := a.word(key, lane)
	if err != nil {
		return 0, err
	}
	return atomic.AddUint64(p, delta), nil
}

// StoreUint64 atomically stores v in the first 8 bytes of the value of key
// for lane (a value the GPU reads while the host updates it).
func (a *Array) StoreUint64(key, lane, v uint64) error {
	p, err := a.word(key, lane)
	if err != nil {
		return err
	}
	atomic.StoreUint64(p, v)
	return nil
}

func (a *Array) word(key, lane uint64) (*uint64, error) {
	if a.valueSize < 8 {
		return nil, fmt.Errorf("shm: %v value size is %d bytes, an 8-byte counter does not fit", a.kind, a.valueSize)
	}
	off, ok := a.Offset(key, lane)
	if !ok {
		return nil, a.rangeErr(key, lane)
	}
	return a.r.u64(off), nil
}

func (a *Array) rangeErr(key, lane uint64) error {
	if key >= a.keys {
		return fmt.Errorf("shm: %v key %d out of range [0, %d)", a.kind, key, a.keys)
	}
	return fmt.Errorf("shm: %v lane %d of key %d out of range [0, %d)", a.kind, lane, key, a.lanes)
}

// Sum adds the first 8 bytes of key's value over all lanes: the total of a
// per-thread or per-warp counter.
func (a *Array) Sum(key uint64) (uint64, error) {
	var s uint64
	for l := uint64(0); l < a.lanes; l++ {
		v, err := a.Uint64(key, l)
		if err != nil {
			return 0, err
		}
		s += v
	}
	return s, nil
}
