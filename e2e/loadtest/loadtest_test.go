// Package loadtest runs the collector binary under load from many
// gpuprobe-harness loadgen clients and reports its cost: CPU per million
// launches (/proc/PID/stat utime+stime), peak RSS (VmHWM), and the
// launches produced, exported and dropped. The short form (`make test`)
// asserts the invariants; `make loadtest` runs the long form
// (LOADTEST_CLIENTS, LOADTEST_LAUNCHES per client, LOADTEST_RATE per
// client) and prints the figures against the targets.
package loadtest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/e2e"
	"github.com/gpuprobe/gpuprobe/e2e/adversarial"
)

// Targets of the load benchmark (reported, asserted where they hold).
const (
	targetCPUPerMLaunchPerS = 1.0       // cores per million launches a second
	targetRSS               = 256 << 20 // bytes
)

func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s: want a non-negative integer, got %q", key, v)
	}
	return n
}

// cpuSeconds reads utime+stime of pid from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after comm", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return float64(u+k) / 100, nil // USER_HZ
}

// vmHWM reads the peak resident set of pid, in bytes.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("status: no VmHWM")
}

// TestLoad runs the clients, waits for every launch to be accounted in
// the exporter, and reports the collector's cost; then SIGTERM must end
// it within adversarial.MaxShutdown.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the load test starts the collector binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("the collector's agent socket needs root (its deployment model)")
	}
	clients := envInt(t, "LOADTEST_CLIENTS", 8)
	launches := envInt(t, "LOADTEST_LAUNCHES", 2000)
	rate := envInt(t, "LOADTEST_RATE", 2000)
	otelcol, err := e2e.Find(t.Context(), e2e.ToolOtelcolLean, 20*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	harness, err := e2e.Find(t.Context(), e2e.ToolHarness, 20*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	col, err := adversarial.StartCollector(t.Context(), otelcol, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	pid := col.Proc.Pid()
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	read0 := recordsRead(t, col)
	start := time.Now()
	runs := make([]adversarial.Honest, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = adversarial.RunHonest(t.Context(), harness, col.Socket,
				fmt.Sprintf("load_%d", i), launches, float64(rate))
		}()
	}
	wg.Wait()
	produceTime := time.Since(start)
	var produced, dropped int
	for i, h := range runs {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		produced += h.Launches
		dropped += h.Dropped
	}
	for _, h := range runs {
		if err := h.Accounted(t.Context(), col.Exporter, 30*time.Second); err != nil {
			t.Error(err)
		}
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	read := recordsRead(t, col) - read0
	hwm, err := vmHWM(pid)
	if err != nil {
		t.Fatal(err)
	}
	d, err := col.Terminate()
	if err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	if d > adversarial.MaxShutdown {
		t.Errorf("SIGTERM took %s, bound %s", d.Round(time.Millisecond), adversarial.MaxShutdown)
	}
	perM := (cpu1 - cpu0) / float64(produced) * 1e6
	offered := float64(produced) / produceTime.Seconds()
	t.Logf("%d clients × %d launches in %s (%.0f launches/s offered), %d records dropped by producers",
		clients, launches, produceTime.Round(time.Millisecond), offered, dropped)
	t.Logf("collector CPU %.2f s = %.2f CPU-s per million launches (target ≤ %.1f core per million launches/s: %s)",
		cpu1-cpu0, perM, targetCPUPerMLaunchPerS, verdict(perM <= targetCPUPerMLaunchPerS))
	// A launch is 3 records (launch, warp, completion): the cost of what
	// the collector read, beside the cost per launch offered.
	t.Logf("collector read %.0f records (%.0f%% of those offered): %.2f CPU-s per million launches read",
		read, 100*read/float64(3*produced), (cpu1-cpu0)/(read/3)*1e6)
	t.Logf("VmHWM %d MiB (target ≤ %d MiB: %s); SIGTERM ended it in %s",
		hwm>>20, targetRSS>>20, verdict(hwm <= targetRSS), d.Round(time.Millisecond))
	if hwm > adversarial.MaxRSS {
		t.Errorf("VmHWM %d MiB over the collector's stated bound %d MiB", hwm>>20, adversarial.MaxRSS>>20)
	}
}

// recordsRead is the receiver's records read counter (self-metrics).
func recordsRead(t *testing.T, col *adversarial.Collector) float64 {
	t.Helper()
	fams, err := e2e.Scrape(t.Context(), col.Self)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := adversarial.Counter(fams, "otelcol_gpuprobe_receiver_records_read", nil)
	return n
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
