package receiver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// TestNoMetricsAfterMetricsShutdown: the collector may shut down the
// metrics receiver (and then its exporters) while the traces receiver of
// the same shared instance still runs. Nothing may reach the metrics
// pipeline after its receiver's Shutdown (the file exporter panics on it).
func TestNoMetricsAfterMetricsShutdown(t *testing.T) {
	f := NewFactory()
	set := receivertest.NewNopSettings(f.Type())
	cfg := testConfig(t)
	var closed, late, before atomic.Int64
	sink, err := consumer.NewMetrics(func(context.Context, pmetric.Metrics) error {
		if closed.Load() != 0 {
			late.Add(1)
		} else {
			before.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := f.CreateTraces(context.Background(), set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	host := componenttest.NewNopHost()
	if err := tr.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	if err := mr.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a first metrics emission", func() bool { return before.Load() > 0 })
	if err := mr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed.Store(1)
	time.Sleep(5 * cfg.MetricsInterval) // the traces handle keeps the loop running
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d metrics batches sent after the metrics receiver was shut down", n)
	}
}
