package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestJaegerStartsAndAnswers starts the real Jaeger and checks that its
// query API answers and that stopping it frees its ports.
func TestJaegerStartsAndAnswers(t *testing.T) {
	bin := need(t, ToolJaeger)
	ctx := testCtx(t, 3*time.Minute)
	j, err := StartJaeger(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	track(t, j.Process)
	services, err := j.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 0 {
		t.Errorf("fresh Jaeger lists services %v, want none", services)
	}
	if _, err := j.Traces(ctx, "nobody", 10); err != nil {
		t.Errorf("traces of an unknown service: %v", err)
	}
	if err := j.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Services(ctx); err == nil {
		t.Error("query API still answers after Stop")
	}
	if err := dialTCP(ctx, j.OTLPGRPC); err == nil {
		t.Error("OTLP port still accepts connections after Stop")
	}
}

// TestPrometheusAnswersPromQL starts the real Prometheus and evaluates
// PromQL through its HTTP API.
func TestPrometheusAnswersPromQL(t *testing.T) {
	bin := need(t, ToolPrometheus)
	ctx := testCtx(t, 3*time.Minute)
	p, err := StartPrometheus(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	track(t, p.Process)
	tests := []struct {
		query string
		want  float64
	}{
		{"vector(42)", 42},
		{"vector(6) * 7", 42},
		{`count(up) or vector(0)`, 0}, // nothing is scraped
	}
	for _, tc := range tests {
		samples, err := p.Query(ctx, tc.query)
		if err != nil {
			t.Errorf("%s: %v", tc.query, err)
			continue
		}
		if len(samples) != 1 || samples[0].Value != tc.want {
			t.Errorf("%s = %+v, want one sample of %v", tc.query, samples, tc.want)
		}
	}
	if _, err := p.Query(ctx, "sum(("); err == nil {
		t.Error("a malformed query gave no error")
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	err = Eventually(ctx, 5*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if _, err := p.Query(ctx, "vector(1)"); err == nil {
			return errors.New("still answering")
		}
		return nil
	})
	if err != nil {
		t.Error(fmt.Errorf("after Stop: %w", err))
	}
}
