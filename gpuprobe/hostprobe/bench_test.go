package hostprobe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
)

// loopNs runs `app loop n` and returns the ns per call it measured.
func loopNs(b *testing.B, app string, n int) float64 {
	b.Helper()
	out, err := exec.Command(app, "loop", strconv.Itoa(n)).Output()
	if err != nil {
		b.Fatalf("%s loop %d: %v", app, n, err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "ns_per_call=")
	ns, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil {
		b.Fatalf("%s loop: output %q is not ns_per_call=X", app, out)
	}
	return ns
}

// BenchmarkUprobeHit measures what one probed call costs the application:
// the stand-in app calls cuCtxSynchronize b.N times (at least 100000)
// without and then with the probes attached, while a reader drains the
// ring buffer as the receiver would, and ns/hit is the difference per call
// (one uprobe plus one uretprobe and one event), in the same run.
func BenchmarkUprobeHit(b *testing.B) {
	requireRoot(b)
	for _, mode := range []struct {
		name string
		opts Options
	}{{"uprobe_multi", Options{}}, {"perf_event", Options{perfLinks: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.StopTimer()
			s := buildStandins(b)
			n := max(b.N, 100000)
			bare := loopNs(b, s.app, n)
			p, err := Load(mode.opts)
			if err != nil {
				b.Fatalf("Load: %v", err)
			}
			defer p.Close()
			if _, err := p.Attach(s.libcuda); err != nil {
				b.Fatalf("Attach: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() {
				buf := make([]byte, 0, 512)
				for {
					_, err := p.Read(ctx, buf[:0])
					if errors.Is(err, context.Canceled) { // drained after cancel
						done <- nil
						return
					}
					if err != nil {
						done <- err
						return
					}
				}
			}()
			b.StartTimer()
			probed := loopNs(b, s.app, n)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatalf("Read: %v", err)
			}
			st := p.Stats()
			if st.Read+st.Dropped < uint64(n) {
				b.Fatalf("%d calls but %d events read and %d dropped", n, st.Read, st.Dropped)
			}
			b.ReportMetric(probed-bare, "ns/hit")
			b.ReportMetric(bare, "ns/call-bare")
			b.ReportMetric(probed, "ns/call-probed")
			b.ReportMetric(float64(st.Dropped)/float64(n), "drops/call")
			b.Log(fmt.Sprintf("%s: %d calls: %.1f ns bare, %.1f ns probed, %d dropped", mode.name, n, bare, probed, st.Dropped))
		})
	}
}

// BenchmarkShimProcesses measures what a launch costs a launch-bound
// loop (`standin_app wait loop N launch`: cudaLaunchKernel, which calls
// cuLaunchKernel, as the real runtime does) in four setups, in
// interleaved rounds (the order rotates each round) of one run:
//
//   - plain: no probes loaded;
//   - global: every entry point probed for all processes (before
//     shim_processes);
//   - shim: Options.ShimCoveredPerProcess, the process not given to
//     AttachProcess, as a process with the shim: no breakpoint on the
//     launch path, so within noise of plain;
//   - noshim: the same, the process given to AttachProcess, as a process
//     without the shim: the cost of global.
//
// Each run checks what it measured: the shim process has no breakpoint
// on cudaLaunchKernel and cuLaunchKernel and sends no record, the noshim
// and global processes have them and send two records a launch. Reported:
// the median ns per launch of each setup and the ratios to plain. The
// untrapped setups run 100 times more launches (a few ns each).
func BenchmarkShimProcesses(b *testing.B) {
	requireRoot(b)
	b.StopTimer()
	s := buildStandins(b)
	n := max(b.N, 100000)
	const rounds = 5
	modes := []string{"plain", "global", "shim", "noshim"}
	got := map[string][]float64{}
	for r := range rounds {
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			loops := n
			if m == "plain" || m == "shim" {
				loops = 100 * n // a few ns a launch: long enough to time
			}
			ns := shimLoop(b, s, m, loops)
			got[m] = append(got[m], ns)
			b.Logf("round %d %-6s %10.1f ns/launch", r, m, ns)
		}
	}
	med := map[string]float64{}
	for _, m := range modes {
		med[m] = median(got[m])
		b.ReportMetric(med[m], "ns/launch-"+m)
	}
	for _, m := range modes[1:] {
		b.ReportMetric(med[m]/med["plain"], m+"/plain")
	}
	b.Logf("%d launches a run (plain, shim: %d), %d rounds; medians: plain %.1f, global %.1f, shim %.1f, noshim %.1f ns/launch; shim/plain %.3f, noshim/global %.3f",
		n, 100*n, rounds, med["plain"], med["global"], med["shim"], med["noshim"], med["shim"]/med["plain"], med["noshim"]/med["global"])
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// shimLoop runs one loop of n launches in setup mode (BenchmarkShimProcesses)
// and returns the ns per launch the app measured.
func shimLoop(b *testing.B, s standins, mode string, n int) float64 {
	b.Helper()
	var p *Probes
	if mode != "plain" {
		var err error
		if p, err = Load(Options{ShimCoveredPerProcess: mode != "global"}); err != nil {
			b.Fatalf("Load: %v", err)
		}
		defer p.Close()
		for _, f := range []string{s.libcuda, s.libcudart} {
			if _, err := p.Attach(f); err != nil {
				b.Fatalf("Attach(%s): %v", f, err)
			}
		}
	}
	cmd := exec.Command(s.app, "wait", "loop", strconv.Itoa(n), "launch")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	rd := bufio.NewReader(out)
	if l, err := rd.ReadString('\n'); err != nil || l != "ready\n" {
		b.Fatalf("standin_app: %q, %v", l, err)
	}
	pid := cmd.Process.Pid
	if mode == "noshim" {
		for _, f := range []string{s.libcuda, s.libcudart} {
			st := statOf(b, f)
			if _, err := p.AttachProcess(pid, f, st.Dev, st.Ino); err != nil {
				b.Fatalf("AttachProcess: %v", err)
			}
		}
	}
	wantTrap := mode == "global" || mode == "noshim"
	for _, c := range [][2]string{{s.libcudart, "cudaLaunchKernel"}, {s.libcuda, "cuLaunchKernel"}} {
		if got := trapped(b, pid, c[0], c[1]); got != wantTrap {
			b.Fatalf("%s: breakpoint on %s: %v, want %v", mode, c[1], got, wantTrap)
		}
	}
	var records atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if p != nil {
		go func() { done <- countRecords(ctx, p, uint32(pid), &records) }()
	} else {
		done <- nil
	}
	b.StartTimer()
	if _, err := io.WriteString(in, "go\n"); err != nil {
		b.Fatal(err)
	}
	line, err := rd.ReadString('\n')
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("Read: %v", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "ns_per_call=")
	ns, perr := strconv.ParseFloat(v, 64)
	if err != nil || !ok || perr != nil {
		b.Fatalf("standin_app loop: %q, %v", line, err)
	}
	want := uint64(0)
	if wantTrap {
		want = 2 * uint64(n)
	}
	if p != nil {
		if st := p.Stats(); records.Load() != want || st.Dropped != 0 {
			b.Fatalf("%s: %d records of the loop's process, %d dropped; want %d, none dropped", mode, records.Load(), st.Dropped, want)
		}
	}
	return ns
}

// countRecords reads p until ctx ends (then drains it) and counts the
// host calls of pid.
func countRecords(ctx context.Context, p *Probes, pid uint32, n *atomic.Uint64) error {
	buf := make([]byte, 0, 512)
	for {
		rec, err := p.Read(ctx, buf[:0])
		if errors.Is(err, context.Canceled) {
			return nil
		}
		if err != nil {
			return err
		}
		var h record.HostCall
		if h.Decode(rec) == nil && h.PID == pid {
			n.Add(1)
		}
	}
}
