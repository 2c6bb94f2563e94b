package receiver

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"golang.org/x/sys/unix"
)

// BenchmarkPollShards is the receive path of many clients through the
// poll pass (ring reads, translation, expiry, the span hand-off; a
// metrics point every 10 passes) with 1, 2 and 4 poll workers: 16
// clients, each 512 launches (launch and completion records) a pass, the
// default trace policy. It reports wall and CPU (getrusage, every
// goroutine of the process) nanoseconds per launch. The poll loop's own
// ticks are a minute apart: the benchmark runs the passes.
func BenchmarkPollShards(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchPollShards(b, workers) })
	}
}

func benchPollShards(b *testing.B, workers int) {
	const clients, perPass = 16, 512
	r, rings := benchReceiver(b, workers, clients, 4*perPass)
	ctx, now := context.Background(), time.Now()
	var id uint64
	var cpu time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		mono := uint64(time.Now().UnixNano())
		for c, g := range rings {
			produceCompleted(b, g, uint32(5000+c*8), id, perPass, mono)
		}
		id += perPass
		now = now.Add(3 * time.Minute) // past the completion grace (2 × poll_interval)
		before := cpuTime(b)
		b.StartTimer()
		for r.pollOnce(ctx, now, false, false) {
		}
		if i%10 == 9 {
			r.emitMetrics(ctx, now)
		}
		b.StopTimer()
		cpu += cpuTime(b) - before
		b.StartTimer()
	}
	b.StopTimer()
	if c := r.sh.counters(); c.RecordsRead != uint64(b.N)*clients*perPass*2 {
		b.Fatalf("%d records read, want %d", c.RecordsRead, b.N*clients*perPass*2)
	}
	launches := float64(b.N) * clients * perPass
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/launches, "ns/launch")
	b.ReportMetric(float64(cpu.Nanoseconds())/launches, "cpu-ns/launch")
	b.ReportMetric(0, "ns/op")
}

// benchReceiver starts a receiver of the default configuration with
// workers poll workers (0: the default) whose loop ticks a minute apart
// (the benchmark runs the passes), and adds clients rings of slots slots;
// both go when b ends.
func benchReceiver(b *testing.B, workers, clients int, slots uint32) (*gpuReceiver, []*shm.Ring) {
	cfg := createDefaultConfig().(*Config)
	cfg.Agent.Socket = filepath.Join(b.TempDir(), "agent.sock")
	cfg.PollInterval = time.Minute
	if workers > 0 {
		cfg.PollWorkers = workers
	}
	tr, mr, _, _ := startBoth(b, cfg)
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()); _ = mr.Shutdown(context.Background()) })
	r := tr.(*handle).r
	rings := make([]*shm.Ring, clients)
	for i := range rings {
		g, err := shm.CreateRing(cfg.Buffers.SlotSize, slots)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { g.Close() })
		rings[i] = g
		r.AddRing(g)
	}
	return r, rings
}

// produceCompleted publishes n launches of process pid (ids after first),
// each a launch and a completion record, into g.
func produceCompleted(b *testing.B, g *shm.Ring, pid uint32, first uint64, n int, mono uint64) {
	buf := make([]byte, 0, 256)
	for i := range uint64(n) {
		id := first + i + 1
		buf = (&record.Launch{LaunchID: id, PID: pid, TID: 1, EnqueueNS: mono, ReturnNS: mono + 100,
			Function: id%8 + 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}).Append(buf[:0])
		if res := g.Produce(uint32(record.TypeLaunch), buf); res != shm.Published {
			b.Fatalf("produce: %v", res)
		}
		buf = (&record.Completion{LaunchID: id, CompleteNS: mono + 3000}).Append(buf[:0])
		if res := g.Produce(uint32(record.TypeCompletion), buf); res != shm.Published {
			b.Fatalf("produce: %v", res)
		}
	}
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
