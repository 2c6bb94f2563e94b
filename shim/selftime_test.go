package shim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
)

var (
	selftimeOnce sync.Once
	selftimeBin  struct{ shim, launchFirst string }
	selftimeErr  error
)

// launchFirstSrc is a program whose first CUDA call the shim sees is a
// launch (of a MOCK function handle no load produced), so that the launch
// runs the handshake: `launchfirst N` makes N cuLaunchKernel calls.
const launchFirstSrc = `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			 void **, void **);
int main(int argc, char **argv)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
	void *(*quiet)(const char *) = h ? (void *(*)(const char *))dlsym(h, "mock_quiet_function") : NULL;
	launch_fn launch = h ? (launch_fn)dlsym(h, "cuLaunchKernel") : NULL;
	if (init == NULL || quiet == NULL || launch == NULL || init(0) != 0)
		return 2;
	void *f = quiet("_Z9firstKernv");
	int n = argc > 1 ? atoi(argv[1]) : 1;
	for (int i = 0; i < n; i++)
		if (launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0)
			return 1;
	printf("launchfirst: launches=%d\n", n);
	return 0;
}
`

// selftimeBinaries builds the GP_SELFTIME variant of the shim (what
// shim.mk's bin/libgpuprobe-selftime.so is) and the launchfirst program
// next to the test binaries.
func selftimeBinaries(tb testing.TB, b *built) (shim, launchFirst string) {
	tb.Helper()
	selftimeOnce.Do(func() {
		srcs, err := filepath.Glob("src/*.c")
		if err != nil || len(srcs) == 0 {
			selftimeErr = fmt.Errorf("no shim sources: %v", err)
			return
		}
		selftimeBin.shim = filepath.Join(b.dir, "libgpuprobe-selftime.so")
		args := append(append([]string{}, cflags...), "-DGP_SELFTIME=1", "-o", selftimeBin.shim)
		if selftimeErr = gcc(append(append(args, srcs...), "-ldl", "-lpthread")...); selftimeErr != nil {
			return
		}
		src := filepath.Join(b.dir, "launchfirst.c")
		if selftimeErr = os.WriteFile(src, []byte(launchFirstSrc), 0o644); selftimeErr != nil {
			return
		}
		selftimeBin.launchFirst = filepath.Join(b.dir, "launchfirst")
		selftimeErr = gcc("-O2", "-Wall", "-Wextra", "-Werror", "-o", selftimeBin.launchFirst, src, "-ldl")
	})
	if selftimeErr != nil {
		tb.Fatalf("building the selftime shim: %v", selftimeErr)
	}
	return selftimeBin.shim, selftimeBin.launchFirst
}

// vectorAddPTX is enough PTX for the MOCK driver and the test app's ptx
// scenario: vectorAdd's entry and its three parameters.
const vectorAddPTX = `.version 7.0
.target sm_80
.address_size 64

.visible .entry _Z9vectorAddPKfS0_Pf(
	.param .u64 _Z9vectorAddPKfS0_Pf_param_0,
	.param .u64 _Z9vectorAddPKfS0_Pf_param_1,
	.param .u64 _Z9vectorAddPKfS0_Pf_param_2
)
{
	ret;
}
`

// patchVectorAdd answers PATCH of vectorAddPTX with the same PTX and
// vectorAdd's launch id after its three parameters (what the shim needs to
// rewrite its launches), and anything else with NOPATCH.
func patchVectorAdd(_ *patcher.Patcher, r *agentwire.PatchRequest, _ patcher.Binder) (*agentwire.Patched, error) {
	if !bytes.Contains(r.Image, []byte(".entry _Z9vectorAddPKfS0_Pf(")) {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchNoKernel, Message: "test: not vectorAdd"}
	}
	img := append(bytes.TrimRight(append([]byte(nil), r.Image...), "\x00"), 0)
	return &agentwire.Patched{ID: r.ID, Image: img,
		Kernels: []agentwire.PatchedKernel{{Name: "_Z9vectorAddPKfS0_Pf", ParamIndex: 3, ParamOffset: 24}}}, nil
}

// selftimeLine is one parsed "gpuprobe selftime:" line.
type selftimeLine struct {
	launches, recorded, forwarded, handshake, slow, stacks, threads uint64
	mean, pre, post, overhead, ghz, stackNS                         float64
}

