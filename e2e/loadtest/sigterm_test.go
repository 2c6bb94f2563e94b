package loadtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/e2e"
	"github.com/gpuprobe/gpuprobe/e2e/adversarial"
)

// TestSigtermMidLoad sends SIGTERM while 16 clients write as fast as they
// can: the collector must end within adversarial.MaxShutdown, exit 0,
// and log no shutdown error, though the 16 producers starve its poll loop
// of CPU on a 2-core machine (the shutdown reads the rings only to the
// heads they had when it began, for half of shutdown_timeout).
func TestSigtermMidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the load test starts the collector binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("the collector's agent socket needs root (its deployment model)")
	}
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
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Ends with an error once the collector is gone or ctx is cancelled.
			_, _ = adversarial.RunHonest(ctx, harness, col.Socket, fmt.Sprintf("term_%d", i), 1_000_000, 0)
		}()
	}
	// Mid-load: once the collector has read a good part of a second's records.
	err = e2e.Eventually(t.Context(), 10*time.Second, 50*time.Millisecond, func(context.Context) error {
		if n := recordsRead(t, col); n < 50_000 {
			return fmt.Errorf("%v records read", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("load did not reach the collector: %v", err)
	}
	d, err := col.Terminate()
	cancel()
	wg.Wait()
	if err != nil {
		t.Error(err)
	}
	if d > adversarial.MaxShutdown {
		t.Errorf("SIGTERM mid-load took %s, bound %s", d.Round(time.Millisecond), adversarial.MaxShutdown)
	}
	_, exitErr := col.Proc.Exited()
	logs := col.Proc.Logs()
	if exitErr != nil || strings.Contains(logs, "failed to shutdown") {
		t.Errorf("collector exit: %v; logs:\n%s", exitErr, logs[max(0, len(logs)-3000):])
	}
	t.Logf("SIGTERM mid-load ended the collector in %s", d.Round(time.Millisecond))
}
