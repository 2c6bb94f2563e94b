package receiver

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"golang.org/x/sys/unix"
)

// BenchmarkPollWindows is the receive path of a GPU node's launch-bound
// clients as the shim feeds it: launch records now, their driver windows
// (record.Window) lag passes later, as CUPTI hands its buffers over, and
// no completion record. 16 clients × 512 launches a pass, the default
// configuration (windows on, gpu_time, the trace policy), a metrics point
// every 10 passes, passes at the pace they run. It reports CPU ns per
// launch and the live heap after a GC at the end, per launch pending in
// the lag: what the pending launches cost the collector.
func BenchmarkPollWindows(b *testing.B) {
	for _, lag := range []int{1, 20} {
		b.Run(fmt.Sprintf("lag=%d", lag), func(b *testing.B) { benchPollWindows(b, lag) })
	}
}

func benchPollWindows(b *testing.B, lag int) {
	const clients, perPass = 16, 512
	r, rings := benchReceiver(b, 0, clients, 4*perPass)
	for i, g := range rings {
		produceWindowsStart(b, g, uint32(5000+i*8))
	}
	ctx := context.Background()
	var cpu time.Duration
	var sent uint64 // launches whose windows are written
	mono := func() uint64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return uint64(ts.Nano())
	}
	var enq []uint64 // each pass's enqueue time
	b.ResetTimer()
	for i := range b.N + lag {
		b.StopTimer()
		m := mono()
		enq = append(enq, m)
		for c, g := range rings {
			pid := uint32(5000 + c*8)
			if i < b.N {
				produceLaunchesAt(b, g, pid, uint64(i)*perPass, perPass, m)
			}
			if i >= lag {
				produceWindowsFor(b, g, uint64(i-lag)*perPass, perPass, enq[i-lag])
			}
		}
		if i >= lag {
			sent += perPass
		}
		before := cpuTime(b)
		b.StartTimer()
		for r.pollOnce(ctx, time.Now(), false, false) {
		}
		if i%10 == 9 {
			r.emitMetrics(ctx, time.Now())
		}
		b.StopTimer()
		cpu += cpuTime(b) - before
		if i == b.N-1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/float64(clients*perPass*max(lag, 1)), "heap-B/pending")
		}
		b.StartTimer()
	}
	b.StopTimer()
	launches := float64(b.N) * clients * perPass
	b.ReportMetric(float64(cpu.Nanoseconds())/launches, "cpu-ns/launch")
	b.ReportMetric(0, "ns/op")
}

// produceWindowsStart publishes what the shim says first: its device
// and that windows are on.
func produceWindowsStart(b *testing.B, g *shm.Ring, pid uint32) {
	for _, rec := range []interface{ Append([]byte) []byte }{
		&record.Device{Device: 0, PID: pid, UUID: [16]byte{1, 2, 3}, SMCount: 132, ComputeCap: 90, Name: "bench"},
		&record.WindowState{TimeNS: 1, State: record.WindowsOn},
	} {
		buf := rec.Append(nil)
		p, _ := record.ParsePrefix(buf)
		if res := g.Produce(uint32(p.Type), buf); res != shm.Published {
			b.Fatalf("produce: %v", res)
		}
	}
}

// produceLaunchesAt publishes n launch records of process pid (ids after
// first) enqueued at mono, 2 µs apart.
func produceLaunchesAt(b *testing.B, g *shm.Ring, pid uint32, first uint64, n int, mono uint64) {
	buf := make([]byte, 0, 256)
	for i := range uint64(n) {
		id := first + i + 1
		e := mono + i*2000
		buf = (&record.Launch{LaunchID: id, PID: pid, TID: 1, EnqueueNS: e, ReturnNS: e + 1000,
			Function: id%8 + 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed}).Append(buf[:0])
		if res := g.Produce(uint32(record.TypeLaunch), buf); res != shm.Published {
			b.Fatalf("produce: %v", res)
		}
	}
}

// produceWindowsFor publishes the driver windows of the n launches after
// first, enqueued at mono by produceLaunchesAt: each 1.5 µs, 1 µs after
// its enqueue.
func produceWindowsFor(b *testing.B, g *shm.Ring, first uint64, n int, mono uint64) {
	buf := make([]byte, 0, 64)
	for i := range uint64(n) {
		s := mono + i*2000 + 1000
		buf = (&record.Window{LaunchID: first + i + 1, StartNS: s, EndNS: s + 1500}).Append(buf[:0])
		if res := g.Produce(uint32(record.TypeWindow), buf); res != shm.Published {
			b.Fatalf("produce: %v", res)
		}
	}
}
