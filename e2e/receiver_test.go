package e2e

import (
	"context"
	"errors"
	"fmt"
	dto "github.com/prometheus/client_model/go"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// loadgenKernels are the mangled names loadgen writes (round-robin) and the
// demangled names the receiver must give their spans and series: the
// qualified name with template arguments, without the parameter list.
var loadgenKernels = []struct{ mangled, demangled string }{
	{"_Z6vecAddPfS_S_i", "vecAdd"},                              // void vecAdd(float*, float*, float*, int)
	{"_ZN4gemm6kernelILi128EEEvPKfS2_Pfi", "gemm::kernel<128>"}, // void gemm::kernel<128>(float const*, float const*, float*, int)
}

// TestReceiverEndToEnd runs the whole pipeline with real components: the
// synthetic producer (gpuprobe-harness loadgen) writes launch records into the
// receiver's shared-memory ring through its agent socket; the collector
// exports spans to Jaeger and metrics to the prometheus exporter and to
// Prometheus's OTLP receiver; the test reads everything back through each
// backend's own API and checks names, structure, attributes and exact counts.
func TestReceiverEndToEnd(t *testing.T) {
	otelcol, harness := need(t, ToolOtelcol), need(t, ToolHarness)
	ctx := testCtx(t, 5*time.Minute)
	b := startBackends(t, ctx)

	const (
		launches    = 40
		gridX       = 4
		blockX      = 64
		warps       = gridX * blockX / 32
		memcpyEvery = 10
		memcpys     = launches / memcpyEvery
	)
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	service := fmt.Sprintf("e2e-gpuprobe-%d", rand.Uint32())
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	receivers := `  gpuprobe:
    agent:
      socket: ` + socket + `
      socket_mode: "0600"
    probes:
      kernel_phases: true
    # Every launch's trace is checked: no head bound.
    sampling:
      traces_per_second_per_kernel: 0
      traces_per_second_per_process: 0
      traces_per_second_per_node: 0
    poll_interval: 5ms
    metrics_interval: 1s
    resource:
      service_name: ` + service
	cfg := fmt.Sprintf(exportConfig(b, ports[0], ports[1]), receivers, "gpuprobe", "gpuprobe")
	promExporter := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"
	selfMetrics := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics"
	col, err := StartCollector(ctx, otelcol, dir, cfg, func(ctx context.Context) error {
		if _, err := os.Stat(socket); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
		_, err := Scrape(ctx, promExporter)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	track(t, col)

	// The producer: real shm ring, real agent socket handshake.
	kernels := loadgenKernels[0].mangled + "," + loadgenKernels[1].mangled
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(lctx, harness, "loadgen", "--socket", socket, "--launches", strconv.Itoa(launches),
		"--kernels", kernels, "--grid", fmt.Sprintf("%d,1,1", gridX), "--block", fmt.Sprintf("%d,1,1", blockX),
		"--memcpy-every", strconv.Itoa(memcpyEvery)).CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	t.Logf("loadgen: %s", out)
	m := regexp.MustCompile(`(\d+) records published, (\d+) dropped`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("loadgen output %q has no record counts", out)
	}
	published, _ := strconv.Atoi(string(m[1]))
	if dropped := string(m[2]); dropped != "0" {
		t.Fatalf("loadgen dropped %s records on a ring sized for more", dropped)
	}

	t.Run("jaeger spans", func(t *testing.T) {
		var traces []JaegerTrace
		err := Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
			ts, err := b.jaeger.Traces(ctx, service, 1000)
			if err != nil {
				return err
			}
			if len(ts) != launches+memcpys {
				return fmt.Errorf("%d traces for %s, want %d launches + %d memcpys", len(ts), service, launches, memcpys)
			}
			traces = ts
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		checkLaunchTraces(t, traces, launches, gridX, blockX, warps, memcpys)
	})

	t.Run("prometheus exporter", func(t *testing.T) {
		err := Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
			fams, err := Scrape(ctx, promExporter)
			if err != nil {
				return err
			}
			for _, k := range loadgenKernels {
				ms := FindMetric(fams, "gpu_cuda_kernel_launches_total",
					map[string]string{"job": service, "cuda_kernel_name": k.demangled})
				if len(ms) != 1 {
					return fmt.Errorf("%d gpu_cuda_kernel_launches_total series for %q, want 1", len(ms), k.demangled)
				}
				if v := ms[0].GetCounter().GetValue(); v != launches/2 {
					return fmt.Errorf("gpu_cuda_kernel_launches_total{%q} = %v, want %d", k.demangled, v, launches/2)
				}
			}
			// Host waits: every launch but the first and those right
			// after a copy on the stream, over both kernels' series.
			var waits uint64
			for _, m := range FindMetric(fams, "gpu_cuda_kernel_host_wait_duration_seconds", map[string]string{"job": service}) {
				waits += m.GetHistogram().GetSampleCount()
			}
			if waits != launches-1-memcpys {
				return fmt.Errorf("gpu_cuda_kernel_host_wait_duration_seconds count %d, want %d", waits, launches-1-memcpys)
			}
			ms := FindMetric(fams, "gpu_cuda_memcpy_bytes_total", map[string]string{"job": service, "cuda_memcpy_kind": "MemcpyDeviceToHost"})
			if len(ms) != 1 {
				return fmt.Errorf("%d gpu_cuda_memcpy_bytes_total{MemcpyDeviceToHost} series, want 1", len(ms))
			}
			if v := ms[0].GetCounter().GetValue(); v != memcpys<<20 {
				return fmt.Errorf("gpu_cuda_memcpy_bytes_total = %v, want %d", v, memcpys<<20)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("promql", func(t *testing.T) {
		tests := []struct {
			query string
			want  float64
		}{
			{fmt.Sprintf(`sum(gpu_cuda_kernel_launches_total{job=%q})`, service), launches},
			{fmt.Sprintf(`sum(gpu_cuda_kernel_launches_total{job=%q, cuda_kernel_name=%q})`, service, loadgenKernels[0].demangled), launches / 2},
			// Exponential histograms arrive as native histograms.
			{fmt.Sprintf(`histogram_count(sum(gpu_cuda_kernel_execution_duration_seconds{job=%q}))`, service), launches},
			// A host wait for every launch but the first and the one after
			// each copy on the stream (loadgen's memcpy every 10).
			{fmt.Sprintf(`histogram_count(sum(gpu_cuda_kernel_host_wait_duration_seconds{job=%q}))`, service), launches - 1 - memcpys},
		}
		for _, tc := range tests {
			err := Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
				s, err := b.prom.Query(ctx, tc.query)
				if err != nil {
					return err
				}
				if len(s) != 1 || s[0].Value != tc.want {
					return fmt.Errorf("%s = %+v, want %v", tc.query, s, tc.want)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("self-metrics", func(t *testing.T) {
		err := Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
			fams, err := Scrape(ctx, selfMetrics)
			if err != nil {
				return err
			}
			read, ok := sumFamily(fams, "otelcol_gpuprobe_receiver_records_read")
			if !ok {
				return fmt.Errorf("no otelcol_gpuprobe_receiver_records_read[_total] among %v", FamilyNames(fams))
			}
			if read != float64(published) {
				return fmt.Errorf("records read = %v, want the %d loadgen published", read, published)
			}
			if d, _ := sumFamily(fams, "otelcol_gpuprobe_receiver_records_dropped"); d != 0 {
				return fmt.Errorf("records dropped = %v, want 0", d)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// checkLaunchTraces checks every launch trace: one root span named after the
// demangled kernel, the four phase children under it, the launch attributes;
// launch ids 1..launches each once, and the kernels split evenly.
func checkLaunchTraces(t *testing.T, traces []JaegerTrace, launches, gridX, blockX, warps, memcpys int) {
	t.Helper()
	perKernel := map[string]int{}
	ids := map[int64]bool{}
	nMemcpy := 0
	wantPhases := []string{"cuda.launch_call", "cuda.queued", "cuda.executing", "cuda.completion"}
	for _, tr := range traces {
		if len(tr.Spans) == 1 && tr.Spans[0].OperationName == "cuda.memcpy" {
			nMemcpy++
			continue
		}
		var roots []JaegerSpan
		for _, s := range tr.Spans {
			if s.Parent() == "" {
				roots = append(roots, s)
			}
		}
		if len(roots) != 1 {
			t.Errorf("trace %s: %d root spans, want 1", tr.TraceID, len(roots))
			continue
		}
		root := roots[0]
		perKernel[root.OperationName]++
		children := map[string]int{}
		for _, s := range tr.Spans {
			if s.SpanID == root.SpanID {
				continue
			}
			if s.Parent() != root.SpanID {
				t.Errorf("trace %s: span %q has parent %q, want the launch span", tr.TraceID, s.OperationName, s.Parent())
			}
			children[s.OperationName]++
		}
		for _, p := range wantPhases {
			if children[p] != 1 {
				t.Errorf("trace %s (%s): %d %q children, want 1 (children: %v)", tr.TraceID, root.OperationName, children[p], p, children)
			}
		}
		if len(children) != len(wantPhases) {
			t.Errorf("trace %s: children %v, want exactly %v", tr.TraceID, children, wantPhases)
		}
		for key, want := range map[string]float64{
			"cuda.grid.x": float64(gridX), "cuda.grid.y": 1, "cuda.block.x": float64(blockX),
			"cuda.warps.observed": float64(warps), "cuda.device.index": 0,
		} {
			if v, ok := root.Tag(key); !ok || v != want {
				t.Errorf("trace %s: %s = %v (present %v), want %v", tr.TraceID, key, v, ok, want)
			}
		}
		if v, _ := root.Tag("cuda.kernel.name"); v != root.OperationName {
			t.Errorf("trace %s: cuda.kernel.name = %v, want the span name %q", tr.TraceID, v, root.OperationName)
		}
		if v, ok := root.Tag("code.function.name"); ok {
			t.Errorf("trace %s: launch span has code.function.name = %v, want the kernel in cuda.kernel.name only", tr.TraceID, v)
		}
		for _, k := range loadgenKernels {
			if k.demangled != root.OperationName {
				continue
			}
			if v, _ := root.Tag("cuda.kernel.mangled_name"); v != k.mangled {
				t.Errorf("trace %s: cuda.kernel.mangled_name = %v, want %q", tr.TraceID, v, k.mangled)
			}
		}
		if id, ok := root.Tag("cuda.launch.id"); ok {
			if f, isNum := id.(float64); isNum {
				ids[int64(f)] = true
			}
		}
	}
	if nMemcpy != memcpys {
		t.Errorf("%d memcpy traces, want %d", nMemcpy, memcpys)
	}
	for _, k := range loadgenKernels {
		if perKernel[k.demangled] != launches/2 {
			t.Errorf("%d launch traces named %q, want %d (all: %v)", perKernel[k.demangled], k.demangled, launches/2, perKernel)
		}
	}
	for id := int64(1); id <= int64(launches); id++ {
		if !ids[id] {
			t.Errorf("no launch span with cuda.launch.id %d", id)
		}
	}
	if len(ids) != launches {
		t.Error(errors.New("launch ids are not exactly 1..launches"))
	}
}

// sumFamily adds up every counter (or gauge/untyped) sample of the family
// base or base_total; ok is false when neither exists.
func sumFamily(fams map[string]*dto.MetricFamily, base string) (sum float64, ok bool) {
	_, fam := Family(fams, base)
	for _, m := range fam.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum, fam != nil
}
