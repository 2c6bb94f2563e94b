package progmaps

import (
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"
	"github.com/gpuprobe/gpuprobe/receiver/internal/btfdecode"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Names of ring-record fields with a meaning (last path segment, any case).
var (
	timestampNames = []string{"timestamp_ns", "ts_ns", "time_ns", "timestamp", "ts"}
	deviceNames    = []string{"device", "device_index", "cuda_device", "dev"}
)

// compileFields decides the metric name, index attributes and kind of every
// decoded field. tags maps member paths to their BTF decl tags.
func compileFields(base string, dec *btfdecode.Decoder, tags map[string][]string) []field {
	descs := dec.Fields()
	out := make([]field, len(descs))
	for i, d := range descs {
		name, idx := stripIndices(d.Name)
		f := field{index: idx}
		if name == "" {
			f.metric = base + ".value"
		} else {
			f.metric = base + "." + name
		}
		switch d.Kind {
		case btfdecode.KindUint:
			f.numeric, f.sum = true, true
		case btfdecode.KindInt, btfdecode.KindBool, btfdecode.KindEnum:
			f.numeric = true
		case btfdecode.KindFloat:
			f.numeric, f.float = true, true
		}
		if f.numeric {
			switch tagOf(tags, d.Name) {
			case TagSum:
				f.sum = true
			case TagGauge:
				f.sum = false
			}
		}
		out[i] = f
	}
	return out
}

// stripIndices removes the "[n]" parts of a field path and returns them.
func stripIndices(path string) (string, []int64) {
	if !strings.Contains(path, "[") {
		return path, nil
	}
	var b strings.Builder
	var idx []int64
	for i := 0; i < len(path); i++ {
		if path[i] != '[' {
			b.WriteByte(path[i])
			continue
		}
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			b.WriteString(path[i:])
			break
		}
		n, err := strconv.ParseInt(path[i+1:i+j], 10, 64)
		if err != nil {
			b.WriteString(path[i : i+j+1])
		} else {
			idx = append(idx, n)
		}
		i += j
	}
	return b.String(), idx
}

// Attributes of a user-map data point, in the receiver's namespace so
// that they never pass for an application's or a convention's.
const (
	AttrMapKey   = "gpuprobe.map.key"   // the map key
	AttrMapIndex = "gpuprobe.map.index" // the first array index of a field path
)

// indexAttr names the attribute of the n-th array index of a field path:
// gpuprobe.map.index, then gpuprobe.map.index.1, ….
func indexAttr(n int) string {
	if n == 0 {
		return AttrMapIndex
	}
	return AttrMapIndex + "." + strconv.Itoa(n)
}

// memberTags collects the decl tags of the struct and union members of t,
// keyed by the member's path as btfdecode names it (arrays are not entered:
// a tag on an array member covers its elements).
func memberTags(t btf.Type) map[string][]string {
	tags := map[string][]string{}
	var walk func(t btf.Type, prefix string, depth int)
	walk = func(t btf.Type, prefix string, depth int) {
		if depth > btfdecode.MaxDepth {
			return
		}
		var ms []btf.Member
		switch v := btf.UnderlyingType(t).(type) {
		case *btf.Struct:
			ms = v.Members
		case *btf.Union:
			ms = v.Members
		default:
			return
		}
		for _, m := range ms {
			path := m.Name
			if prefix != "" && m.Name != "" {
				path = prefix + "." + m.Name
			} else if m.Name == "" {
				path = prefix
			}
			if len(m.Tags) > 0 && m.Name != "" {
				tags[path] = m.Tags
			}
			walk(m.Type, path, depth+1)
		}
	}
	walk(t, "", 0)
	return tags
}

// tagOf returns the gpuprobe tag that applies to the field at path: the
// tag of the longest member path that is path or contains it.
func tagOf(tags map[string][]string, path string) string {
	best, bestLen := "", -1
	for p, ts := range tags {
		if len(p) <= bestLen || !covers(p, path) {
			continue
		}
		for _, t := range ts {
			if t == TagSum || t == TagGauge {
				best, bestLen = t, len(p)
			}
		}
	}
	return best
}

func covers(prefix, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	if len(path) == len(prefix) {
		return true
	}
	c := path[len(prefix)]
	return c == '.' || c == '['
}

// classifyRing finds, for ring-buffer records, the span hint, the event
// timestamp field and the device field.
func (d *Def) classifyRing() {
	if d.Kind != shm.KindRing {
		return
	}
	h := d.Dec.Span()
	d.rec.ringSpan = h.OK
	descs := d.Dec.Fields()
	d.rec.tsField = findField(descs, timestampNames, true)
	d.rec.devField = findField(descs, deviceNames, false)
	if h.OK {
		d.rec.tids = append(d.rec.tids, h.Start, h.End)
	} else if d.rec.tsField >= 0 {
		d.rec.tids = append(d.rec.tids, d.rec.tsField)
	}
}

// findField returns the first integer field whose last path segment is one
// of names (in the order of names), or -1. want64 asks for 8-byte fields.
func findField(descs []btfdecode.Desc, names []string, want64 bool) int {
	for _, n := range names {
		for i, d := range descs {
			if d.Kind != btfdecode.KindUint && d.Kind != btfdecode.KindInt {
				continue
			}
			if want64 && (d.Size != 8 || d.BitSize != 0) {
				continue
			}
			last := d.Name
			if j := strings.LastIndexByte(last, '.'); j >= 0 {
				last = last[j+1:]
			}
			if strings.EqualFold(last, n) {
				return i
			}
		}
	}
	return -1
}
