package e2e

import (
	"context"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds each build the tests trigger (cold Jaeger: ~5-8 min).
const buildTimeout = 25 * time.Minute

var (
	toolsMu sync.Mutex
	tools   = map[string]toolResult{}
)

type toolResult struct {
	path string
	err  error
}

// need returns the path of tool, building it once per test binary; it skips
// the test under -short (the builds take minutes).
func need(t *testing.T, tool string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short (it builds and runs real backends)")
	}
	toolsMu.Lock()
	defer toolsMu.Unlock()
	r, ok := tools[tool]
	if !ok {
		start := time.Now()
		r.path, r.err = Find(context.Background(), tool, buildTimeout)
		tools[tool] = r
		t.Logf("%s: %s (%s)", tool, r.path, time.Since(start).Round(time.Millisecond))
	}
	if r.err != nil {
		t.Fatalf("%s: %v", tool, r.err)
	}
	return r.path
}

// track stops p when the test ends, on every exit path, and prints its logs
// if the test failed.
func track(t *testing.T, p *Process) {
	t.Helper()
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("---- %s logs ----\n%s\n---- end of %s logs ----", p.Name, p.Logs(), p.Name)
		}
	})
}

// testCtx is a context bounded by d (and by the test's deadline).
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
