package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gpureceiver "github.com/gpuprobe/gpuprobe/receiver"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

func TestLoadgenFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--grid", "1,2"}, "--grid: want X,Y,Z"},
		{[]string{"--block", "0,1,1"}, "--block: component 0 must be a positive integer"},
		{[]string{"--kernels", ","}, "--kernels: need at least one name"},
		{[]string{"--launches", "-1"}, "--launches: must be ≥ 0"},
		{[]string{"--rate", "-5"}, "--rate: must be ≥ 0"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		if code := run(append([]string{"loadgen"}, tt.args...), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestLoadgenThroughAgent starts the receiver, runs loadgen against its real
// agent socket, and checks the spans and metrics that come out.
func TestLoadgenThroughAgent(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		spans int // per launch
	}{
		// launch, call, queued, executing, completion
		{"with completions", nil, 5},
		// as the shim: no completion records; the launches wait (launch
		// timeout 1h) and are emitted by the traces handle's Shutdown
		{"no completions, flushed at shutdown", []string{"--no-completion"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { loadgenThroughAgent(t, tt.extra, tt.spans) })
	}
}

func loadgenThroughAgent(t *testing.T, extra []string, perLaunch int) {
	f := gpureceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*gpureceiver.Config)
	cfg.Agent.Socket = filepath.Join(t.TempDir(), "agent.sock")
	cfg.PollInterval = time.Millisecond
	cfg.MetricsInterval = 10 * time.Millisecond
	cfg.Limits.LaunchTimeout = time.Hour
	// Every launch's spans are counted: lift the trace policy's head bounds.
	s := &cfg.Sampling
	s.TracesPerSecondPerKernel, s.TracesPerSecondPerProcess, s.TracesPerSecondPerNode = 0, 0, 0
	set := receivertest.NewNopSettings(f.Type())
	traces, metrics := new(consumertest.TracesSink), new(consumertest.MetricsSink)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, metrics)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := mr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := append([]string{"loadgen", "--socket", cfg.Agent.Socket, "--launches", "50", "--kernels", "_Z1av,_Z1bv",
		"--grid", "2,1,1", "--block", "64,1,1", "--memcpy-every", "0"}, extra...)
	code := run(args, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "0 dropped") {
		t.Fatalf("loadgen: %s", stdout.String())
	}
	want := 50 * perLaunch
	// With completions every span must come; either way a few metric
	// intervals pass (every record read) before the shutdown. Short of
	// that after 10 s, the checks below say what is missing.
	pollUntil(10*time.Second, func() bool {
		return (perLaunch != 5 || traces.SpanCount() >= want) && len(metrics.AllMetrics()) >= 3
	})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := mr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := traces.SpanCount(); got != want {
		t.Fatalf("%d spans, want %d", got, want)
	}
	names := map[string]int{}
	for _, td := range traces.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
			for j := range ss.Len() {
				names[ss.At(j).Name()]++
			}
		}
	}
	for _, n := range []string{"a", "b"} {
		if names[n] != 25 {
			t.Errorf("%d %q launch spans, want 25 (%v)", names[n], n, names)
		}
	}
	if c := names["cuda.completion"]; (perLaunch == 5) != (c == 50) {
		t.Errorf("%d completion spans with %d spans per launch", c, perLaunch)
	}
	if len(metrics.AllMetrics()) == 0 {
		t.Fatal("no metrics")
	}
}
