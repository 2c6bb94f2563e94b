package receiver

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadatatest"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
)

// TestSelfTelemetryRoute checks where the self-metrics go: always to the
// collector's internal telemetry (the generated builder's counters and
// the observable instruments alike), into the metrics pipeline only with
// telemetry::in_pipeline, while the GPU data flows either way.
func TestSelfTelemetryRoute(t *testing.T) {
	for _, inPipeline := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "in_pipeline"}[inPipeline], func(t *testing.T) {
			tel := componenttest.NewTelemetry()
			defer func() { _ = tel.Shutdown(context.Background()) }()
			cfg := testConfig(t)
			cfg.Telemetry.InPipeline = inPipeline
			tr, mr, _, metrics := startBothWith(t, metadatatest.NewSettings(tel), cfg)
			pid := uint32(os.Getpid())
			produceLaunch(t, tr.(*handle).r, pid)
			waitFor(t, "the launch's series", func() bool { return pipelineNames(metrics)["gpu.cuda.kernel.launches"] })
			waitFor(t, "the internal telemetry", func() bool {
				return internalSum(tel, "otelcol_gpuprobe.receiver.coverage.launches",
					attribute.Int64("process.pid", int64(pid)), attribute.String("gpuprobe.windows.route", "none")) == 1
			})
			// An observable instrument (its callback goes at shutdown).
			if n := internalSum(tel, "otelcol_gpuprobe.receiver.kernel_names.truncated"); n != 0 {
				t.Errorf("internal kernel_names.truncated = %d, want 0", n)
			}
			for _, c := range []interface{ Shutdown(context.Context) error }{tr, mr} {
				if err := c.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			// A counter of the generated builder.
			if n := internalSum(tel, "otelcol_gpuprobe.receiver.records.read"); n < 3 {
				t.Errorf("internal records.read = %d, want ≥ 3", n)
			}
			var self []string
			for n := range pipelineNames(metrics) {
				if strings.HasPrefix(n, SelfMetricPrefix) {
					self = append(self, n)
				}
			}
			if inPipeline && len(self) < 10 {
				t.Errorf("in_pipeline: %d self-metrics in the pipeline: %v", len(self), self)
			}
			if !inPipeline && len(self) != 0 {
				t.Errorf("default: self-metrics in the pipeline: %v", self)
			}
		})
	}
}

// TestSelfTelemetryWithoutMetricsPipeline checks that a collector with
// only a traces pipeline still gets the self-metrics in its internal
// telemetry.
func TestSelfTelemetryWithoutMetricsPipeline(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	f := NewFactory()
	tr, err := f.CreateTraces(context.Background(), metadatatest.NewSettings(tel), testConfig(t), new(consumertest.TracesSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	pid := uint32(os.Getpid())
	produceLaunch(t, tr.(*handle).r, pid)
	waitFor(t, "coverage in the internal telemetry", func() bool {
		return internalSum(tel, "otelcol_gpuprobe.receiver.coverage.launches", attribute.Int64("process.pid", int64(pid))) == 1
	})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// produceLaunch writes one complete launch of pid into a ring of r.
func produceLaunch(t *testing.T, r *gpuReceiver, pid uint32) {
	t.Helper()
	ring, err := shm.CreateRing(r.cfg.Buffers.SlotSize, 1024)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ring.Close() })
	r.AddRing(ring)
	now := monoNow(t)
	for _, rec := range []interface{ Append([]byte) []byte }{
		&record.KernelName{Function: 1, PID: pid, Name: "_Z4gemmPfS_S_"},
		&record.Launch{LaunchID: 1, PID: pid, TID: 1, EnqueueNS: now, ReturnNS: now + 2000, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}},
		&record.Completion{LaunchID: 1, CompleteNS: now + 9000},
	} {
		b := rec.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
}

// pipelineNames are the metric names the sink got.
func pipelineNames(sink *consumertest.MetricsSink) map[string]bool {
	out := map[string]bool{}
	for _, md := range sink.AllMetrics() {
		rms := md.ResourceMetrics()
		for i := range rms.Len() {
			sms := rms.At(i).ScopeMetrics()
			for j := range sms.Len() {
				ms := sms.At(j).Metrics()
				for k := range ms.Len() {
					out[ms.At(k).Name()] = true
				}
			}
		}
	}
	return out
}

// internalSum is the sum of the int points of an internal telemetry
// metric that carry every attribute of want (-1: no such metric).
func internalSum(tel *componenttest.Telemetry, name string, want ...attribute.KeyValue) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return -1
	}
	var dps []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		dps = d.DataPoints
	case metricdata.Gauge[int64]:
		dps = d.DataPoints
	default:
		return -1
	}
	var n int64
	for _, dp := range dps {
		ok := true
		for _, kv := range want {
			if v, found := dp.Attributes.Value(kv.Key); !found || v != kv.Value {
				ok = false
			}
		}
		if ok {
			n += dp.Value
		}
	}
	return n
}

// TestBuilderMetricsMatchMetadata checks builderMetrics against the
// telemetry section of metadata.yaml, which the generated builder is
// made from.
func TestBuilderMetricsMatchMetadata(t *testing.T) {
	b, err := os.ReadFile("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "telemetry:":
			in = true
		case line != "" && line[0] != ' ' && line[0] != '#':
			in = false
		case in && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") && strings.HasSuffix(line, ":"):
			listed[strings.TrimSuffix(strings.TrimSpace(line), ":")] = true
		}
	}
	if len(listed) == 0 {
		t.Fatal("metadata.yaml: no telemetry metrics")
	}
	for n := range listed {
		if !builderMetrics[n] {
			t.Errorf("%s: in metadata.yaml's telemetry section, not in builderMetrics", n)
		}
	}
	for n := range builderMetrics {
		if !listed[n] {
			t.Errorf("%s: in builderMetrics, not in metadata.yaml's telemetry section", n)
		}
	}
}

// TestProbeOffsetsInternal checks the probe offsets' histogram in the
// internal telemetry: one point per edge and direction recorded.
func TestProbeOffsetsInternal(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	po := newProbeOffsets(metadata.Meter(tel.NewTelemetrySettings()), zap.NewNop())
	po.record(1, 0, 2e-6)
	po.record(1, 0, 3e-6)
	po.record(0, 1, 1e-7)
	m, err := tel.GetMetric("otelcol_gpuprobe.receiver.windows.probe_offset")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{} // edge/direction → count, sum
	for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		e, _ := dp.Attributes.Value("gpuprobe.windows.edge")
		d, _ := dp.Attributes.Value("gpuprobe.windows.direction")
		got[e.AsString()+"/"+d.AsString()] = [2]float64{float64(dp.Count), dp.Sum}
	}
	want := map[string][2]float64{"end/inside": {2, 5e-6}, "start/outside": {1, 1e-7}}
	if len(got) != len(want) {
		t.Fatalf("points %v, want %v", got, want)
	}
	for k, w := range want {
		if g := got[k]; g[0] != w[0] || math.Abs(g[1]-w[1]) > 1e-15 {
			t.Errorf("%s: count, sum %v, want %v", k, g, w)
		}
	}
}
