package receiver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// loadConfig decodes raw over the default configuration, as the collector
// does.
func loadConfig(t *testing.T, raw map[string]any) (*Config, error) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	err := confmap.NewFromStringMap(raw).Unmarshal(cfg)
	return cfg, err
}

func TestConfigBuilderKeys(t *testing.T) {
	tests := []struct {
		name    string
		raw     map[string]any
		wantErr string
		check   func(*Config) bool
	}{
		{name: "metric off",
			raw: map[string]any{"metrics": map[string]any{"gpu.cuda.kernel.launches": map[string]any{"enabled": false}}},
			check: func(c *Config) bool {
				return !c.Metrics.GpuCudaKernelLaunches.Enabled && c.Metrics.GpuCudaMemcpyBytes.Enabled
			}},
		{name: "resource attribute off, own keys kept",
			raw: map[string]any{"resource_attributes": map[string]any{"process.executable.path": map[string]any{"enabled": false}},
				"sampling": map[string]any{"one_in": 3}},
			check: func(c *Config) bool {
				return !c.ResourceAttributes.ProcessExecutablePath.Enabled && c.ResourceAttributes.HostName.Enabled && c.Sampling.OneIn == 3
			}},
		{name: "unknown metric",
			raw:     map[string]any{"metrics": map[string]any{"gpu.cuda.nope": map[string]any{"enabled": false}}},
			wantErr: "gpu.cuda.nope"},
		{name: "own checks still run",
			raw:     map[string]any{"buffers": map[string]any{"ring_slots": 4294967360}},
			wantErr: "ring_slots"},
		{name: "unknown own key",
			raw:     map[string]any{"nope": 1},
			wantErr: "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(t, tt.raw)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Fatalf("decoded %+v", cfg.MetricsBuilderConfig)
			}
		})
	}
}

// TestMetricViewEndToEnd turns gpu.cuda.kernel.launches and the resource
// attribute host.name off, and checks the
// metrics the receiver emits from a ring.
func TestMetricViewEndToEnd(t *testing.T) {
	cfg, err := loadConfig(t, map[string]any{
		"agent":            map[string]any{"socket": filepath.Join(t.TempDir(), "agent.sock")},
		"poll_interval":    "1ms",
		"metrics_interval": "20ms",
		"metrics": map[string]any{
			"gpu.cuda.kernel.launches": map[string]any{"enabled": false},
		},
		"resource_attributes": map[string]any{"host.name": map[string]any{"enabled": false}},
		"telemetry":           map[string]any{"in_pipeline": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, mr, traces, sink := startBoth(t, cfg)
	ring, err := shm.CreateRing(cfg.Buffers.SlotSize, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	tr.(*handle).r.AddRing(ring)
	now, pid := monoNow(t), uint32(os.Getpid())
	for _, r := range []interface{ Append([]byte) []byte }{
		&record.KernelName{Function: 1, PID: pid, Name: "_Z4gemmPfS_S_"},
		&record.Launch{LaunchID: 1, PID: pid, TID: 1, EnqueueNS: now, ReturnNS: now + 2000, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}},
		&record.Completion{LaunchID: 1, CompleteNS: now + 9000},
		&record.Memcpy{Bytes: 4096, StartNS: now, EndNS: now + 1000, Kind: record.MemcpyHostToDevice, PID: pid},
	} {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
	// Once the spans are out, the next emission has the launch's series.
	waitFor(t, "the four spans", func() bool { return traces.SpanCount() >= 4 })
	waitEmissions(t, sink, 2)
	got, hosts := emitted(sink.AllMetrics())
	for _, c := range []interface{ Shutdown(context.Context) error }{tr, mr} {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{
		"gpu.cuda.kernel.launches":       false, // turned off
		"gpu.cuda.memcpy.bytes":          true,
		"gpu.cuda.memcpy.duration":       true, // not in metadata.yaml: always kept
		"gpuprobe.receiver.records.read": true,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s emitted: %v, want %v", name, got[name], w)
		}
	}
	if hosts != 0 {
		t.Errorf("%d resources with host.name, want 0", hosts)
	}
}

// TestMetricViewDefaults checks that the default configuration leaves no
// metric and no resource attribute out.
func TestMetricViewDefaults(t *testing.T) {
	v := newMetricView(createDefaultConfig().(*Config).MetricsBuilderConfig)
	if len(v.off) != 0 || len(v.resource) != 0 {
		t.Fatalf("default view turns off %v and resource attributes %v", v.off, v.resource)
	}
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	ms.AppendEmpty().SetName("gpu.cuda.kernel.launches")
	ms.AppendEmpty().SetName("gpu.cuda.memcpy.bytes")
	v.apply(md)
	if got, _ := emitted([]pmetric.Metrics{md}); len(got) != 2 || !got["gpu.cuda.memcpy.bytes"] || !got["gpu.cuda.kernel.launches"] {
		t.Fatalf("kept %v", got)
	}
}

// emitted returns the metric names of all, and the number of resources
// with host.name.
func emitted(all []pmetric.Metrics) (map[string]bool, int) {
	names, hosts := map[string]bool{}, 0
	for _, md := range all {
		for i := range md.ResourceMetrics().Len() {
			rm := md.ResourceMetrics().At(i)
			if _, ok := rm.Resource().Attributes().Get("host.name"); ok {
				hosts++
			}
			for j := range rm.ScopeMetrics().Len() {
				ms := rm.ScopeMetrics().At(j).Metrics()
				for k := range ms.Len() {
					names[ms.At(k).Name()] = true
				}
			}
		}
	}
	return names, hosts
}
