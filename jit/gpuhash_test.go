package jit

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestGPUHashLayout(t *testing.T) {
	tests := []struct {
		key, value, entries uint32
		want                HashLayout
	}{
		{4, 8, 1, HashLayout{Slots: 2, Stride: 24, ValueAt: 16}},
		{4, 8, 2, HashLayout{Slots: 4, Stride: 24, ValueAt: 16}},
		{12, 5, 100, HashLayout{Slots: 256, Stride: 32, ValueAt: 24}},
		{64, 4096, HashMaxEntries, HashLayout{Slots: 1 << 21, Stride: 8 + 64 + 4096, ValueAt: 72}},
	}
	for _, tt := range tests {
		got := GPUHashLayout(&Map{KeySize: tt.key, ValueSize: tt.value, MaxEntries: tt.entries})
		if got != tt.want {
			t.Errorf("key %d value %d entries %d: %+v, want %+v", tt.key, tt.value, tt.entries, got, tt.want)
		}
	}
	if l := (HashLayout{Slots: 8}); l.Probes() != 8 || (HashLayout{Slots: 1 << 10}).Probes() != HashProbeLimit {
		t.Error("Probes: want every slot of a small table, HashProbeLimit of a large one")
	}
}

func TestCheckGPUHash(t *testing.T) {
	tests := []struct {
		m    Map
		want string // "" for valid
	}{
		{Map{KeySize: 4, ValueSize: 8, MaxEntries: 2}, ""},
		{Map{KeySize: 64, ValueSize: 4096, MaxEntries: HashMaxEntries}, ""},
		{Map{KeySize: 0, ValueSize: 8, MaxEntries: 2}, "key size 0"},
		{Map{KeySize: 65, ValueSize: 8, MaxEntries: 2}, "key size 65"},
		{Map{KeySize: 4, ValueSize: 4097, MaxEntries: 2}, "value size 4097"},
		{Map{KeySize: 4, ValueSize: 8}, "max_entries 0"},
		{Map{KeySize: 4, ValueSize: 8, MaxEntries: HashMaxEntries + 1}, "exceeds"},
	}
	for _, tt := range tests {
		tt.m.Type, tt.m.Name = MapTypeGPUHash, "h"
		err := checkGPUMap(&tt.m)
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.m, err, tt.want)
		}
	}
}

func TestHashEntries(t *testing.T) {
	m := &Map{Type: MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 2}
	l := GPUHashLayout(m)
	table := make([]byte, l.Bytes())
	put := func(s, state, key uint32, v uint64) {
		b := table[l.SlotAt(s):]
		binary.LittleEndian.PutUint32(b, state)
		binary.LittleEndian.PutUint32(b[HashKeyAt:], key)
		binary.LittleEndian.PutUint64(b[l.ValueAt:], v)
	}
	put(0, HashSlotLive, 7, 70)
	put(1, HashSlotDeleted, 8, 80)
	put(2, HashSlotBusy, 9, 90)
	put(3, HashSlotLive, 10, 100)
	elem := func(i uint32) ([]byte, error) { return table[uint64(i)*l.Stride : uint64(i+1)*l.Stride], nil }
	got, err := l.Entries(m, elem)
	if err != nil || len(got) != 2 {
		t.Fatalf("Entries: %v, %v; want 2 live entries", got, err)
	}
	if !bytes.Equal(got[0].Key, []byte{7, 0, 0, 0}) || binary.LittleEndian.Uint64(got[1].Value) != 100 {
		t.Errorf("entries %v", got)
	}
}

func TestHashPut(t *testing.T) {
	m := &Map{Type: MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 2}
	l := GPUHashLayout(m)
	table := make([]byte, l.Bytes())
	elem := func(i uint32) ([]byte, error) { return table[uint64(i)*l.Stride : uint64(i+1)*l.Stride], nil }
	k := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	for _, kv := range [][2]uint32{{1, 10}, {2, 20}, {1, 11}} {
		if err := l.Put(m, elem, k(kv[0]), binary.LittleEndian.AppendUint64(nil, uint64(kv[1]))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Put(m, elem, k(3), make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "max_entries") {
		t.Fatalf("third key: %v, want a max_entries error", err)
	}
	got, err := l.Entries(m, elem)
	if err != nil || len(got) != 2 || binary.LittleEndian.Uint32(table[HashCountAt:]) != 2 {
		t.Fatalf("entries %v, %v", got, err)
	}
	for _, e := range got {
		want := map[uint32]uint64{1: 11, 2: 20}[binary.LittleEndian.Uint32(e.Key)]
		if v := binary.LittleEndian.Uint64(e.Value); v != want {
			t.Errorf("key %v: %d, want %d", e.Key, v, want)
		}
	}
}
