package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dashboardFile is the Grafana dashboard, relative to the repository root.
const dashboardFile = "deploy/grafana/gpuprobe-dashboard.json"

// dashboardNoData lists the queries (panel title, then refId) that cannot
// return data in this test, with the reason. A listed query that returns
// data fails the test, so the list cannot go stale. Empty: the MOCK
// driver, the MOCK CUPTI and limits::spans_per_second give every panel
// its data.
var dashboardNoData = map[string]string{}

// dashboardQuery is one target of one panel.
type dashboardQuery struct {
	panel, ref, expr string
}

func (q dashboardQuery) String() string {
	return strings.TrimSpace(fmt.Sprintf("%q %s", q.panel, q.ref))
}

// dashboardQueries reads every panel's targets and every query
// variable's query, and the names of the dashboard's template variables.
func dashboardQueries(t *testing.T, root string) ([]dashboardQuery, map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"` // a collapsed row's
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := map[string]bool{}
	var qs []dashboardQuery
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		// label_values(SEL, L) lists the values of L among SEL's series:
		// group by (L) (SEL) must return series that have it.
		q, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("%s: variable %s: query %v is not label_values(selector, label)", dashboardFile, v.Name, v.Query)
		}
		qs = append(qs, dashboardQuery{"variable " + v.Name, "", fmt.Sprintf("group by (%s) (%s)", m[2], m[1])})
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, dashboardQuery{p.Title, tg.RefID, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(qs) == 0 {
		t.Fatalf("%s: no panel has a query", dashboardFile)
	}
	return qs, vars
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// instantQuery makes expr a query Prometheus runs: Grafana's interval
// variables become 1m and the dashboard's template variables .+ (all
// values, the label present: the pod and namespace joins are exercised).
func instantQuery(expr string, vars map[string]bool) (string, error) {
	var err error
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		s := grafanaVar.FindStringSubmatch(m)
		name := s[1] + s[2] + s[3]
		switch {
		case name == "__rate_interval" || name == "__interval" || name == "__range":
			return "1m"
		case vars[name]:
			return ".+"
		}
		err = fmt.Errorf("unknown variable %s in %q", m, expr)
		return m
	})
	return out, err
}

