package shm

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"
)

func TestArrayOffsets(t *testing.T) {
	tests := []struct {
		name                  string
		kind                  Kind
		valueSize, keys, lane uint32
		key, at               uint64
		want                  uint64
		ok                    bool
	}{
		{"array key 0", KindArray, 12, 4, 1, 0, 0, DataOffset, true},
		{"array key 3", KindArray, 12, 4, 1, 3, 0, DataOffset + 3*16, true},
		{"array key past end", KindArray, 12, 4, 1, 4, 0, 0, false},
		{"array lane 1", KindArray, 12, 4, 1, 0, 1, 0, false},
		{"per-thread key 2 thread 5", KindPerThreadArray, 8, 3, 64, 2, 5, DataOffset + (2*64+5)*8, true},
		{"per-thread thread past end", KindPerThreadArray, 8, 3, 64, 0, 64, 0, false},
		{"per-warp key 1 warp 3", KindPerWarpArray, 20, 2, 4, 1, 3, DataOffset + (1*4+3)*24, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := CreateArray(tc.kind, tc.valueSize, tc.keys, tc.lane)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			off, ok := a.Offset(tc.key, tc.at)
			if ok != tc.ok || off != tc.want {
				t.Fatalf("Offset(%d, %d) = %d, %v; want %d, %v", tc.key, tc.at, off, ok, tc.want, tc.ok)
			}
			v, err := a.Value(tc.key, tc.at)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "out of range") {
					t.Fatalf("Value error %v", err)
				}
				return
			}
			if err != nil || len(v) != int(tc.valueSize) {
				t.Fatalf("Value: %d bytes, %v", len(v), err)
			}
			// The view is the region's memory at the documented offset.
			v[0] = 0x5A
			if a.Region().Bytes()[tc.want] != 0x5A {
				t.Fatal("Value is not a view at Offset")
			}
		})
	}
}

func TestArrayCounters(t *testing.T) {
	a, err := CreateArray(KindPerThreadArray, 8, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A second mapping (as the collector has) sees the producer's adds.
	m, err := Map(int(a.Region().File().Fd()), KindPerThreadArray)
	if err != nil {
		t.Fatal(err)
	}
	ma, err := NewArray(m)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	var wg sync.WaitGroup
	for th := uint64(0); th < 8; th++ {
		wg.Add(1)
		go func(th uint64) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				if _, err := a.AddUint64(1, th, th+1); err != nil {
					t.Error(err)
					return
				}
			}
		}(th)
	}
	wg.Wait()
	for th := uint64(0); th < 8; th++ {
		if v, err := ma.Uint64(1, th); err != nil || v != 1000*(th+1) {
			t.Fatalf("thread %d: %d, %v", th, v, err)
		}
	}
	if s, err := ma.Sum(1); err != nil || s != 1000*36 {
		t.Fatalf("Sum = %d, %v", s, err)
	}
	if s, _ := ma.Sum(0); s != 0 {
		t.Fatalf("untouched key sums to %d", s)
	}
	if v := binary.LittleEndian.Uint64(ma.Region().Bytes()[DataOffset+(1*8+7)*8:]); v != 8000 {
		t.Fatalf("raw layout: %d", v)
	}
	if err := a.StoreUint64(0, 3, 0xfeedface); err != nil {
		t.Fatal(err)
	}
	if v, err := ma.Uint64(0, 3); err != nil || v != 0xfeedface {
		t.Fatalf("after StoreUint64: %#x, %v", v, err)
	}
	if err := a.StoreUint64(1<<40, 0, 1); err == nil {
		t.Fatal("StoreUint64 out of range: no error")
	}
	small, err := CreateArray(KindArray, 4, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if _, err := small.Uint64(0, 0); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("8-byte access of a 4-byte value: %v", err)
	}
	if _, err := CreateArray(KindRing, 8, 2, 0); err == nil {
		t.Fatal("CreateArray accepted a ring kind")
	}
}
