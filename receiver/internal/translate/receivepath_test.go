package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// receivePathBatch is the launches produced into the ring per benchmark
// iteration (3 records each: 3,000 of the ring's 4,096 slots).
const receivePathBatch = 1000

// BenchmarkReceivePath measures the collector's cost per launch on the
// receive path: a shared-memory ring read, Handle (decode, pairing,
// aggregation), Expire (launches finished a completion grace after their
// completion, as the poll loop does every pass), TakeTraces, and a metrics
// point every 10 batches. Each batch is 50 ms later than the last. The
// record mix is gpuprobe-harness loadgen's in the load test (launch, one
// warp, completion; 8 kernels), 20,000 launches a second of one process.
// spans=on traces every launch (the trace policy's bounds lifted);
// spans=policy has the default trace policy, whose buckets refill by the
// simulated clock handed to Handle and Expire (10 traces a second kept); spans=off leaves
// every trace out (sampling::one_in 2^30), which separates the span
// building cost from the rest.
func BenchmarkReceivePath(b *testing.B) {
	for _, bc := range []struct {
		name   string
		oneIn  uint32
		policy TracePolicyOptions
	}{
		{"spans=on", 1, TracePolicyOptions{}},
		{"spans=policy", 1, TracePolicyOf(&config.Default().Sampling)},
		{"spans=off", 1 << 30, TracePolicyOptions{}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchReceivePath(b, bc.oneIn, bc.policy) })
	}
}

func benchReceivePath(b *testing.B, oneIn uint32, policy TracePolicyOptions) {
	g, err := shm.CreateRing(256, 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	cons := g.NewConsumer(shm.ConsumerOptions{})
	now := time.Now()
	tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{OneIn: oneIn, Traces: policy}})
	var s stream
	s.calibrate(0)
	for fn := range uint64(8) {
		s.add(&record.KernelName{Function: fn + 1, Name: "_Z6vecAddPfS_S_i" + string(rune('a'+fn))})
	}
	produceAll(b, g, &s)
	var handleErr error
	handle := func(r shm.Record) {
		if err := tr.Handle(1, r.Payload, now); err != nil && handleErr == nil {
			handleErr = err
		}
	}
	cons.Read(0, handle)
	var id uint64
	spans := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		s.b = s.b[:0]
		for range receivePathBatch {
			id++
			s.launch(id, id%8+1, 10_000*id, 1, 32, 1, true)
		}
		produceAll(b, g, &s)
		now = now.Add(50 * time.Millisecond)
		b.StartTimer()
		if n := cons.Read(0, handle); n != len(s.b) {
			b.Fatalf("read %d of %d records", n, len(s.b))
		}
		tr.Expire(now)
		spans += tr.SpanCount()
		_ = tr.TakeTraces()
		if i%10 == 9 {
			_ = tr.Metrics(now, nil)
		}
	}
	b.StopTimer()
	if handleErr != nil {
		b.Fatal(handleErr)
	}
	if c := tr.Counters(); c.LaunchesEvicted != 0 || tr.Pending() > receivePathBatch {
		b.Fatalf("%d launches evicted, %d pending", c.LaunchesEvicted, tr.Pending())
	}
	launches := float64(b.N) * receivePathBatch
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/launches, "ns/launch")
	b.ReportMetric(float64(spans)/launches, "spans/launch")
	b.ReportMetric(0, "ns/op")
}

// produceAll writes s's records into g as the shim does (whole record as
// the payload, its type in the slot header).
func produceAll(b *testing.B, g *shm.Ring, s *stream) {
	for _, r := range s.b {
		p, err := record.ParsePrefix(r)
		if err != nil {
			b.Fatal(err)
		}
		if g.Produce(uint32(p.Type), r) != shm.Published {
			b.Fatal("ring full")
		}
	}
}