// TestDashboardQueries runs every query of the Grafana dashboard
// against a real Prometheus fed by the real collector: kernel metrics over
// OTLP from two MOCK applications through the shim (with the MOCK CUPTI,
// so launches have driver windows and their durations), a pod's
// attributes added by resource_detection from the collector's own
// OTEL_RESOURCE_ATTRIBUTES as k8s_attributes would add them (the receiver
// drops the k8s.* attributes an application claims), and the collector's
// internal telemetry scraped. Each query must return at least
// one series, every series with the labels of the query's first "by",
// with exponential histograms (native in Prometheus) and with explicit
// ones (classic _sum/_count series).
func TestDashboardQueries(t *testing.T) {
	otelcol, shim, pbin := need(t, ToolOtelcol), need(t, ToolShim), need(t, ToolPrometheus)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	qs, vars := dashboardQueries(t, root)
	ctx := testCtx(t, 8*time.Minute)
	dir := t.TempDir()
	app, err := BuildMockApp(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	cupti := filepath.Join(dir, "libcupti.so.13")
	if _, err := runTool(ctx, 2*time.Minute, root, "gcc", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
		"-Wl,-soname,libcupti.so.13", "-o", cupti, filepath.Join(root, "shim", "testdata", "mock_libcupti.c"),
		"-ldl", "-lpthread"); err != nil {
		t.Fatalf("building the MOCK CUPTI: %v", err)
	}
	for _, kind := range []string{"exponential", "explicit"} {
		t.Run(kind+" histograms", func(t *testing.T) {
			prom := startDashboardPipeline(t, ctx, otelcol, pbin, shim, cupti, app, kind)
			if kind == "explicit" {
				// The classic side of each histogram query's "or" is
				// the one that answers.
				q := `count(gpu_cuda_kernel_execution_duration_seconds_count)`
				if err := Eventually(ctx, time.Minute, time.Second, nonEmpty(prom, q)); err != nil {
					t.Fatal(err)
				}
			}
			for _, dq := range qs {
				checkDashboardQuery(t, ctx, prom, dq, vars)
			}
			checkGPUTimeShares(t, ctx, prom, qs, vars)
		})
	}
}

// checkDashboardQuery runs dq until it returns a series (a minute at
// most), or checks that it returns none if dashboardNoData lists it.
func checkDashboardQuery(t *testing.T, ctx context.Context, prom *Prometheus, dq dashboardQuery, vars map[string]bool) {
	t.Helper()
	q, err := instantQuery(dq.expr, vars)
	if err != nil {
		t.Errorf("%s: %v", dq, err)
		return
	}
	if why, ok := dashboardNoData[dq.panel+" "+dq.ref]; ok {
		s, err := prom.Query(ctx, q)
		if err != nil || len(s) > 0 {
			t.Errorf("%s is listed as without data (%s) but returns %d series (%v)", dq, why, len(s), err)
		}
		t.Logf("%s: no data in this test: %s", dq, why)
		return
	}
	if err := Eventually(ctx, time.Minute, time.Second, nonEmpty(prom, q)); err != nil {
		t.Errorf("%s: %v", dq, err)
		return
	}
	s, err := prom.Query(ctx, q)
	if err != nil {
		t.Errorf("%s: %v", dq, err)
		return
	}
	t.Logf("%s: %d series, first %v", dq, len(s), s[0])
	// The labels the panel groups by (and its legend shows) are there:
	// a label Prometheus stored under another name would leave them out.
	if m := firstBy.FindStringSubmatch(q); m != nil {
		for _, l := range strings.Split(m[1], ",") {
			l = strings.TrimSpace(l)
			for _, x := range s {
				if x.Metric[l] == "" {
					t.Errorf("%s: series %v has no label %s (by (%s))", dq, x.Metric, l, m[1])
					break
				}
			}
		}
	}
}

// gpuTimePanel is the panel whose query charges GPU time to pods.
const gpuTimePanel = "GPU time by pod"

// checkGPUTimeShares checks the values of the GPU time by pod panel: both
// applications have a gpu.cuda.process.time series (one per process, on
// its resource); the panel has a share of the GPU for each (one pod, a
// service each), in (0, 1], at most one GPU together, and its sum is the
// processes' rates' (the join on target_info neither drops nor doubles
// one).
func checkGPUTimeShares(t *testing.T, ctx context.Context, prom *Prometheus, qs []dashboardQuery, vars map[string]bool) {
	t.Helper()
	var panel string
	for _, dq := range qs {
		if dq.panel == gpuTimePanel {
			panel = dq.expr
		}
	}
	if panel == "" {
		t.Fatalf("%s: no panel %q", dashboardFile, gpuTimePanel)
	}
	q, err := instantQuery(panel, vars)
	if err != nil {
		t.Fatal(err)
	}
	procs := `count(gpu_cuda_process_time_seconds_total)`
	if err := Eventually(ctx, time.Minute, time.Second, func(ctx context.Context) error {
		s, err := prom.Query(ctx, procs)
		if err != nil {
			return err
		}
		if len(s) != 1 || s[0].Value < 2 {
			return fmt.Errorf("%s: %v, want both applications' series", procs, s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pods, err := prom.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// The panel groups by pod and job: the two applications (one pod, a
	// service each) are a series each.
	jobs := map[string]bool{}
	var total float64
	for _, p := range pods {
		jobs[p.Metric["job"]] = true
		total += p.Value
		if p.Metric["k8s_pod_name"] != "gpu-0" || p.Value <= 0 || p.Value > 1 {
			t.Errorf("%s: %v: want pod gpu-0, a share in (0, 1]", gpuTimePanel, p)
		}
	}
	if len(jobs) != 2 || len(pods) != 2 || total > 1 {
		t.Errorf("%s: %v: want a series for each of the two applications, at most one GPU together", gpuTimePanel, pods)
	}
	// One query, one evaluation time: the panel's against the processes'.
	ratio := fmt.Sprintf("sum(%s) / sum(rate(gpu_cuda_process_time_seconds_total[1m]))", q)
	r, err := prom.Query(ctx, ratio)
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 || math.Abs(r[0].Value-1) > 1e-9 {
		t.Errorf("the panel's GPU time over its processes': %v, want 1", r)
	}
	for _, p := range pods {
		t.Logf("%s: pod %s, %s: %.3g of a GPU", gpuTimePanel, p.Metric["k8s_pod_name"], p.Metric["job"], p.Value)
	}
}

// firstBy finds the labels of an expression's first "by" clause, the
// grouping of its result.
var firstBy = regexp.MustCompile(`\bby \(([^)]*)\)`)

// nonEmpty is a condition: q returns at least one series.
func nonEmpty(prom *Prometheus, q string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := prom.Query(ctx, q)
		if err != nil {
			return err
		}
		if len(s) == 0 {
			return fmt.Errorf("%s: no series", q)
		}
		return nil
	}
}

// startDashboardPipeline starts Prometheus and a collector with
// histograms::kind kind, runs one short application to its end and starts
// a long one (100 launches a second, 10 ms apart: host-bound) that runs
// until t ends, and returns the Prometheus.
func startDashboardPipeline(t *testing.T, ctx context.Context, otelcol, pbin, shim, cupti string, app MockApp, kind string) *Prometheus {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	self := "127.0.0.1:" + strconv.Itoa(ports[0])
	prom, err := StartPrometheus(ctx, pbin, t.TempDir(), self)
	if err != nil {
		t.Fatal(err)
	}
	track(t, prom.Process)
	tag := rand.Uint32()
	ns := fmt.Sprintf("e2e-%d", tag)
	// The collector's environment, read by resource_detection's env
	// detector: the pod of both applications.
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name="+ns+",k8s.pod.name=gpu-0")
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	col, err := StartCollector(ctx, otelcol, dir, dashboardConfig(socket, kind, prom.OTLPMetricsURL(), ports[0]),
		func(ctx context.Context) error {
			if _, err := os.Stat(socket); err != nil {
				return fmt.Errorf("agent socket: %w", err)
			}
			_, err := Scrape(ctx, "http://"+self+"/metrics")
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	track(t, col)

	env := func(service string) []string {
		return []string{"OTEL_SERVICE_NAME=" + service,
			"GPUPROBE_CUPTI=" + cupti, "MOCK_DEVICE_COUNT=1", "MOCK_CURRENT_DEVICE=0"}
	}
	// basic: vecAdd and gemm launches, a stream sync and a host-to-device
	// copy, then exit (its series are kept 5 minutes).
	out, err := app.Command(ctx, shim, socket, nil, env("e2e-trainer"), "cudart", "basic", "20").CombinedOutput()
	if err != nil {
		t.Fatalf("app basic: %v\n%s", err, out)
	}
	// slow: live while the queries run, for the self-metrics that cover
	// connected processes only (coverage, spans.rate_limited).
	actx, cancel := context.WithCancel(ctx)
	slow := app.Command(actx, shim, socket, nil, env("e2e-loader"), "cudart", "slow", "100000")
	buf := &tailBuffer{max: maxLogBytes}
	slow.Stdout, slow.Stderr = buf, buf
	if err := slow.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := slow.Wait(); err != nil && actx.Err() == nil {
			t.Errorf("app slow: %v\n%s", err, buf)
		}
	})
	return prom
}

// dashboardConfig is the collector's configuration: the receiver with
// histograms of kind, spans capped at 10 a second (so some are rate
// limited), metrics over OTLP to Prometheus, internal telemetry on
// 127.0.0.1:selfPort.
func dashboardConfig(socket, kind, otlpURL string, selfPort int) string {
	return `receivers:
  gpuprobe:
    agent:
      socket: ` + socket + `
      socket_mode: "0600"
    poll_interval: 5ms
    metrics_interval: 1s
    histograms:
      kind: ` + kind + `
    limits:
      spans_per_second: 10
    # No head bound: spans_per_second is what limits the spans.
    sampling:
      traces_per_second_per_kernel: 0
      traces_per_second_per_process: 0
      traces_per_second_per_node: 0
processors:
  resource_detection:
    detectors: [env]
    override: false
  batch:
    timeout: 200ms
exporters:
  debug:
    verbosity: basic
  otlp_http/prometheus:
    metrics_endpoint: ` + otlpURL + `
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
                port: ` + strconv.Itoa(selfPort) + `
  pipelines:
    traces:
      receivers: [gpuprobe]
      exporters: [debug]
    metrics:
      receivers: [gpuprobe]
      processors: [resource_detection, batch]
      exporters: [otlp_http/prometheus]
`
}
