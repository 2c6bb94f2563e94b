package progmaps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// seed is one initial value of an array map (programs[i]::map_values).
type seed struct {
	key   uint32
	value []byte // ValueSize bytes
}

// applyOverrides applies pc's record_types and map_values to defs, the GPU
// maps of the object's attached programs. Errors name the config key.
func applyOverrides(pc config.ProgramConfig, key string, spec *ebpf.CollectionSpec, defs []*Def) error {
	byName := make(map[string]*Def, len(defs))
	for _, d := range defs {
		byName[d.Name] = d
	}
	for _, m := range sortedNames(pc.RecordTypes) {
		k := key + "::record_types::" + m
		if err := setRecordType(byName[m], m, pc.RecordTypes[m], spec); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	seeds, err := pc.MapSeeds(key)
	if err != nil {
		return err
	}
	for _, s := range seeds {
		if err := addSeed(byName[s.Map], s); err != nil {
			return fmt.Errorf("%s: %w", s.Key, err)
		}
	}
	return nil
}

// setRecordType decodes the records of ring d with the struct named st.
func setRecordType(d *Def, m, st string, spec *ebpf.CollectionSpec) error {
	if d == nil {
		return fmt.Errorf("no GPU map %q in the attached programs", m)
	}
	if d.Type != jit.MapTypeGPURingbuf {
		return fmt.Errorf("map %q has type %d; only GPU ring buffers (%d) take a record type", m, d.Type, jit.MapTypeGPURingbuf)
	}
	var s *btf.Struct
	if spec.Types == nil || spec.Types.TypeByName(st, &s) != nil {
		return fmt.Errorf("struct %q not in the object's BTF (clang emits a struct there when a map, a global or a function's signature uses it)", st)
	}
	if s.Size > d.ValueSize {
		return fmt.Errorf("struct %q is %d bytes, larger than the map's value (%d bytes), which sizes its ring slots", st, s.Size, d.ValueSize)
	}
	return d.compile(s)
}

// addSeed adds the initial value s to array d.
func addSeed(d *Def, s config.MapSeed) error {
	switch {
	case d == nil:
		return fmt.Errorf("no GPU map %q in the attached programs", s.Map)
	case d.Kind == shm.KindRing:
		return fmt.Errorf("map %q is a ring buffer (%d); only arrays (%d, %d, %d) take initial values",
			s.Map, d.Type, jit.MapTypePerThreadArray, jit.MapTypeGPUArray, jit.MapTypePerWarpArray)
	case d.hash != nil && d.hash.KeySize != 4:
		return fmt.Errorf("map %q is a GPU hash map with %d-byte keys; initial values take 4-byte keys", s.Map, d.hash.KeySize)
	case d.hash == nil && s.Index >= d.Keys:
		return fmt.Errorf("key %d out of range: map %q has max_entries %d", s.Index, s.Map, d.Keys)
	}
	b := make([]byte, 8*len(s.Words))
	for i, w := range s.Words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	if n := usedBytes(b); n > int(d.ValueSize) {
		return fmt.Errorf("value needs %d bytes; map %q's value is %d bytes", n, s.Map, d.ValueSize)
	}
	v := make([]byte, d.ValueSize)
	copy(v, b)
	d.seeds = append(d.seeds, seed{key: s.Index, value: v})
	return nil
}

// usedBytes is the length of b without its trailing zero bytes.
func usedBytes(b []byte) int {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return n
}

// writeSeeds writes d's initial values into a new region of the map.
func writeSeeds(d *Def, a *shm.Array) error {
	if d.hash != nil {
		return writeHashSeeds(d, a)
	}
	var errs []error
	for _, s := range d.seeds {
		for lane := uint64(0); lane < uint64(d.Lanes); lane++ {
			v, err := a.Value(uint64(s.key), lane)
			if err != nil {
				errs = append(errs, err)
				break
			}
			copy(v, s.value)
		}
	}
	return errors.Join(errs...)
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
