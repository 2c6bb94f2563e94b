package translate

import (
	"math/rand/v2"
	"testing"
)

// checkIDTable fails t unless every entry of tab's slots lies within
// maxProbe of its own slot with no free slot between, and tab holds
// exactly want.
func checkIDTable(t *testing.T, tab *idTable, want map[uint64]*launch) {
	t.Helper()
	mask := uint64(len(tab.slots) - 1)
	n := 0
	for i, s := range tab.slots {
		if s.l == nil {
			continue
		}
		n++
		for j := s.id & mask; j != uint64(i); j = (j + 1) & mask {
			if tab.slots[j].l == nil || (uint64(i)-s.id)&mask >= maxProbe {
				t.Fatalf("id %d at slot %d is not reachable from slot %d", s.id, i, s.id&mask)
			}
		}
	}
	if n != tab.n || tab.len() != len(want) {
		t.Fatalf("%d in slots (counted %d), %d in all; want %d", n, tab.n, tab.len(), len(want))
	}
	for id, l := range want {
		if got := tab.get(id); got != l {
			t.Fatalf("get(%d) = %p, want %p", id, got, l)
		}
	}
}

// TestIDTable checks the table against a map under the orders of ids a
// source may send: in order with a sliding window of launches in flight,
// with a few left behind (pending much longer), in random order, and
// crafted to share their low bits.
func TestIDTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   func(i int, r *rand.Rand) uint64
	}{
		{"in order", func(i int, _ *rand.Rand) uint64 { return uint64(i) }},
		{"random", func(_ int, r *rand.Rand) uint64 { return r.Uint64() }},
		{"same low bits", func(i int, _ *rand.Rand) uint64 { return uint64(i) << 20 }},
		{"small random", func(_ int, r *rand.Rand) uint64 { return r.Uint64N(3000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var tab idTable
			want := map[uint64]*launch{}
			var order []uint64 // ids in insertion order
			for i := range 20_000 {
				id := tc.id(i, r)
				if want[id] == nil {
					l := &launch{}
					if tab.get(id) != nil {
						t.Fatalf("id %d found before it was put", id)
					}
					tab.put(id, l)
					want[id] = l
					order = append(order, id)
				}
				// A window of up to 2000 in flight, the oldest going first
				// but one in 50 staying behind; at times a burst ends.
				for len(want) > 2000 || (i%5000 == 4999 && len(want) > 10) {
					k := r.IntN(min(len(order), 40))
					if r.IntN(50) == 0 {
						k = len(order) - 1
					}
					id := order[k]
					order = append(order[:k], order[k+1:]...)
					if !tab.del(id) {
						t.Fatalf("del(%d): not found", id)
					}
					delete(want, id)
				}
				if i%997 == 0 {
					checkIDTable(t, &tab, want)
				}
			}
			checkIDTable(t, &tab, want)
			if tab.del(1<<62) || tab.get(1<<62) != nil {
				t.Error("an id never put was found")
			}
			for _, id := range order {
				tab.del(id)
			}
			checkIDTable(t, &tab, map[uint64]*launch{})
			if len(tab.slots) > minIDSlots {
				t.Errorf("empty table keeps %d slots", len(tab.slots))
			}
		})
	}
}

// TestPendingSetSources: launches of two sources with the same ids stay
// apart, the count covers both, and a forgotten source's launches are
// gone, its cached queue included.
func TestPendingSetSources(t *testing.T) {
	ps := pendingSet{bySrc: map[uint32]*srcQueue{}}
	a, b := &launch{}, &launch{}
	ps.put(srcKey{1, 7}, a)
	ps.put(srcKey{2, 7}, b)
	if ps.get(srcKey{1, 7}) != a || ps.get(srcKey{2, 7}) != b || ps.n != 2 {
		t.Fatalf("sources mixed: %p %p, n %d", ps.get(srcKey{1, 7}), ps.get(srcKey{2, 7}), ps.n)
	}
	ps.forget(2)
	if ps.get(srcKey{2, 7}) != nil || ps.find(2) != nil || ps.n != 1 {
		t.Errorf("forgotten source still there: n %d", ps.n)
	}
	ps.del(srcKey{1, 7})
	ps.del(srcKey{1, 7})
	if ps.get(srcKey{1, 7}) != nil || ps.n != 0 {
		t.Errorf("deleted launch still there: n %d", ps.n)
	}
}

// BenchmarkIDTable is a source's launches in order, 4096 in flight: put,
// two lookups and a removal each, against a map of srcKey.
func BenchmarkIDTable(b *testing.B) {
	const inFlight = 4096
	l := &launch{}
	b.Run("idTable", func(b *testing.B) {
		var tab idTable
		for i := range uint64(b.N) {
			tab.put(i, l)
			_ = tab.get(i)
			if i >= inFlight {
				_ = tab.get(i - inFlight)
				tab.del(i - inFlight)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[srcKey]*launch{}
		for i := range uint64(b.N) {
			m[srcKey{1, i}] = l
			_ = m[srcKey{1, i}]
			if i >= inFlight {
				_ = m[srcKey{1, i - inFlight}]
				delete(m, srcKey{1, i - inFlight})
			}
		}
	})
}
