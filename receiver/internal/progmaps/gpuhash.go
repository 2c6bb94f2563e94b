package progmaps

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// A GPU hash map (1501) gets an array region holding its table
// (jit.HashLayout): element 0 the header, element 1+s slot s, each
// SlotSize bytes. Its metrics are those of an array, one series per live
// key: gpuprobe.map.key is the key as a little-endian integer (keys of at
// most 8 bytes) or its hex bytes.

// setHash lays out d as the table of hash map m with entries entries and
// returns the element size.
func (d *Def) setHash(m *jit.Map, entries uint32) uint64 {
	h := *m
	h.MaxEntries = entries
	l := jit.GPUHashLayout(&h)
	d.hash, d.Kind, d.Keys, d.SlotSize = &h, shm.KindArray, l.Slots+1, uint32(l.Stride)
	return l.Stride
}

// tableElem returns element i of a's table, in place.
func tableElem(a arraySource) func(i uint32) ([]byte, error) {
	return func(i uint32) ([]byte, error) { return a.Value(uint64(i), 0) }
}

// writeHashSeeds inserts d's initial values, under their 4-byte keys.
func writeHashSeeds(d *Def, a *shm.Array) error {
	l := jit.GPUHashLayout(d.hash)
	for _, s := range d.seeds {
		if err := l.Put(d.hash, tableElem(a), binary.LittleEndian.AppendUint32(nil, s.key), s.value); err != nil {
			return fmt.Errorf("initial value of key %d: %w", s.key, err)
		}
	}
	return nil
}

// hashTable appends the data points of every live entry of hash map a
// (at most limits::max_map_keys) and returns how many it left out.
func (c *Collector) hashTable(set *metricSet, in *Instance, a *arrayInst, start, ts pcommon.Timestamp) uint64 {
	es, err := jit.GPUHashLayout(a.def.hash).Entries(a.def.hash, tableElem(a.src))
	if err != nil {
		c.counters.ReadErrors++
		return 0
	}
	var emitted, over uint64
	for _, e := range es {
		fs, err := a.def.Dec.DecodeInto(c.fields, e.Value)
		c.fields = fs
		if err != nil {
			continue
		}
		if emitted >= uint64(c.o.MaxMapKeys) {
			over++
			continue
		}
		emitted++
		num, str := hashKeyAttr(e.Key)
		numberPoints(set, in, a, fs, start, ts, func(m pcommon.Map, fd *field) {
			pointAttrs(m, in, num, fd)
			if str != "" {
				m.PutStr(AttrMapKey, str)
			}
		})
	}
	return over
}

// hashKeyAttr is the gpuprobe.map.key of a hash key: a number for keys of
// at most 8 bytes, else ("" aside) the key's hex bytes.
func hashKeyAttr(key []byte) (uint64, string) {
	if len(key) > 8 {
		return 0, hex.EncodeToString(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.LittleEndian.Uint64(b[:]), ""
}
