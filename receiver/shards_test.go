package receiver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// sourceShards returns the shards the sources of r are on.
func sourceShards(r *gpuReceiver) map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	on := map[int]int{}
	for _, s := range r.srcs.list {
		on[s.shard]++
	}
	return on
}

// TestShardsDeliverEverything: clients on every shard, each with records
// left in its ring (some rings full) when the shutdown begins: every
// launch published is in the spans and in the last metrics point, every
// record dropped by a full ring is counted, nothing undelivered, with
// one, two and four poll workers.
func TestShardsDeliverEverything(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.PollWorkers = workers
			cfg.PollInterval = time.Minute // nothing read before Shutdown
			cfg.Limits.SpansPerSecond = 0
			cfg.Limits.LaunchTimeout = time.Hour
			cfg.ShutdownTimeout = 5 * time.Minute // the accounting, not the deadline, is tested
			tr, mr, traces, metrics := startBoth(t, cfg)
			r := tr.(*handle).r
			if n := len(r.sh.trs); n != workers {
				t.Fatalf("%d shards, want %d", n, workers)
			}
			var published, dropped int
			for i := range 8 {
				g := newTestRing(t, cfg.Buffers.SlotSize, 256)
				p, d := produceUntil(t, g, uint32(1000+i), 200+100*(i%3))
				published, dropped = published+p, dropped+d
				r.AddRing(g)
			}
			if on := sourceShards(r); len(on) != workers {
				t.Fatalf("sources on shards %v, want every one of %d", on, workers)
			}
			if dropped == 0 {
				t.Fatal("no ring filled up")
			}
			shutdownWithin(t, time.Minute, tr, mr)
			if n := launchSpans(traces); n != published {
				t.Errorf("%d launch spans, want %d (published)", n, published)
			}
			if n := lastLaunchCount(metrics); n != int64(published) {
				t.Errorf("last metrics point counts %d launches, want %d", n, published)
			}
			if n := selfValue(metrics, "gpuprobe.receiver.records.read"); n != int64(published) {
				t.Errorf("records.read %d, want %d", n, published)
			}
			if n := selfValue(metrics, "gpuprobe.receiver.records.dropped"); n != int64(dropped) {
				t.Errorf("records.dropped %d, want %d (the full rings')", n, dropped)
			}
			if n := selfValue(metrics, "gpuprobe.receiver.shutdown.undelivered"); n != 0 {
				t.Errorf("%d items undelivered", n)
			}
		})
	}
}

// TestShardClientGoneMidPass: while one shard's worker reads its client,
// a client of another shard writes its last records and goes. What it
// wrote is read, every record of both is counted once, and its source
// is released.
func TestShardClientGoneMidPass(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollWorkers = 2
	cfg.Limits.LaunchTimeout = time.Hour
	var (
		once     sync.Once
		a, b     *shm.Ring
		idA, idB uint32
		late     int // published by the hook
		lateErr  error
		ready    = make(chan struct{})
		hookDone = make(chan struct{})
	)
	testHookShardRead = func(s *source) {
		select {
		case <-ready:
		default:
			return
		}
		if s.id != idA {
			return
		}
		once.Do(func() {
			defer close(hookDone)
			late, lateErr = produceFrom(b, 2000, 500, 150)
			gone <- idB
		})
	}
	defer func() { testHookShardRead = func(*source) {} }()
	tr, mr, _, metrics := startBoth(t, cfg)
	r := tr.(*handle).r
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()); _ = mr.Shutdown(context.Background()) })
	a, b = newTestRing(t, cfg.Buffers.SlotSize, 1024), newTestRing(t, cfg.Buffers.SlotSize, 1024)
	if _, err := produceFrom(a, 1000, 0, 300); err != nil {
		t.Fatal(err)
	}
	if _, err := produceFrom(b, 2000, 0, 300); err != nil {
		t.Fatal(err)
	}
	// Two ids on different shards: the next two sources.
	idA = r.AddRing(a)
	idB = r.AddRing(b)
	on := sourceShards(r)
	if len(on) != 2 {
		t.Fatalf("sources on shards %v, want both", on)
	}
	go func() {
		id := <-gone
		r.RemoveRing(id)
	}()
	close(ready)
	select {
	case <-hookDone:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass read client A")
	}
	if lateErr != nil {
		t.Fatal(lateErr)
	}
	want := int64(600 + late)
	waitProgress(t, "every record accounted", func() (int64, bool) {
		n := selfValue(metrics, "gpuprobe.receiver.records.read")
		return n, n == want && len(sourceShards(r)) == 1
	})
	if n := selfValue(metrics, "gpuprobe.receiver.records.dropped"); n != 0 {
		t.Errorf("records.dropped %d, want 0", n)
	}
	shutdownWithin(t, shutdownBound+time.Second, tr, mr) // emits A's pending launches
	if n := lastLaunchCount(metrics); n != want {
		t.Errorf("last metrics point counts %d launches, want %d", n, want)
	}
}

