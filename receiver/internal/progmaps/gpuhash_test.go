package progmaps

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// TestGPUHashMetrics: a GPU hash map's region holds its table; seeds are
// inserted under their keys, what the GPU inserts is reported per live
// key, and deleted keys are not.
func TestGPUHashMetrics(t *testing.T) {
	m := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 8}
	d, err := newDef("x.o", m, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := jit.GPUHashLayout(m)
	if d.Keys != l.Slots+1 || uint64(d.SlotSize) != l.Stride {
		t.Fatalf("region of %d × %d bytes, want %d × %d", d.Keys, d.SlotSize, l.Slots+1, l.Stride)
	}
	if err := addSeed(d, config.MapSeed{Map: "gh", Index: 1000, Words: []uint64{5}}); err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance([]*Def{d}, 42, 7, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	elem := tableElem(in.Array("gh"))
	key := func(k uint32) []byte { return binary.LittleEndian.AppendUint32(nil, k) }
	for _, kv := range [][2]uint32{{7, 70}, {9, 90}} {
		if err := l.Put(m, elem, key(kv[0]), binary.LittleEndian.AppendUint64(nil, uint64(kv[1]))); err != nil {
			t.Fatal(err)
		}
	}
	// Key 9's slot becomes a tombstone, as a GPU delete leaves it.
	es, _ := l.Entries(m, elem)
	for s := range l.Slots {
		b, _ := elem(s + 1)
		if binary.LittleEndian.Uint32(b) == jit.HashSlotLive && binary.LittleEndian.Uint32(b[jit.HashKeyAt:]) == 9 {
			binary.LittleEndian.PutUint32(b, jit.HashSlotDeleted)
		}
	}
	if len(es) != 3 {
		t.Fatalf("%d entries before the delete, want 3 (seed, 7, 9)", len(es))
	}
	c := NewCollector(CollectorOptions{MaxMapKeys: 100})
	sm := pmetric.NewMetricSlice()
	c.AppendMetrics(sm, []*Instance{in}, time.Now())
	got := points(sm)
	want := map[string]float64{"gpuprobe.map.gh.value{gpuprobe.map.key=7}": 70, "gpuprobe.map.gh.value{gpuprobe.map.key=1000}": 5}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (points %v)", k, got[k], v, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "key=9}") {
			t.Errorf("deleted key reported: %s", k)
		}
	}
}

func TestGPUHashKeyAttr(t *testing.T) {
	if n, s := hashKeyAttr([]byte{1, 2}); n != 0x201 || s != "" {
		t.Errorf("2-byte key: %d %q", n, s)
	}
	if _, s := hashKeyAttr(make([]byte, 12)); s != "000000000000000000000000" {
		t.Errorf("12-byte key: %q", s)
	}
}
