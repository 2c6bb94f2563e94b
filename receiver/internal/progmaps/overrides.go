package progmaps

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
)

// applyOverrides applies pc's record_types to defs, the GPU maps of the
// object's attached programs. Errors name the config key.
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

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
