package receiver

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
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
	// The traces handle keeps the loop running: it must not emit metrics.
	waitPolls(t, tr.(*handle).r, 5*cfg.MetricsInterval)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d metrics batches sent after the metrics receiver was shut down", n)
	}
}

// TestShutdownFlushes: launches still waiting for records (here a
// completion that never comes, with a long launch timeout) are emitted when
// the receiver stops, not lost: by the last handle's drain, or by the
// traces handle's Shutdown while the metrics handle keeps the receiver
// running (the collector then stops the traces exporters next).
func TestShutdownFlushes(t *testing.T) {
	tests := []struct {
		name        string
		tracesFirst bool
	}{
		{"metrics handle first, traces last", false},
		{"traces handle first", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Limits.LaunchTimeout = time.Hour
			tr, mr, traces, metrics := startBoth(t, cfg)
			ring, err := shm.CreateRing(cfg.Buffers.SlotSize, 64)
			if err != nil {
				t.Fatal(err)
			}
			defer ring.Close()
			tr.(*handle).r.AddRing(ring)
			now := monoNow(t)
			b := (&record.Launch{LaunchID: 1, PID: uint32(os.Getpid()), TID: 1, EnqueueNS: now, ReturnNS: now + 100,
				Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}).Append(nil)
			if res := ring.Produce(uint32(record.TypeLaunch), b); res != shm.Published {
				t.Fatalf("produce: %v", res)
			}
			waitFor(t, "the record read", func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= 1 })
			if n := traces.SpanCount(); n != 0 {
				t.Fatalf("%d spans before shutdown, want 0 (the launch waits for its completion)", n)
			}
			first, second := mr, tr
			if tt.tracesFirst {
				first, second = tr, mr
			}
			if err := first.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			n := traces.SpanCount()
			if err := second.Shutdown(context.Background()); err != nil { // before the ring it reads is closed
				t.Fatal(err)
			}
			if !tt.tracesFirst {
				n = traces.SpanCount()
			}
			if n != 2 {
				t.Fatalf("%d spans after the traces handle's shutdown, want 2 (the launch and its launch call)", n)
			}
		})
	}
}
