package translate

import (
	"testing"
	"time"
)

// TestStreamLookupCache: the stream looked up last answers as the map
// would after its source is forgotten and after its source's streams are
// cleared for the bound.
func TestStreamLookupCache(t *testing.T) {
	sg := streamTable{bySrc: map[uint32]map[streamSlot]*streamState{}}
	k := streamSlot{src: 1, device: 0, stream: 7}
	if a, b := sg.count(k), sg.count(k); a != 1 || b != 2 || sg.state(k) == nil || sg.state(k).seq != 2 {
		t.Fatalf("counts %d, %d", a, b)
	}
	sg.forget(1)
	if sg.state(k) != nil || sg.count(k) != 1 {
		t.Fatal("a forgotten source's stream kept its count")
	}
	for i := range uint64(maxStreamSlots) {
		sg.count(streamSlot{src: 1, stream: 100 + i}) // the last one clears the map, k's state included
	}
	if sg.state(k) != nil || sg.count(k) != 1 {
		t.Error("a stream cleared for the bound kept its count")
	}
}

// TestClientLookupCache: the client looked up last is not returned once
// its source is forgotten.
func TestClientLookupCache(t *testing.T) {
	tr := newTr(Options{})
	ct := tr.clients
	c := ct.clientOf(5)
	if ct.get(5) != c || ct.clientOf(5) != c {
		t.Fatal("a client is not found again")
	}
	ct.forget(5, time.Now())
	if ct.get(5) != nil {
		t.Fatal("a forgotten client is still found")
	}
	if ct.clientOf(5) == c {
		t.Error("a forgotten client came back")
	}
}
