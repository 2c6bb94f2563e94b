// Package progmaps turns the GPU-resident maps of the user's eBPF programs
// (config key programs) into shared-memory regions and telemetry: it loads
// the ELF objects, sizes one shm region per GPU map (array 1503, per-thread
// array 1502, per-warp array 1600, hash 1501, ring buffer 1527), creates a set of them
// for every connected application (Instance), and converts what GPU code
// wrote into metrics (arrays) and spans or span events (ring buffers),
// decoding values field by field with the map's BTF type (btfdecode).
package progmaps

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/receiver/internal/btfdecode"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Bounds of the regions made for user maps.
const (
	MaxNameLen     = 40      // agent descriptors carry names of at most 40 bytes
	MaxRegionBytes = 1 << 30 // data bytes of one map region
	MinRingSlots   = 64      // ring buffers get at least this many slots
	MaxRingSlots   = 1 << 20 // and at most this many
	WarpSize       = 32      // threads per warp, for per-warp arrays
)

// Tags (BTF decl tags on struct members) that choose how an array field is
// reported: __attribute__((btf_decl_tag("gpuprobe:sum"))) or
// "gpuprobe:gauge". A tag on a member applies to every field inside it.
const (
	TagSum   = "gpuprobe:sum"
	TagGauge = "gpuprobe:gauge"
)

// Options size the regions.
type Options struct {
	MaxThreads uint32 // lanes of a per-thread array (buffers::max_threads); per-warp: /32
	MapEntries uint32 // max_entries for maps that leave it 0 (buffers::map_entries)
}

// Def is one GPU map of the configured programs, with its region layout
// and decoder.
type Def struct {
	Object     string      // the ELF object's path
	Name       string      // map name (also the agent descriptor's name)
	Type       jit.MapType // 1501, 1502, 1503, 1527 or 1600
	Kind       shm.Kind    // region kind
	ID         uint32      // region header id: index in the list Load returns
	ValueSize  uint32      // bytes of a value (ring: of the declared record type)
	Keys       uint32      // arrays: max_entries; rings: slots
	Lanes      uint32      // per-thread/per-warp arrays: threads/warps per key; else 1
	SlotSize   uint32      // rings: bytes per slot, 16-byte slot header included; hash maps: table element
	Dec        *btfdecode.Decoder
	fields     []field      // one per decoder field
	rec        recordLayout // ring records: how they map to spans and events
	metricBase string       // "gpuprobe.map.<name>"
	seeds      []seed       // arrays: initial values (programs[i]::map_values)
	hash       *jit.Map     // GPU hash maps: the definition that lays out the table
}

// recordLayout is how a ring's records map to spans or events.
type recordLayout struct {
	ringSpan  bool  // ring records carry start/end: spans, not events
	tsField   int   // ring records: index of the event timestamp field, or -1
	devField  int   // ring records: index of a device field, or -1
	tids      []int // ring records: fields that are not span attributes
	hostClock bool  // host programs' maps: times are CLOCK_MONOTONIC, not %globaltimer
	pidField  int   // host ring records: index of a pid field, or -1
	pidIsTgid bool  // ... which is a pid_tgid (tgid in the upper 32 bits)
}

// field says how one decoded field of an array value is reported.
type field struct {
	metric  string  // metric name
	index   []int64 // array indices in the field path (become attributes)
	numeric bool    // integer, float, bool or enum
	sum     bool    // cumulative sum (else gauge)
	float   bool
}

// Load returns the GPU maps that the attached programs of programs use, in
// a stable order; objs[i] is programs[i]'s object (ReadObjects), only read.
// Every error names the config key (programs[i]::path or ::attach[j]) and
// the map.
func Load(programs []config.ProgramConfig, objs []*jit.Object, o Options) ([]*Def, error) {
	if len(objs) != len(programs) {
		return nil, fmt.Errorf("programs: %d objects for %d programs", len(objs), len(programs))
	}
	if o.MaxThreads == 0 {
		o.MaxThreads = config.DefaultMaxThreads
	}
	if o.MapEntries == 0 {
		o.MapEntries = config.DefaultMapEntries
	}
	var defs []*Def
	owner := map[string]int{} // map name → programs index
	for i, pc := range programs {
		key := fmt.Sprintf("programs[%d]", i)
		spec, progs := objs[i].Spec, objs[i].Programs
		sel, err := selectPrograms(progs, pc.Attach, key, pc.Path)
		if err != nil {
			return nil, err
		}
		first := len(defs)
		for _, p := range sel {
			for _, m := range p.Maps {
				if !isGPUMap(m.Type) {
					continue
				}
				if j, ok := owner[m.Name]; ok {
					if j == i {
						continue // shared by two programs of one object
					}
					return nil, fmt.Errorf("%s::path %s: map %q is also defined by programs[%d] (%s); map names must be unique across programs",
						key, pc.Path, m.Name, j, programs[j].Path)
				}
				d, err := newDef(pc.Path, m, spec.Maps[m.Name], o)
				if err != nil {
					return nil, fmt.Errorf("%s::path %s: map %q: %w", key, pc.Path, m.Name, err)
				}
				d.ID = uint32(len(defs))
				owner[m.Name] = i
				defs = append(defs, d)
			}
		}
		if err := applyOverrides(pc, key, spec, defs[first:]); err != nil {
			return nil, err
		}
	}
	return defs, nil
}

