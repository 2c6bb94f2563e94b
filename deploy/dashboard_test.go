package deploy

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dashboardFile is the Grafana dashboard (docs/exporting.md); e2e's
// TestDashboardQueries runs its queries on a real Prometheus.
const dashboardFile = "grafana/gpuprobe-dashboard.json"

// collectorMetrics are the collector's own metrics the dashboard reads
// (its internal telemetry, not the receiver's), as a scrape with
// underscore escaping names them.
var collectorMetrics = map[string]bool{
	"otelcol_process_cpu_seconds": true,
	"otelcol_process_memory_rss":  true,
}

type dashPanel struct {
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

type dashboard struct {
	SchemaVersion int         `json:"schemaVersion"`
	UID           string      `json:"uid"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboard checks the dashboard without Prometheus: valid JSON, a
// Prometheus datasource variable that every panel and query uses, a
// query in every panel, only known variables, and only metric names the
// receiver emits (receiver/metadata.yaml and docs/names.md), so that a
// renamed metric fails here as well as in e2e.
func TestDashboard(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 39 || d.UID == "" {
		t.Errorf("schemaVersion %d (want ≥ 39), uid %q", d.SchemaVersion, d.UID)
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
			t.Errorf("variable datasource: type %q query %v, want a prometheus datasource variable", v.Type, v.Query)
		}
	}
	if !vars["datasource"] {
		t.Error("no datasource variable")
	}
	known := emittedMetrics(t)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			checkExpr(t, "variable "+v.Name, q, vars, known)
		}
	}
	n := 0
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if uid := p.Datasource["uid"]; uid != "${datasource}" {
				t.Errorf("panel %q: datasource uid %v, want ${datasource}", p.Title, uid)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, tg := range p.Targets {
				n++
				where := p.Title + " " + tg.RefID
				if tg.Datasource["uid"] != "${datasource}" {
					t.Errorf("%s: datasource %v, want uid ${datasource}", where, tg.Datasource)
				}
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: empty expr", where)
				}
				checkExpr(t, where, tg.Expr, vars, known)
			}
		}
	}
	walk(d.Panels)
	t.Logf("%d queries checked against %d metric names", n, len(known))
}

var (
	dashVar     = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)
	quoted      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]`)
	metricToken = regexp.MustCompile(`\b(?:gpu_cuda|gpuprobe|otelcol)_[a-zA-Z0-9_]*`)
	typeSuffix  = regexp.MustCompile(`(_total|_sum|_count|_bucket)$`)
	unitSuffix  = regexp.MustCompile(`(_seconds|_bytes)$`)
)

// checkExpr checks that expr's variables are known and that each metric
// it selects is target_info or an emitted metric under the name
// Prometheus gives it.
func checkExpr(t *testing.T, where, expr string, vars, known map[string]bool) {
	t.Helper()
	for _, m := range dashVar.FindAllStringSubmatch(expr, -1) {
		if name := m[1] + m[2] + m[3]; !vars[name] {
			t.Errorf("%s: unknown variable %s", where, m[0])
		}
	}
	if strings.Contains(expr, "__name__") {
		t.Errorf("%s: selects metrics by __name__, which this test cannot check", where)
	}
	bare := quoted.ReplaceAllString(expr, `""`)
	names := map[string]bool{}
	for _, m := range selector.FindAllStringSubmatch(bare, -1) {
		names[m[1]] = true
	}
	for _, m := range metricToken.FindAllString(bare, -1) {
		names[m] = true
	}
	for name := range names {
		if strings.HasPrefix(name, "gpuprobe_") || name == "target_info" || collectorMetrics[name] {
			continue // a label (gpuprobe_windows_route), the resources, the collector's
		}
		typeless := typeSuffix.ReplaceAllString(name, "")
		if !known[name] && !known[typeless] && !known[unitSuffix.ReplaceAllString(typeless, "")] {
			t.Errorf("%s: metric %s is not one the receiver emits (receiver/metadata.yaml, docs/names.md)", where, name)
		}
	}
}

