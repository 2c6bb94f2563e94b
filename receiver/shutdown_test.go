package receiver

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadatatest"
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

// produceUntil offers n launch records (no completions: they stay pending)
// to g and returns how many were published and how many the full ring
// dropped.
func produceUntil(t *testing.T, g *shm.Ring, pid uint32, n int) (published, dropped int) {
	t.Helper()
	now := monoNow(t)
	buf := make([]byte, 0, 256)
	for i := range n {
		buf = (&record.Launch{LaunchID: uint64(i + 1), PID: pid, TID: 1, EnqueueNS: now, ReturnNS: now + 100,
			Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}).Append(buf[:0])
		switch res := g.Produce(uint32(record.TypeLaunch), buf); res {
		case shm.Published:
			published++
		case shm.Dropped:
			dropped++
		default:
			t.Fatalf("produce %d: %v", i, res)
		}
	}
	return published, dropped
}

// launchSpans counts the launch spans (those with cuda.launch.id) in sink.
func launchSpans(sink *consumertest.TracesSink) int {
	n := 0
	for _, td := range sink.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			sss := td.ResourceSpans().At(i).ScopeSpans()
			for j := range sss.Len() {
				ss := sss.At(j).Spans()
				for k := range ss.Len() {
					if _, ok := ss.At(k).Attributes().Get("cuda.launch.id"); ok {
						n++
					}
				}
			}
		}
	}
	return n
}

// lastLaunchCount is the sum of gpu.cuda.kernel.launches over every
// process in the latest metrics batch that has it (cumulative), -1 if none.
func lastLaunchCount(sink *consumertest.MetricsSink) int64 {
	all := sink.AllMetrics()
	for i := len(all) - 1; i >= 0; i-- {
		var n int64
		found := false
		rms := all[i].ResourceMetrics()
		for a := range rms.Len() {
			sms := rms.At(a).ScopeMetrics()
			for b := range sms.Len() {
				ms := sms.At(b).Metrics()
				for c := range ms.Len() {
					if m := ms.At(c); m.Name() == "gpu.cuda.kernel.launches" {
						found = true
						for d := range m.Sum().DataPoints().Len() {
							n += m.Sum().DataPoints().At(d).IntValue()
						}
					}
				}
			}
		}
		if found {
			return n
		}
	}
	return -1
}

// TestShutdownDeliversEverything: clients' rings full of launches the poll
// loop has not read yet (its first poll is a minute away) when the handles
// are shut down, in either order. After the second Shutdown every launch
// produced is a launch span and counts in the last metrics point, or was
// dropped by its full ring and counted, exactly; nothing is undelivered.
// With the traces handle first one ring holds more than one poll's read
// (maxReadPerPoll): on main the final flush read one poll's worth; with
// the metrics handle first main sent no last metrics point.
func TestShutdownDeliversEverything(t *testing.T) {
	for _, tracesFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "traces first", false: "metrics first"}[tracesFirst], func(t *testing.T) {
			tel := componenttest.NewTelemetry()
			defer func() { _ = tel.Shutdown(context.Background()) }()
			cfg := testConfig(t)
			cfg.PollInterval = time.Minute // nothing read before Shutdown
			cfg.Limits.SpansPerSecond = 0
			cfg.Limits.LaunchTimeout = time.Hour
			cfg.ShutdownTimeout = 5 * time.Minute // the accounting, not the deadline, is tested
			tr, mr, traces, metrics := startBothWith(t, metadatatest.NewSettings(tel), cfg)
			r := tr.(*handle).r
			rings := []struct {
				slots   uint32
				offered int
			}{{256, 400}, {256, 400}, {512, 100}}
			if tracesFirst { // one order is enough for the cost of 70,000 launches under -race
				rings = append(rings, struct {
					slots   uint32
					offered int
				}{2 * maxReadPerPoll, maxReadPerPoll + 4096})
			}
			var published, dropped int
			for i, rg := range rings {
				g := newTestRing(t, cfg.Buffers.SlotSize, rg.slots)
				p, d := produceUntil(t, g, uint32(1000+i), rg.offered)
				published, dropped = published+p, dropped+d
				r.AddRing(g)
			}
			if dropped == 0 {
				t.Fatal("no ring filled up")
			}
			first, second := tr, mr
			if !tracesFirst {
				first, second = mr, tr
			}
			for _, c := range []component.Component{first, second} {
				if err := c.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if n := launchSpans(traces); n != published {
				t.Errorf("%d launch spans, want %d (published)", n, published)
			}
			if n := lastLaunchCount(metrics); n != int64(published) {
				t.Errorf("last metrics point counts %d launches, want %d", n, published)
			}
			if n := selfValue(metrics, "gpuprobe.receiver.records.dropped"); n != int64(dropped) {
				t.Errorf("records.dropped %d, want %d (the full rings')", n, dropped)
			}
			if n := internalSum(tel, "otelcol_gpuprobe.receiver.shutdown.undelivered"); n > 0 {
				t.Errorf("%d items undelivered", n)
			}
			t.Logf("%d launches published, %d dropped by full rings", published, dropped)
		})
	}
}

// TestShortLivedClientsShutdown: after hundreds of clients came through the
// agent socket, each writing a few launches and going, the shutdown finds
// nothing of them left to wait on: it returns nil well within its bound,
// with every launch delivered and no source, translator state or agent
// session left.
func TestShortLivedClientsShutdown(t *testing.T) {
	const clients, each, parallel = 300, 3, 4 // parallel ≤ agent's pending connections per uid
	cfg := testConfig(t)
	cfg.Limits.SpansPerSecond = 0
	tr, mr, traces, metrics := startBoth(t, cfg)
	r := tr.(*handle).r
	var wg sync.WaitGroup
	work := make(chan int)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "short"})
				if err != nil {
					t.Error(err)
					continue
				}
				if g, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, "")); err != nil {
					t.Error(err)
				} else if p, _ := produceUntil(t, g, uint32(os.Getpid()), each); p != each {
					t.Errorf("%d of %d launches published", p, each)
				}
				sess.Close()
			}
		}()
	}
	for i := range clients {
		work <- i
	}
	close(work)
	wg.Wait()
	waitProgress(t, "every client's records read and its source released", func() (int64, bool) {
		r.mu.Lock()
		left := len(r.srcs.list)
		r.mu.Unlock()
		read := selfValue(metrics, "gpuprobe.receiver.records.read")
		return read, read == clients*each && left == 0
	})
	start := time.Now()
	for _, c := range []component.Component{tr, mr} {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatalf("shutdown after %d short-lived clients: %v", clients, err)
		}
	}
	if d := time.Since(start); d > shutdownBound/2 {
		t.Errorf("shutdown took %v after %d short-lived clients", d, clients)
	}
	if n := launchSpans(traces); n != clients*each {
		t.Errorf("%d launch spans, want %d", n, clients*each)
	}
	if n := r.sh.clients(); n != 0 {
		t.Errorf("translator state of %d clients left", n)
	}
	if st := r.run.agent.Stats(); st.Active != 0 || st.Accepted != clients {
		t.Errorf("agent: %d sessions active, %d accepted; want 0, %d", st.Active, st.Accepted, clients)
	}
}
