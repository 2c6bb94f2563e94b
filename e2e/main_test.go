package e2e

import (
	"context"
	"fmt"
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
		budget, err := buildBudget(t)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		start := time.Now()
		r.path, r.err = Find(context.Background(), tool, budget)
		if r.err != nil && budget < buildTimeout {
			r.err = fmt.Errorf("%w\n(builds were bounded by %s to end before the test deadline: %s)", r.err, budget.Round(time.Second), timeoutHint)
		}
		tools[tool] = r
		t.Logf("%s: %s (%s)", tool, r.path, time.Since(start).Round(time.Millisecond))
	}
	if r.err != nil {
		t.Fatalf("%s: %v", tool, r.err)
	}
	return r.path
}

// testMargin is what the tests themselves need after the builds.
const testMargin = 3 * time.Minute

// timeoutHint says how to give the package the time it needs.
const timeoutHint = "run `make e2e`, which passes -timeout 30m, or go test -timeout 30m ./e2e/"

// buildBudget bounds the builds by the test binary's deadline (go test's
// default is 10 minutes, and go test kills the binary a minute after), so
// that a cold build ends with an error saying so instead of a timeout panic.
func buildBudget(t *testing.T) (time.Duration, error) {
	dl, ok := t.Deadline()
	if !ok {
		return buildTimeout, nil
	}
	return budgetUntil(time.Until(dl))
}

// budgetUntil is buildBudget for a deadline left seconds away.
func budgetUntil(left time.Duration) (time.Duration, error) {
	budget := min(buildTimeout, left-testMargin)
	if budget <= 0 {
		return 0, fmt.Errorf("only %s left before the test deadline, not enough to build and run: %s", left.Round(time.Second), timeoutHint)
	}
	return budget, nil
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