// gone carries the id of the client the hook of TestShardClientGoneMidPass
// lets go.
var gone = make(chan uint32, 1)

// produceFrom publishes n launch records of process pid into g, launch
// ids from first+1 (any goroutine: it returns what failed).
func produceFrom(g *shm.Ring, pid uint32, first, n int) (int, error) {
	now := uint64(time.Now().UnixNano())
	for i := range n {
		b := (&record.Launch{LaunchID: uint64(first + i + 1), PID: pid, TID: 1, EnqueueNS: now, ReturnNS: now + 100,
			Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}).Append(nil)
		if res := g.Produce(uint32(record.TypeLaunch), b); res != shm.Published {
			return i, fmt.Errorf("produce %d: %v", i, res)
		}
	}
	return n, nil
}

// TestMergeMetrics: the shards' sums of the collector's resource add up
// by attributes; what only one shard has is kept.
func TestMergeMetrics(t *testing.T) {
	sum := func(sm pmetric.MetricSlice, name string, pts map[string]int64) {
		m := sm.AppendEmpty()
		m.SetName(name)
		dps := m.SetEmptySum().DataPoints()
		for reason, v := range pts {
			dp := dps.AppendEmpty()
			dp.Attributes().PutStr("reason", reason)
			dp.SetIntValue(v)
		}
	}
	dst, src := pmetric.NewMetricSlice(), pmetric.NewMetricSlice()
	sum(dst, "a", map[string]int64{"x": 1, "y": 2})
	sum(src, "a", map[string]int64{"x": 10, "z": 3})
	sum(src, "b", map[string]int64{"x": 4})
	mergeMetrics(dst, src)
	got := map[string]int64{}
	for i := range dst.Len() {
		m := dst.At(i)
		for j := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(j)
			v, _ := dp.Attributes().Get("reason")
			got[m.Name()+"/"+v.Str()] += dp.IntValue()
		}
	}
	want := map[string]int64{"a/x": 11, "a/y": 2, "a/z": 3, "b/x": 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged %v, want %v", got, want)
	}
	if dst.Len() != 2 {
		t.Errorf("%d metrics, want 2", dst.Len())
	}
}

// TestShardOfSpreads: pids that step by a fixed stride (a process's
// threads take the pids between) spread over the shards.
func TestShardOfSpreads(t *testing.T) {
	for _, stride := range []uint32{1, 2, 4, 8, 16} {
		on := map[int]int{}
		for i := range uint32(16) {
			on[shardOf(1000+i*stride, 1, 4)]++
		}
		for k := range 4 {
			if on[k] < 2 {
				t.Errorf("stride %d: 16 processes on the shards %v, want at least 2 on each", stride, on)
				break
			}
		}
	}
}

// TestHostRecordPID: a host-probe record goes to the shard of the
// process it names; one that names none, or does not decode, to the
// first (where it is counted invalid).
func TestHostRecordPID(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  record.Type
		rec  []byte
		want uint32
	}{
		{"host call", record.TypeHostCall, (&record.HostCall{PID: 4242, TID: 1, API: record.HostAPIs()[0], EnterNS: 1, ExitNS: 2}).Append(nil), 4242},
		{"kernel name", record.TypeKernelName, (&record.KernelName{Function: 1, PID: 77, Name: "k"}).Append(nil), 77},
		{"sync", record.TypeSync, (&record.Sync{PID: 9, Kind: 1}).Append(nil), 9},
		{"launch", record.TypeLaunch, (&record.Launch{LaunchID: 1, PID: 31, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}).Append(nil), 31},
		{"invalid", record.TypeLaunch, (&record.Launch{LaunchID: 1, PID: 31}).Append(nil), 0},
		{"cut short", record.TypeHostCall, (&record.HostCall{PID: 4242}).Append(nil)[:8], 0},
		{"no process", record.TypeCalibration, (&record.Calibration{MonoNS: 1}).Append(nil), 0},
	} {
		if got := hostRecordPID(tc.typ, tc.rec); got != tc.want {
			t.Errorf("%s: pid %d, want %d", tc.name, got, tc.want)
		}
	}
	if k := shardOf(0, 0, 4); k != 0 {
		t.Errorf("a record of no process goes to shard %d, want 0", k)
	}
}
