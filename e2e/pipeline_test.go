package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// backends are the real Jaeger and Prometheus of one test.
type backends struct {
	jaeger *Jaeger
	prom   *Prometheus
}

// startBackends starts Jaeger and Prometheus for t; both stop when t ends.
func startBackends(t *testing.T, ctx context.Context) backends {
	t.Helper()
	jbin, pbin := need(t, ToolJaeger), need(t, ToolPrometheus)
	j, err := StartJaeger(ctx, jbin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	track(t, j.Process)
	p, err := StartPrometheus(ctx, pbin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	track(t, p.Process)
	return backends{jaeger: j, prom: p}
}

// exportConfig is the exporters and service parts of a collector config
// shared by the tests: traces over OTLP gRPC to Jaeger; metrics to the
// prometheus exporter (scraped by the test) and over OTLP/HTTP to
// Prometheus's OTLP receiver; the collector's own metrics on a pull port.
// Its %s verbs are: receivers section, traces receivers, metrics receivers.
func exportConfig(b backends, promExporter, selfMetrics int) string {
	return `receivers:
%s
processors:
  batch:
    timeout: 200ms
exporters:
  otlp_grpc/jaeger:
    endpoint: ` + b.jaeger.OTLPGRPC + `
    tls:
      insecure: true
  prometheus:
    endpoint: 127.0.0.1:` + strconv.Itoa(promExporter) + `
    metric_expiration: 10m
  otlp_http/prometheus:
    metrics_endpoint: ` + b.prom.OTLPMetricsURL() + `
service:
  telemetry:
    logs:
      level: info
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: ` + strconv.Itoa(selfMetrics) + `
  pipelines:
    traces:
      receivers: [%s]
      processors: [batch]
      exporters: [otlp_grpc/jaeger]
    metrics:
      receivers: [%s]
      processors: [batch]
      exporters: [prometheus, otlp_http/prometheus]
`
}

// TestDistributionExportsOTLP drives the ocb-built distribution with a real
// OTLP client: spans must reach Jaeger's query API with their structure and
// attributes, and metrics must reach the prometheus exporter (parsed with the
// Prometheus text parser) and Prometheus itself (checked with PromQL).
func TestDistributionExportsOTLP(t *testing.T) {
	otelcol := need(t, ToolOtelcol)
	ctx := testCtx(t, 5*time.Minute)
	b := startBackends(t, ctx)

	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	otlpIn := "127.0.0.1:" + strconv.Itoa(ports[0])
	receivers := "  otlp:\n    protocols:\n      grpc:\n        endpoint: " + otlpIn
	cfg := fmt.Sprintf(exportConfig(b, ports[1], ports[2]), receivers, "otlp", "otlp")
	promExporter := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics"
	col, err := StartCollector(ctx, otelcol, t.TempDir(), cfg, func(ctx context.Context) error {
		if err := dialTCP(ctx, otlpIn); err != nil {
			return err
		}
		_, err := Scrape(ctx, promExporter)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	track(t, col)

	service := fmt.Sprintf("e2e-otlp-%d", rand.Uint32())
	const launches = 17
	traces, metrics := otlpPayload(service, launches)
	conn, err := grpc.NewClient(otlpIn, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(traces)); err != nil {
		t.Fatalf("OTLP trace export: %v", err)
	}
	if _, err := pmetricotlp.NewGRPCClient(conn).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(metrics)); err != nil {
		t.Fatalf("OTLP metric export: %v", err)
	}

	t.Run("jaeger", func(t *testing.T) {
		var trace JaegerTrace
		err := Eventually(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
			ts, err := b.jaeger.Traces(ctx, service, 10)
			if err != nil {
				return err
			}
			if len(ts) != 1 || len(ts[0].Spans) != 3 {
				return fmt.Errorf("got %d traces, want 1 with 3 spans", len(ts))
			}
			trace = ts[0]
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]JaegerSpan{}
		for _, s := range trace.Spans {
			byName[s.OperationName] = s
		}
		root, ok := byName["vecAdd(float const*, float*, int)"]
		if !ok {
			t.Fatalf("no launch span in %+v", trace.Spans)
		}
		if root.Parent() != "" {
			t.Errorf("launch span has parent %s, want none", root.Parent())
		}
		for _, phase := range []string{"queued", "executing"} {
			s, ok := byName[phase]
			if !ok {
				t.Errorf("no %q span", phase)
				continue
			}
			if s.Parent() != root.SpanID {
				t.Errorf("%q parent = %q, want the launch span %q", phase, s.Parent(), root.SpanID)
			}
		}
		if v, ok := root.Tag("cuda.grid.x"); !ok || v != float64(256) {
			t.Errorf("cuda.grid.x = %v (%v), want 256", v, ok)
		}
		if got := trace.Processes[root.ProcessID].ServiceName; got != service {
			t.Errorf("service = %q, want %q", got, service)
		}
	})

	t.Run("prometheus exporter", func(t *testing.T) {
		err := Eventually(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
			fams, err := Scrape(ctx, promExporter)
			if err != nil {
				return err
			}
			ms := FindMetric(fams, "e2e_kernel_launches_total", map[string]string{"job": service, "kernel": "vecAdd"})
			if len(ms) != 1 {
				return fmt.Errorf("%d e2e_kernel_launches_total series for job %s, want 1", len(ms), service)
			}
			if v := ms[0].GetCounter().GetValue(); v != launches {
				return fmt.Errorf("e2e_kernel_launches_total = %v, want %d", v, launches)
			}
			hs := FindMetric(fams, "e2e_kernel_duration_seconds", map[string]string{"job": service})
			if len(hs) != 1 {
				return fmt.Errorf("%d e2e_kernel_duration_seconds series, want 1", len(hs))
			}
			h := hs[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() != 0.006 {
				return fmt.Errorf("histogram count %d sum %v, want 3 and 0.006", h.GetSampleCount(), h.GetSampleSum())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("promql", func(t *testing.T) {
		q := fmt.Sprintf(`sum(e2e_kernel_launches_total{job=%q, kernel="vecAdd"})`, service)
		err := Eventually(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
			s, err := b.prom.Query(ctx, q)
			if err != nil {
				return err
			}
			if len(s) != 1 || s[0].Value != launches {
				return fmt.Errorf("%s = %+v, want %d", q, s, launches)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("collector self-metrics", func(t *testing.T) {
		self := "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics"
		err := Eventually(ctx, 10*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
			fams, err := Scrape(ctx, self)
			if err != nil {
				return err
			}
			name, fam := Family(fams, "otelcol_receiver_accepted_spans")
			if fam == nil {
				return fmt.Errorf("no otelcol_receiver_accepted_spans[_total] among %v", FamilyNames(fams))
			}
			ms := FindMetric(fams, name, map[string]string{"receiver": "otlp"})
			if len(ms) != 1 {
				return fmt.Errorf("%d %s series for receiver otlp, want 1", len(ms), name)
			}
			if v := ms[0].GetCounter().GetValue(); v != 3 {
				return fmt.Errorf("%s = %v, want 3", name, v)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// otlpPayload builds one launch trace (a launch span with two phase
// children) and the metrics of launches launches of one kernel.
func otlpPayload(service string, launches int64) (ptrace.Traces, pmetric.Metrics) {
	now := time.Now()
	ts := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(now.Add(d)) }

	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	traceID := pcommon.TraceID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(rand.Uint32())})
	rootID := pcommon.SpanID([8]byte{1, 1, 1, 1, 1, 1, 1, 1})
	root := spans.AppendEmpty()
	root.SetName("vecAdd(float const*, float*, int)")
	root.SetTraceID(traceID)
	root.SetSpanID(rootID)
	root.SetStartTimestamp(ts(-3 * time.Millisecond))
	root.SetEndTimestamp(ts(0))
	root.Attributes().PutInt("cuda.grid.x", 256)
	for i, name := range []string{"queued", "executing"} {
		s := spans.AppendEmpty()
		s.SetName(name)
		s.SetTraceID(traceID)
		s.SetSpanID(pcommon.SpanID([8]byte{2, 2, 2, 2, 2, 2, 2, byte(i)}))
		s.SetParentSpanID(rootID)
		s.SetStartTimestamp(ts(time.Duration(i-3) * time.Millisecond))
		s.SetEndTimestamp(ts(time.Duration(i-2) * time.Millisecond))
	}

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", service)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	m := ms.AppendEmpty()
	m.SetName("e2e.kernel.launches")
	m.SetUnit("{launch}")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp := sum.DataPoints().AppendEmpty()
	dp.Attributes().PutStr("kernel", "vecAdd")
	dp.SetStartTimestamp(ts(-time.Minute))
	dp.SetTimestamp(ts(0))
	dp.SetIntValue(launches)

	h := ms.AppendEmpty()
	h.SetName("e2e.kernel.duration")
	h.SetUnit("s")
	hist := h.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	hp := hist.DataPoints().AppendEmpty()
	hp.SetStartTimestamp(ts(-time.Minute))
	hp.SetTimestamp(ts(0))
	hp.SetCount(3)
	hp.SetSum(0.006)
	hp.ExplicitBounds().FromRaw([]float64{0.001, 0.01})
	hp.BucketCounts().FromRaw([]uint64{0, 3, 0})
	return td, md
}
