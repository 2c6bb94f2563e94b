package shim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/shm"
)

// appLaunchNS runs `app cudart bench n` and returns the ns per launch the
// app measured around its launch loop (process start-up excluded).
func appLaunchNS(b *testing.B, bin *built, env []string, n int) float64 {
	b.Helper()
	out, errOut, err := run(b, bin, env, bin.app, "cudart", "bench", strconv.Itoa(n))
	if err != nil {
		b.Fatalf("%v\n%s", err, errOut)
	}
	i := strings.Index(out, "ns_per_launch=")
	if i < 0 {
		b.Fatalf("no ns_per_launch in %q", out)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out[i+len("ns_per_launch="):]), 64)
	if err != nil {
		b.Fatalf("parsing %q: %v", out, err)
	}
	return v
}

// drain consumes every ring the agent hands out until stop is closed, as
// the collector would, and counts the records.
func drain(a *testAgent, stop chan struct{}, wg *sync.WaitGroup, read *atomic.Uint64) {
	defer wg.Done()
	consumers := map[*shm.Ring]*shm.Consumer{}
	for {
		a.mu.Lock()
		for _, s := range a.sessions {
			if consumers[s.ring] == nil {
				consumers[s.ring] = s.ring.NewConsumer(shm.ConsumerOptions{})
			}
		}
		a.mu.Unlock()
		n := 0
		for _, c := range consumers {
			n += c.Read(0, func(shm.Record) {})
		}
		read.Add(uint64(n))
		select {
		case <-stop:
			return
		default:
		}
		if n == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// BenchmarkLaunchOverhead measures what the shim adds to a launch of the
// MOCK driver (whose cuLaunchKernel only bumps counters): the same app and
// launch loop without the shim, and with it, in the same run. ns/op is the
// launch with the shim; base-ns/launch without; added-ns/launch the
// difference (the budget is 100 ns).
func BenchmarkLaunchOverhead(b *testing.B) {
	bin := binaries(b)
	b.Run("no-collector", func(b *testing.B) {
		base := appLaunchNS(b, bin, nil, b.N)
		with := appLaunchNS(b, bin, preload(bin, "/nonexistent/agent.sock"), b.N)
		b.ReportMetric(with, "ns/op")
		b.ReportMetric(base, "base-ns/launch")
		b.ReportMetric(with-base, "added-ns/launch")
	})
	b.Run("recording", func(b *testing.B) {
		a := startAgent(b, 128, 1<<16, agent.Options{})
		stop, wg, read := make(chan struct{}), &sync.WaitGroup{}, &atomic.Uint64{}
		wg.Add(1)
		go drain(a, stop, wg, read)
		base := appLaunchNS(b, bin, nil, b.N)
		with := appLaunchNS(b, bin, preload(bin, a.path), b.N)
		a.waitGone(b, 1)
		close(stop)
		wg.Wait()
		var dropped uint64
		a.mu.Lock()
		for _, s := range a.sessions {
			dropped += s.ring.Stats().Dropped
		}
		a.mu.Unlock()
		b.ReportMetric(with, "ns/op")
		b.ReportMetric(base, "base-ns/launch")
		b.ReportMetric(with-base, "added-ns/launch")
		b.ReportMetric(float64(dropped)/float64(b.N+1000), "dropped/launch")
		if testing.Verbose() {
			fmt.Printf("recording: %d launches, %d records read, %d dropped\n", b.N+1000, read.Load(), dropped)
		}
	})
}