var selftimeRe = regexp.MustCompile(`(?m)^gpuprobe selftime: launches (\d+), shim ns/launch mean (\S+) \(pre (\S+), post (\S+)\), ` +
	`tsc overhead (\S+) ns subtracted, tsc GHz (\S+), recorded (\d+), forwarded (\d+), handshake (\d+) \(not timed\), ` +
	`slow (\d+), stacks (\d+) \((\S+) ns each\), threads (\d+), pid (\d+)$`)

// parseSelftime returns every selftime line of a process's stderr.
func parseSelftime(stderr string) ([]selftimeLine, error) {
	var out []selftimeLine
	for _, m := range selftimeRe.FindAllStringSubmatch(stderr, -1) {
		var l selftimeLine
		var errs []error
		u := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 10, 64)
			errs = append(errs, err)
			return v
		}
		f := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			errs = append(errs, err)
			return v
		}
		l.launches, l.mean, l.pre, l.post = u(m[1]), f(m[2]), f(m[3]), f(m[4])
		l.overhead, l.ghz = f(m[5]), f(m[6])
		l.recorded, l.forwarded, l.handshake, l.slow = u(m[7]), u(m[8]), u(m[9]), u(m[10])
		l.stacks, l.stackNS, l.threads = u(m[11]), f(m[12]), u(m[13])
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%q: %w", m[0], err)
			}
		}
		out = append(out, l)
	}
	if n := strings.Count(stderr, "gpuprobe selftime:"); n != len(out) {
		return nil, fmt.Errorf("%d selftime lines, %d in the expected format:\n%s", n, len(out), stderr)
	}
	return out, nil
}

// selftimeBound is the mean shim cost per launch, in ns, that TestSelftime
// refuses: 10× what a loaded machine once measured (BenchmarkSelftime
// measures the real cost, tens of ns).
const selftimeBound = 100000.0

