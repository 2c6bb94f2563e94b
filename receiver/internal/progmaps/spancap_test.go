package progmaps

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/shm"
)

// TestRingSpansCapped checks that ring records' spans go through
// AdmitSpan (the receiver's per-process span cap): a span or a batch of
// events it refuses is left out, its events with it.
func TestRingSpansCapped(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance(defs, 42, 7, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	rec := make([]byte, 32)
	put64(rec, 8, 250)
	for range 3 {
		if r := in.Ring("phases").Produce(0, rec); r != shm.Published {
			t.Fatal(r)
		}
	}
	for i := range 250 {
		ev := make([]byte, 16)
		put64(ev, 0, uint64(1000+i))
		binary.LittleEndian.PutUint32(ev[8:], uint32(i%32))
		in.Ring("exits").Produce(0, ev)
	}
	budget, asked := 2, map[uint32]int{}
	c := NewCollector(CollectorOptions{Clock: clock.New(), MaxEventsPerSpan: 100,
		AdmitSpan: func(pid uint32, n int) bool {
			asked[pid] += n
			budget -= n
			return budget >= 0
		}})
	if n := c.ReadRings(in, time.Now(), 0); n != 253 {
		t.Fatalf("read %d records, want 253", n)
	}
	// 3 phase spans and 3 batches of ≤ 100 events asked for, 2 kept.
	if len(asked) != 1 || asked[42] != 6 {
		t.Errorf("AdmitSpan asked %v, want pid 42: 6 spans", asked)
	}
	if got := len(spanList(c.TakeTraces())); got != 2 {
		t.Errorf("%d spans, want 2", got)
	}
	if cs := c.Counters(); cs.SpansBuilt != 2 || cs.EventsBuilt != 0 {
		t.Errorf("counters %+v, want 2 spans built and no events", cs)
	}
}
