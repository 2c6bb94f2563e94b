package receiver

import (
	"context"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestSpansPerSecondPerClient has one client flood copies past
// limits::spans_per_second while another writes a few: the flood loses
// spans (counted by pid, one warning naming the key), the other keeps
// every one, and the metrics count every copy of both.
func TestSpansPerSecondPerClient(t *testing.T) {
	const rate, flood, quiet = 50, 400, 20
	const floodPID, quietPID = 4001, 4002
	cfg := testConfig(t)
	cfg.Limits.SpansPerSecond = rate
	core, logs := observer.New(zap.WarnLevel)
	f := NewFactory()
	set := receivertest.NewNopSettings(f.Type())
	set.Logger = zap.New(core)
	tr, mr, traces, metrics := startBothWith(t, set, cfg)
	r := tr.(*handle).r
	rings := map[uint32]*shm.Ring{}
	for _, pid := range []uint32{floodPID, quietPID} {
		ring, err := shm.CreateRing(cfg.Buffers.SlotSize, 1024)
		if err != nil {
			t.Fatal(err)
		}
		defer ring.Close()
		rings[pid] = ring
	}
	now := monoNow(t)
	for i := range flood {
		for pid, ring := range rings {
			if pid == quietPID && i >= quiet {
				continue
			}
			b := (&record.Memcpy{PID: pid, Bytes: 1, StartNS: now + uint64(i), EndNS: now + uint64(i) + 1,
				Kind: record.MemcpyHostToDevice}).Append(nil)
			if res := ring.Produce(uint32(record.TypeMemcpy), b); res != shm.Published {
				t.Fatalf("produce: %v", res)
			}
		}
	}
	for _, ring := range rings {
		r.AddRing(ring)
	}
	waitFor(t, "every copy read", func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= flood+quiet })
	waitFor(t, "the drop count", func() bool { return selfValue(metrics, "gpuprobe.receiver.spans.rate_limited") > 0 })
	for _, c := range []interface{ Shutdown(context.Context) error }{tr, mr} {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	spans := map[int64]int64{}
	for _, td := range traces.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			pid, _ := rs.Resource().Attributes().Get("process.pid")
			spans[pid.Int()] += int64(rs.ScopeSpans().At(0).Spans().Len())
		}
	}
	if spans[quietPID] != quiet {
		t.Errorf("quiet client: %d spans, want all %d", spans[quietPID], quiet)
	}
	if spans[floodPID] < rate || spans[floodPID] >= flood {
		t.Errorf("flooding client: %d spans, want from the burst %d to fewer than %d", spans[floodPID], rate, flood)
	}
	if got := selfValue(metrics, "gpuprobe.receiver.spans.rate_limited"); got != flood-spans[floodPID] {
		t.Errorf("spans.rate_limited = %d, want %d", got, flood-spans[floodPID])
	}
	warns := logs.FilterMessageSnippet("limits::spans_per_second").All()
	if len(warns) != 1 || warns[0].ContextMap()["pid"] != uint32(floodPID) {
		t.Errorf("warnings %v, want one for pid %d", warns, floodPID)
	}
	// Rings added without a connection share one process's series: the
	// copies of both are counted there.
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
	if bytes != flood+quiet {
		t.Errorf("memcpy bytes %d, want every copy's: %d", bytes, flood+quiet)
	}
}