// TestSelftime runs the test app under the GP_SELFTIME shim and checks its
// exit line: every launch of the app counted once (whichever way it reached
// the driver, on any thread), the handshake launch left out of the timing,
// forward-only and patched (slow path) launches counted, and a positive
// cost per launch below selftimeBound. The production shim prints no such
// line.
func TestSelftime(t *testing.T) {
	b := binaries(t)
	st, launchFirst := selftimeBinaries(t, b)
	ptxFile := filepath.Join(t.TempDir(), "vectoradd.ptx")
	if err := os.WriteFile(ptxFile, []byte(vectorAddPTX), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		collect  string // "record": a recording agent, "stacks": one asking for a stack every 1 us, "patch": a patching one, "": no collector
		prog     []string
		records  int    // launch records the ring must hold (-1: not checked)
		launches uint64 // launch calls the app makes
		// forwarded: launches without a session; handshake: launches that
		// ran it (not timed); slow: through gp_patch_args_slow.
		forwarded, handshake, slow, threads uint64
	}{
		// The app loads its code first: the load runs the handshake. 5
		// cuLaunchKernel, then one each of _ptsz, Ex, cooperative.
		{name: "cudart", collect: "record", prog: []string{"cudart", "basic", "5"}, records: 8, launches: 8, threads: 1},
		{name: "dlsym", collect: "record", prog: []string{"dlsym", "basic", "20"}, records: 23, launches: 23, threads: 1},
		{name: "direct", collect: "record", prog: []string{"direct", "basic", "3"}, records: 6, launches: 6, threads: 1},
		// Two cuGraphLaunch of a two-kernel graph: two launches, four records.
		{name: "graph", collect: "record", prog: []string{"cudart", "graph"}, records: 4, launches: 2, threads: 1},
		// Four threads of 250 launches, joined before exit.
		{name: "threads", collect: "record", prog: []string{"cudart", "threads"}, records: 1000, launches: 1000, threads: 4},
		// The parent's three launches; the child's three end in _exit.
		{name: "fork", collect: "record", prog: []string{"cudart", "fork"}, records: -1, launches: 3, threads: 1},
		{name: "no collector", prog: []string{"cudart", "basic", "5"}, records: -1, launches: 8, forwarded: 8, threads: 1},
		// The first launch runs the handshake: counted, not timed.
		{name: "launch first", collect: "record", prog: []string{"launchfirst", "500"}, records: 500, launches: 500, handshake: 1, threads: 1},
		{name: "launch first, no collector", prog: []string{"launchfirst", "50"}, records: -1, launches: 50, forwarded: 49, handshake: 1, threads: 1},
		{name: "bench", collect: "record", prog: []string{"cudart", "bench", "20000"}, records: 21000, launches: 21000, threads: 1},
		// Launch stacks: taken and timed apart (part of post).
		{name: "stacks", collect: "stacks", prog: []string{"cudart", "bench", "2000"}, records: -1, launches: 3000, threads: 1},
		// A patched module: its two launches and the captured one take the
		// slow path, the two graph launches do not; the captured launch
		// writes no record.
		{name: "patched", collect: "patch", prog: []string{"dlsym", "ptx"}, records: 4, launches: 5, slow: 3, threads: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a *testAgent
			socket := filepath.Join(t.TempDir(), "none.sock")
			args := c.prog
			switch c.collect {
			case "record":
				// Room for every record of a case (no lap).
				a = startAgent(t, 128, 1<<16, agent.Options{})
			case "stacks":
				a = startAgent(t, 128, 1<<16, agent.Options{Settings: agentwire.Settings{StacksPerSecond: 1000000}})
			case "patch":
				a = startPatchAgent(t, patchVectorAdd).testAgent
				args = append(append([]string{}, args...), ptxFile)
			}
			if a != nil {
				socket = a.path
			}
			prog := b.program(args[0])
			if args[0] == "launchfirst" {
				prog, args = launchFirst, args[1:]
			}
			stdout, stderr, err := run(t, b, shimEnv(st, socket), prog, args...)
			if err != nil {
				t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			lines, err := parseSelftime(stderr)
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) != 1 {
				t.Fatalf("%d selftime lines, want 1:\n%s", len(lines), stderr)
			}
			l := lines[0]
			t.Logf("%s", selftimeRe.FindString(stderr))
			if l.launches != c.launches || l.forwarded != c.forwarded || l.handshake != c.handshake ||
				l.slow != c.slow || l.threads != c.threads {
				t.Errorf("launches %d forwarded %d handshake %d slow %d threads %d, want %d %d %d %d %d",
					l.launches, l.forwarded, l.handshake, l.slow, l.threads,
					c.launches, c.forwarded, c.handshake, c.slow, c.threads)
			}
			if (c.collect == "stacks") != (l.stacks > 0) || (l.stacks > 0 && !(l.stackNS > 0 && l.stackNS < selftimeBound)) {
				t.Errorf("stacks %d (%.1f ns each): want some, each under %.0f ns, only when the collector asks", l.stacks, l.stackNS, selftimeBound)
			}
			if l.recorded+l.forwarded+l.handshake != l.launches {
				t.Errorf("recorded %d + forwarded %d + handshake %d != launches %d", l.recorded, l.forwarded, l.handshake, l.launches)
			}
			// The MOCK driver's count, where launches are not graphs.
			if m := regexp.MustCompile(`mock: launches=(\d+) .* graph=0 `).FindStringSubmatch(stdout); m != nil {
				if m[1] != strconv.FormatUint(c.launches, 10) {
					t.Errorf("the MOCK driver saw %s launches, the case says %d", m[1], c.launches)
				}
			}
			if c.slow != 0 && !strings.Contains(stdout, "app: params-launch same=0") {
				t.Errorf("the patched launch was not rewritten:\n%s", stdout)
			}
			// pre is never empty (the slot's pointer, the session check);
			// post is, on the forward-only path (two stamps back to back).
			if !(l.pre > 0) || (l.recorded > 0 && !(l.post > 0)) || !(l.mean > 0) {
				t.Errorf("shim ns/launch mean %v (pre %v, post %v): want positive", l.mean, l.pre, l.post)
			}
			// A few launches' mean is mostly first-call work (symbol
			// lookups, name records), and one preemption between stamps
			// would dominate it: the bound applies to longer runs. The
			// cost itself is BenchmarkSelftime's figure; this bound only
			// catches a blocking wait on the launch path, and holds on a
			// loaded 2-core machine, where preemptions between the stamps
			// once put the mean at 10.2 µs.
			if l.launches-l.handshake >= 500 && !(l.mean < selftimeBound) {
				t.Errorf("shim ns/launch mean %v over %d launches: want < %v ns", l.mean, l.launches-l.handshake, selftimeBound)
			}
			if d := l.mean - (l.pre + l.post); d > 0.11 || d < -0.11 {
				t.Errorf("mean %v is not pre %v + post %v", l.mean, l.pre, l.post)
			}
			if !(l.ghz > 0.2 && l.ghz < 10) || !(l.overhead > 0 && l.overhead < 1000) {
				t.Errorf("tsc GHz %v, overhead %v ns: implausible", l.ghz, l.overhead)
			}
			if c.records >= 0 {
				ss := a.waitGone(t, 1)
				if got := len(ss[0].read(t).launches); got != c.records {
					t.Errorf("%d launch records, want %d", got, c.records)
				}
			}
		})
	}
	t.Run("production shim", func(t *testing.T) {
		a := startAgent(t, 256, 4096, agent.Options{})
		_, stderr, err := run(t, b, shimEnv(b.shim, a.path), b.app, "cudart", "basic", "5")
		if err != nil {
			t.Fatalf("app: %v\n%s", err, stderr)
		}
		if strings.Contains(stderr, "selftime") {
			t.Errorf("the production shim printed a selftime line:\n%s", stderr)
		}
	})
}