// selectPrograms returns the GPU programs named by attach (all GPU programs
// when attach is empty).
func selectPrograms(progs []*jit.Program, attach []string, key, path string) ([]*jit.Program, error) {
	if len(attach) == 0 {
		var out []*jit.Program
		for _, p := range progs {
			if p.IsGPU() {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []*jit.Program
	for j, name := range attach {
		k := slices.IndexFunc(progs, func(p *jit.Program) bool { return p.Name == name })
		if k < 0 {
			names := make([]string, len(progs))
			for n, p := range progs {
				names[n] = p.Name
			}
			return nil, fmt.Errorf("%s::attach[%d]: no program %q in %s (it has: %s)", key, j, name, path, strings.Join(names, ", "))
		}
		if !progs[k].IsGPU() {
			continue // host programs are loaded into Linux; their maps are not GPU regions
		}
		out = append(out, progs[k])
	}
	return out, nil
}

func isGPUMap(t jit.MapType) bool {
	switch t {
	case jit.MapTypeGPUArray, jit.MapTypeGPUHash, jit.MapTypePerThreadArray, jit.MapTypePerWarpArray, jit.MapTypeGPURingbuf:
		return true
	}
	return false
}

func align8(v uint64) uint64 { return (v + 7) &^ 7 }

// newDef sizes the region of map m and compiles the decoder of its value.
func newDef(path string, m *jit.Map, ms *ebpf.MapSpec, o Options) (*Def, error) {
	if len(m.Name) > MaxNameLen {
		return nil, fmt.Errorf("name is %d bytes; at most %d fit an agent region descriptor", len(m.Name), MaxNameLen)
	}
	if m.ValueSize == 0 {
		return nil, errors.New("value size 0")
	}
	d := &Def{Object: path, Name: m.Name, Type: m.Type, ValueSize: m.ValueSize, Lanes: 1,
		metricBase: "gpuprobe.map." + m.Name, rec: recordLayout{tsField: -1, devField: -1, pidField: -1}}
	entries := m.MaxEntries
	if entries == 0 {
		entries = o.MapEntries
	}
	stride := align8(uint64(m.ValueSize))
	switch m.Type {
	case jit.MapTypeGPUArray:
		d.Kind, d.Keys = shm.KindArray, entries
	case jit.MapTypeGPUHash:
		stride = d.setHash(m, entries)
	case jit.MapTypePerThreadArray:
		d.Kind, d.Keys, d.Lanes = shm.KindPerThreadArray, entries, o.MaxThreads
	case jit.MapTypePerWarpArray:
		d.Kind, d.Keys, d.Lanes = shm.KindPerWarpArray, entries, (o.MaxThreads+WarpSize-1)/WarpSize
	case jit.MapTypeGPURingbuf:
		// max_entries is the payload space in bytes (as for BPF ring
		// buffers): one slot per record of the declared value type.
		d.Kind = shm.KindRing
		if stride+shm.SlotHeaderSize > 1<<16 {
			return nil, fmt.Errorf("record of %d bytes does not fit a ring slot (at most %d)", m.ValueSize, 1<<16-shm.SlotHeaderSize)
		}
		d.SlotSize = uint32(stride + shm.SlotHeaderSize)
		n := (uint64(entries) + stride - 1) / stride
		n = min(max(n, MinRingSlots), MaxRingSlots)
		d.Keys = uint32(1) << bits.Len64(n-1)
		if uint64(d.Keys)*uint64(d.SlotSize) > MaxRegionBytes {
			return nil, fmt.Errorf("%d slots of %d bytes exceed %d bytes", d.Keys, d.SlotSize, MaxRegionBytes)
		}
	default:
		return nil, fmt.Errorf("type %d is not a GPU map", m.Type)
	}
	if d.Kind != shm.KindRing {
		if b := uint64(d.Keys) * uint64(d.Lanes) * stride; b > MaxRegionBytes {
			return nil, fmt.Errorf("%d keys × %d lanes × %d bytes = %d bytes exceed %d; lower max_entries or buffers::max_threads",
				d.Keys, d.Lanes, stride, b, MaxRegionBytes)
		}
	}
	var vt btf.Type
	if ms != nil {
		vt = ms.Value
	}
	if err := d.compile(vt); err != nil {
		return nil, err
	}
	return d, nil
}

// compile builds the decoder of the value type vt (nil: raw words of
// d.ValueSize bytes) and the metric and ring-record fields.
func (d *Def) compile(vt btf.Type) error {
	if vt == nil {
		vt = rawType(d.ValueSize)
	}
	dec, err := btfdecode.New(vt)
	if err != nil {
		return fmt.Errorf("value type: %w", err)
	}
	if dec.Size() > int(d.ValueSize) {
		return fmt.Errorf("value type %s is %d bytes, larger than the value size %d", dec.TypeName(), dec.Size(), d.ValueSize)
	}
	d.Dec = dec
	d.fields = compileFields(d.metricBase, dec, memberTags(vt))
	d.classifyRing()
	return nil
}

// rawType is the value type of a map without BTF (legacy "maps" section):
// u64 words when the size allows, else bytes.
func rawType(size uint32) btf.Type {
	u64 := &btf.Int{Name: "u64", Size: 8}
	u8 := &btf.Int{Name: "u8", Size: 1}
	switch {
	case size == 8:
		return u64
	case size%8 == 0:
		return &btf.Array{Type: u64, Index: &btf.Int{Name: "u32", Size: 4}, Nelems: size / 8}
	case size == 4:
		return &btf.Int{Name: "u32", Size: 4}
	}
	return &btf.Array{Type: u8, Index: &btf.Int{Name: "u32", Size: 4}, Nelems: size}
}
