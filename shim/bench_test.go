package shim

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Environment of BenchmarkLaunchOverhead.
const (
	// benchBaselineEnv names another libgpuprobe.so (e.g. a build of an
	// older commit) measured in the same rounds, for before/after figures.
	benchBaselineEnv = "GPUPROBE_BENCH_BASELINE"
	// benchRoundsEnv: interleaved rounds per configuration (default 7).
	benchRoundsEnv = "GPUPROBE_BENCH_ROUNDS"
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

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// benchShim is one shim build to measure.
type benchShim struct {
	name, path string
	ns         []float64 // ns per launch, one per round
}

// launchRounds runs n launches without the shim and with each shim, in
// rounds interleaved rounds (plain, shim, baseline, plain, ...), so that
// drifts of the machine hit every configuration alike. env gives a
// shim's environment (its LD_PRELOAD and socket). It returns the plain
// run's ns per launch, one per round.
func launchRounds(b *testing.B, bin *built, rounds, n int, shims []*benchShim, env func(shim string) []string) []float64 {
	b.Helper()
	var plain []float64
	for range rounds {
		plain = append(plain, appLaunchNS(b, bin, nil, n))
		for _, s := range shims {
			s.ns = append(s.ns, appLaunchNS(b, bin, env(s.path), n))
		}
	}
	return plain
}

// reportLaunch reports the medians: ns/op and added-ns/launch of the shim
// under test, base-ns/launch of the plain app, x-plain their ratio, and
// for a baseline shim its added ns and the ratio of the two additions.
func reportLaunch(b *testing.B, plain []float64, shims []*benchShim) {
	p := median(plain)
	b.ReportMetric(p, "base-ns/launch")
	for i, s := range shims {
		m := median(s.ns)
		if i == 0 {
			b.ReportMetric(m, "ns/op")
			b.ReportMetric(m-p, "added-ns/launch")
			b.ReportMetric(m/p, "x-plain")
		} else {
			b.ReportMetric(m-p, s.name+"-added-ns/launch")
			if a := median(shims[0].ns) - p; m-p > 0 {
				b.ReportMetric(a/(m-p), "added-vs-"+s.name)
			}
		}
		if testing.Verbose() {
			fmt.Printf("%s: %s: plain %v, with the shim %v ns/launch\n", b.Name(), s.name, plain, s.ns)
		}
	}
}

// benchShims is the shim under test, then the baseline shim if
// GPUPROBE_BENCH_BASELINE names one.
func benchShims(b *testing.B, bin *built) []*benchShim {
	shims := []*benchShim{{name: "shim", path: bin.shim}}
	if p := os.Getenv(benchBaselineEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("%s: %v", benchBaselineEnv, err)
		}
		shims = append(shims, &benchShim{name: "baseline", path: p})
	}
	return shims
}

func benchRounds(b *testing.B) int {
	s := os.Getenv(benchRoundsEnv)
	if s == "" {
		return 7
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		b.Fatalf("%s=%q: want a number of rounds, 1..1000", benchRoundsEnv, s)
	}
	return n
}

// shimEnv is the environment that preloads shim with the agent socket.
func shimEnv(shim, socket string) []string {
	return []string{"LD_PRELOAD=" + shim, "GPUPROBE_SOCKET=" + socket, "GPUPROBE_PATCH=1", "GPUPROBE_PATCH_WAIT_MS=600000"}
}

// ringDropped sums the drops of every session's ring.
func ringDropped(a *testAgent) uint64 {
	var dropped uint64
	a.mu.Lock()
	for _, s := range a.sessions {
		dropped += s.ring.Stats().Dropped
	}
	a.mu.Unlock()
	return dropped
}

// BenchmarkLaunchOverhead measures what the shim adds to a launch of the
// MOCK driver (whose cuLaunchKernel only bumps counters): the app's launch
// loop (b.N launches, timed inside the app) without the shim and with it,
// in interleaved rounds of the same run (GPUPROBE_BENCH_ROUNDS, default
// 7), medians. ns/op is a launch with the shim; base-ns/launch without;
// added-ns/launch the difference (the budget is 100 ns); x-plain the
// ratio. With GPUPROBE_BENCH_BASELINE=/path/libgpuprobe.so another build
// runs in the same rounds (baseline-added-ns/launch, added-vs-baseline).
//
//   - forward: no collector (the shim only forwards);
//   - recording: every launch recorded into a ring (128-byte slots, the
//     receiver's default) that a consumer drains meanwhile;
//   - first-lap: each process's launches all fit its ring (512-byte slots,
//     min(b.N, 60000) launches), so every record goes to a slot never
//     written before: what the first lap of a fresh ring costs.
func BenchmarkLaunchOverhead(b *testing.B) {
	bin := binaries(b)
	rounds := benchRounds(b)
	b.Run("forward", func(b *testing.B) {
		shims := benchShims(b, bin)
		plain := launchRounds(b, bin, rounds, b.N, shims, func(s string) []string {
			return shimEnv(s, "/nonexistent/agent.sock")
		})
		reportLaunch(b, plain, shims)
	})
	b.Run("recording", func(b *testing.B) {
		a := startAgent(b, 128, 1<<16, agent.Options{})
		stop, wg, read := make(chan struct{}), &sync.WaitGroup{}, &atomic.Uint64{}
		wg.Add(1)
		go drain(a, stop, wg, read)
		// Cleanups run last-in first-out: the consumer stops before the
		// agent's cleanup unmaps the rings, also when the benchmark fails.
		stopDrain := sync.OnceFunc(func() { close(stop); wg.Wait() })
		b.Cleanup(stopDrain)
		shims := benchShims(b, bin)
		plain := launchRounds(b, bin, rounds, b.N, shims, func(s string) []string { return shimEnv(s, a.path) })
		a.waitGone(b, rounds*len(shims))
		stopDrain()
		launches := uint64(rounds*len(shims)) * uint64(b.N+1000)
		reportLaunch(b, plain, shims)
		b.ReportMetric(float64(ringDropped(a))/float64(launches), "dropped/launch")
		if testing.Verbose() {
			fmt.Printf("recording: %d launches, %d records read, %d dropped\n", launches, read.Load(), ringDropped(a))
		}
	})
	b.Run("first-lap", func(b *testing.B) {
		n := min(b.N, 60000)
		// 65536 slots hold the 1000 warm-up launches, n launches and the
		// kernel-name record.
		a := startAgent(b, 512, 1<<16, agent.Options{})
		shims := benchShims(b, bin)
		plain := launchRounds(b, bin, rounds, n, shims, func(s string) []string { return shimEnv(s, a.path) })
		a.waitGone(b, rounds*len(shims))
		if d := ringDropped(a); d != 0 {
			b.Fatalf("%d records dropped: the ring was meant to hold every launch", d)
		}
		reportLaunch(b, plain, shims)
	})
}