// emittedMetrics returns the receiver's metric names as Prometheus names
// them without their suffixes: gpu.cuda.kernel.launches as
// gpu_cuda_kernel_launches (its OTLP receiver adds _total), and the
// self-metrics also as the internal telemetry's otelcol_gpuprobe_receiver_*
// (no suffixes, the collector's default). The names are those of
// receiver/metadata.yaml's metrics and telemetry sections, and those of
// docs/names.md's Metrics table, which lists the histograms and
// observable self-metrics that metadata.yaml can only name in comments
// (receiver/docs_test.go keeps it to what the receiver emits).
func emittedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	var md struct {
		Metrics   map[string]any `json:"metrics"`
		Telemetry struct {
			Metrics map[string]any `json:"metrics"`
		} `json:"telemetry"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "../receiver/metadata.yaml")), &md); err != nil {
		t.Fatal(err)
	}
	var all []string
	for n := range md.Metrics {
		all = append(all, n)
	}
	for n := range md.Telemetry.Metrics {
		all = append(all, n)
	}
	all = append(all, namesTable(t)...)
	if len(all) < 20 {
		t.Fatalf("only %d metric names in metadata.yaml and names.md", len(all))
	}
	known := map[string]bool{}
	for _, n := range all {
		p := strings.ReplaceAll(n, ".", "_")
		known[p] = true
		if strings.HasPrefix(n, "gpuprobe.receiver.") {
			known["otelcol_"+p] = true
		}
	}
	return known
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	braces     = regexp.MustCompile(`\{([^{}]*)\}`)
)

// namesTable returns the names of docs/names.md's Metrics table, braces
// expanded (gpu.cuda.kernel.{execution,queue}.duration is two names).
func namesTable(t *testing.T) []string {
	t.Helper()
	text := readFile(t, "../docs/names.md")
	start := strings.Index(text, "\n## Metrics\n")
	if start < 0 {
		t.Fatal("docs/names.md: no Metrics section")
	}
	text = text[start+1:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			if !strings.ContainsAny(m[1], "<…") {
				out = append(out, expandBraces(m[1])...)
			}
		}
	}
	return out
}

func expandBraces(s string) []string {
	loc := braces.FindStringSubmatchIndex(s)
	if loc == nil {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[loc[2]:loc[3]], ",") {
		out = append(out, expandBraces(s[:loc[0]]+alt+s[loc[1]:])...)
	}
	return out
}

// TestChartGrafanaDashboard: the chart's copy of the dashboard is the
// same file, and grafanaDashboard.enabled renders it into a ConfigMap
// with the sidecar's label, in the namespace asked for.
func TestChartGrafanaDashboard(t *testing.T) {
	file := readFile(t, dashboardFile)
	if readFile(t, chartDir+"/dashboards/gpuprobe-dashboard.json") != file {
		t.Fatalf("%s/dashboards/gpuprobe-dashboard.json differs from %s: copy it", chartDir, dashboardFile)
	}
	got := render(t, "gpuprobe", "gpuprobe", map[string]any{
		"grafanaDashboard": map[string]any{"enabled": true, "namespace": "monitoring"}})
	checkObjects(t, "chart", got)
	cm := find(t, got, "ConfigMap", "gpuprobe-grafana-dashboard")
	if ns, l := str(cm, "metadata", "namespace"), str(cm, "metadata", "labels", "grafana_dashboard"); ns != "monitoring" || l != "1" {
		t.Errorf("dashboard ConfigMap: namespace %q, label grafana_dashboard %q; want monitoring and 1", ns, l)
	}
	var a, b any
	if err := json.Unmarshal([]byte(str(cm, "data", "gpuprobe-dashboard.json")), &a); err != nil {
		t.Fatalf("dashboard ConfigMap: %v", err)
	}
	if err := json.Unmarshal([]byte(file), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("dashboard ConfigMap: the JSON differs from the file")
	}
}
