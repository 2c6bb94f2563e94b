package shm

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const benchSlots = 1 << 14

// BenchmarkRingProduce measures one producer's reserve+write+publish of a
// 48-byte record (the consumer drains outside the timer).
func BenchmarkRingProduce(b *testing.B) {
	g := newRing(b, 64, benchSlots)
	c := g.NewConsumer(ConsumerOptions{})
	payload := make([]byte, 48)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%benchSlots == benchSlots-1 {
			b.StopTimer()
			c.Read(0, func(Record) {})
			b.StartTimer()
		}
		if g.Produce(1, payload) != Published {
			b.Fatal("dropped")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRingConsume measures the consumer reading and decoding records
// (two u64 fields each) on one core.
func BenchmarkRingConsume(b *testing.B) {
	g := newRing(b, 64, benchSlots)
	c := g.NewConsumer(ConsumerOptions{})
	payload := make([]byte, 48)
	var sum uint64
	decode := func(r Record) {
		sum += binary.LittleEndian.Uint64(r.Payload) + binary.LittleEndian.Uint64(r.Payload[40:])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		n := benchSlots
		if b.N-done < n {
			n = b.N - done
		}
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(payload, uint64(i))
			g.Produce(1, payload)
		}
		b.StartTimer()
		done += c.Read(0, decode)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	_ = sum
}

// BenchmarkRingParallel runs GOMAXPROCS producers against one consumer
// goroutine; it reports the delivered and dropped rates.
func BenchmarkRingParallel(b *testing.B) {
	g := newRing(b, 64, benchSlots)
	c := g.NewConsumer(ConsumerOptions{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var delivered int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			delivered += c.Read(0, func(Record) {})
		}
		delivered += c.Read(0, func(Record) {})
	}()
	payload := make([]byte, 48)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.Produce(1, payload)
		}
	})
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	s := g.Stats()
	b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "delivered/s")
	b.ReportMetric(float64(s.Dropped)/float64(b.N), "drop-ratio")
}

// BenchmarkMailboxRoundTrip measures one host call through the mailbox with
// Serve polling in another goroutine.
func BenchmarkMailboxRoundTrip(b *testing.B) {
	m, err := CreateMailbox(8, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Serve(ctx, func(r *Request) int64 { return int64(r.Args[0]) }, ServeOptions{})
		close(done)
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ret, err := m.Call(1, [5]uint64{uint64(i)}, nil, 0); err != nil || ret != int64(i) {
			b.Fatalf("call %d: %d, %v", i, ret, err)
		}
	}
	b.StopTimer()
	cancel()
	<-done
}

// BenchmarkRingHostilePoll measures the most one Read(65536) costs on a
// ring whose producer keeps within the invariants but only takes tickets
// to drop them (head a lap ahead per ticket read, every slot marked): the
// receiver's per-ring, per-poll bound.
func BenchmarkRingHostilePoll(b *testing.B) {
	const max = 1 << 16
	g := newRing(b, 64, benchSlots)
	c := g.NewConsumer(ConsumerOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		h := c.Position() + max + benchSlots
		atomic.StoreUint64(g.head(), h)
		for s := uint64(0); s < benchSlots; s++ {
			t := c.Position() + s
			atomic.StoreUint32(g.slotDrops(t), atomic.LoadUint32(g.slotAcked(t))+uint32((h-1-t)/benchSlots)+1)
		}
		b.StartTimer()
		c.Read(max, func(Record) { b.Fatal("nothing was published") })
	}
	if c.Err() != nil {
		b.Fatal(c.Err())
	}
	b.ReportMetric(float64(b.N*max)/b.Elapsed().Seconds(), "tickets/s")
}
