package receiver

import (
	"context"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// TestDefaultTracePolicy floods copies from one client under the default
// trace policy: its traces stay within the process's bound (10 a second
// and of burst), the rest are counted as sampled out, and the metrics
// count every copy.
func TestDefaultTracePolicy(t *testing.T) {
	const flood, pid = 400, 4101
	cfg := testConfig(t)
	def := config.Default().Sampling
	cfg.Sampling = def
	f := NewFactory()
	tr, mr, traces, metrics := startBothWith(t, receivertest.NewNopSettings(f.Type()), cfg)
	r := tr.(*handle).r
	ring, err := shm.CreateRing(cfg.Buffers.SlotSize, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	now := monoNow(t)
	for i := range flood {
		b := (&record.Memcpy{PID: pid, Bytes: 1, StartNS: now + uint64(i), EndNS: now + uint64(i) + 1,
			Kind: record.MemcpyHostToDevice}).Append(nil)
		if res := ring.Produce(uint32(record.TypeMemcpy), b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
	start := time.Now()
	r.AddRing(ring)
	waitFor(t, "every copy read", func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= flood })
	waitFor(t, "the sampled-out count", func() bool { return selfValue(metrics, "gpuprobe.receiver.traces.sampled_out") > 0 })
	elapsed := time.Since(start)
	for _, c := range []interface{ Shutdown(context.Context) error }{tr, mr} {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var spans int64
	for _, td := range traces.AllTraces() {
		spans += int64(td.SpanCount())
	}
	bound := int64(def.TracesPerSecondPerProcess * (1 + elapsed.Seconds() + 1))
	if spans < 1 || spans > bound {
		t.Errorf("%d copy traces in %v, want 1 to %d (sampling::traces_per_second_per_process %g)",
			spans, elapsed, bound, def.TracesPerSecondPerProcess)
	}
	kept, out := selfValue(metrics, "gpuprobe.receiver.traces.kept"), selfValue(metrics, "gpuprobe.receiver.traces.sampled_out")
	if kept != spans || kept+out != flood {
		t.Errorf("traces.kept %d, sampled_out %d; want %d kept and %d in all", kept, out, spans, flood)
	}
	last := metrics.AllMetrics()[len(metrics.AllMetrics())-1]
	var bytes int64
	for i := range last.ResourceMetrics().Len() {
		ms := last.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Name() == "gpu.cuda.memcpy.bytes" {
				bytes += ms.At(j).Sum().DataPoints().At(0).IntValue()
			}
		}
	}
	if bytes != flood {
		t.Errorf("memcpy bytes %d, want every copy's: %d", bytes, flood)
	}
}