// BenchmarkSelftime runs the test app's launch loop (b.N launches, after
// 1000 warm-up launches) under the GP_SELFTIME shim in
// GPUPROBE_BENCH_ROUNDS processes (default 7) and reports the medians of
// what the shim timed of itself: self-ns/launch (pre-ns/launch before the
// driver call, post-ns/launch after it), and ns/op, the app's own figure
// for a launch with this shim (its stamps included). The configurations are
// BenchmarkLaunchOverhead's: forward (no collector), recording (a drained
// ring of 128-byte slots) and first-lap (every record in a fresh slot).
func BenchmarkSelftime(b *testing.B) {
	bin := binaries(b)
	shim, _ := selftimeBinaries(b, bin)
	rounds := benchRounds(b)
	measure := func(b *testing.B, socket string, n int) {
		var e2e, self, pre, post []float64
		for range rounds {
			out, errOut, err := run(b, bin, shimEnv(shim, socket), bin.app, "cudart", "bench", strconv.Itoa(n))
			if err != nil {
				b.Fatalf("%v\n%s", err, errOut)
			}
			m := regexp.MustCompile(`ns_per_launch=(\S+)`).FindStringSubmatch(out)
			if m == nil {
				b.Fatalf("no ns_per_launch in %q", out)
			}
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				b.Fatal(err)
			}
			lines, err := parseSelftime(errOut)
			if err != nil {
				b.Fatal(err)
			}
			if len(lines) != 1 || lines[0].launches != uint64(n)+1000 {
				b.Fatalf("want one selftime line of %d launches:\n%s", n+1000, errOut)
			}
			e2e, self = append(e2e, v), append(self, lines[0].mean)
			pre, post = append(pre, lines[0].pre), append(post, lines[0].post)
		}
		b.ReportMetric(median(e2e), "ns/op")
		b.ReportMetric(median(self), "self-ns/launch")
		b.ReportMetric(median(pre), "pre-ns/launch")
		b.ReportMetric(median(post), "post-ns/launch")
		if testing.Verbose() {
			fmt.Printf("%s: self ns/launch %v\n", b.Name(), self)
		}
	}
	b.Run("forward", func(b *testing.B) {
		measure(b, "/nonexistent/agent.sock", b.N)
	})
	b.Run("recording", func(b *testing.B) {
		a := startAgent(b, 128, 1<<16, agent.Options{})
		stop, wg, read := make(chan struct{}), &sync.WaitGroup{}, &atomic.Uint64{}
		wg.Add(1)
		go drain(a, stop, wg, read)
		stopDrain := sync.OnceFunc(func() { close(stop); wg.Wait() })
		b.Cleanup(stopDrain)
		measure(b, a.path, b.N)
		a.waitGone(b, rounds)
		stopDrain()
	})
	b.Run("first-lap", func(b *testing.B) {
		a := startAgent(b, 512, 1<<16, agent.Options{})
		measure(b, a.path, min(b.N, 60000))
		a.waitGone(b, rounds)
		if d := ringDropped(a); d != 0 {
			b.Fatalf("%d records dropped: the ring was meant to hold every launch", d)
		}
	})
}
