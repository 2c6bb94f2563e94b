package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Prometheus is a running Prometheus server with its OTLP receiver on
// (POST OTLPMetricsURL) and storage in a temporary directory.
type Prometheus struct {
	*Process
	// URL is the base URL of the server (PromQL at URL/api/v1/query).
	URL string
}

// OTLPMetricsURL is the OTLP/HTTP metrics endpoint of the server.
func (p *Prometheus) OTLPMetricsURL() string { return p.URL + "/api/v1/otlp/v1/metrics" }

// prometheusConfig is the server's configuration: samples arrive over
// OTLP, and the scrape targets (host:port, job "otelcol", every second)
// are collectors' internal telemetry endpoints, scraped with names escaped
// to underscores (otelcol_gpuprobe_receiver_records_read, label
// gpuprobe_windows_route) as docs/exporting.md has the dashboard's users
// scrape them.
func prometheusConfig(scrape []string) string {
	cfg := "global:\n  evaluation_interval: 1s\n"
	if len(scrape) == 0 {
		return cfg
	}
	cfg += "scrape_configs:\n  - job_name: otelcol\n    scrape_interval: 1s\n" +
		"    metric_name_escaping_scheme: underscores\n    static_configs:\n      - targets:\n"
	for _, t := range scrape {
		cfg += "          - " + strconv.Quote(t) + "\n"
	}
	return cfg
}

// StartPrometheus starts Prometheus with its data and config in dir,
// listening on 127.0.0.1, scraping the scrape targets (host:port) if any,
// and waits (bounded) until it is ready.
func StartPrometheus(ctx context.Context, bin, dir string, scrape ...string) (*Prometheus, error) {
	return retryOnPortClash(func() (*Prometheus, error) { return startPrometheus(ctx, bin, dir, scrape) })
}

func startPrometheus(ctx context.Context, bin, dir string, scrape []string) (*Prometheus, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(prometheusConfig(scrape)), 0o644); err != nil {
		return nil, fmt.Errorf("prometheus config: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := []string{
		"--config.file=" + cfg,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--web.enable-otlp-receiver",
		"--log.level=info",
	}
	p, err := Start("prometheus", bin, args, dir, nil)
	if err != nil {
		return nil, err
	}
	prom := &Prometheus{Process: p, URL: "http://" + addr}
	err = p.WaitReady(ctx, 60*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom.URL+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\nprometheus logs:\n%s", err, p.Logs())
	}
	return prom, nil
}

// Sample is one element of an instant-vector PromQL result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns its vector result.
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	var resp struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	u := p.URL + "/api/v1/query?" + url.Values{"query": {promql}}.Encode()
	if err := getJSON(ctx, u, &resp); err != nil {
		return nil, err
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("PromQL %q: %s: %s", promql, resp.ErrorType, resp.Error)
	}
	if resp.Data.ResultType != "vector" {
		return nil, fmt.Errorf("PromQL %q: result type %q, want vector", promql, resp.Data.ResultType)
	}
	out := make([]Sample, 0, len(resp.Data.Result))
	for i, r := range resp.Data.Result {
		s, ok := r.Value[1].(string)
		if !ok {
			return nil, fmt.Errorf("PromQL %q: result %d: value %v is not a string", promql, i, r.Value[1])
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("PromQL %q: result %d: %w", promql, i, err)
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// Scrape GETs a Prometheus text-format endpoint and parses it with the
// Prometheus text parser.
func Scrape(ctx context.Context, u string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return nil, fmt.Errorf("scrape %s: status %s: %s", u, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: parsing the text format: %w", u, err)
	}
	return fams, nil
}

// Family returns the family named base, or base+"_total" (exporters differ
// on the suffix of counters), and the name it was found under.
func Family(fams map[string]*dto.MetricFamily, base string) (string, *dto.MetricFamily) {
	for _, n := range []string{base, base + "_total"} {
		if f, ok := fams[n]; ok {
			return n, f
		}
	}
	return "", nil
}

// FamilyNames lists the family names, sorted (for error messages).
func FamilyNames(fams map[string]*dto.MetricFamily) []string {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Labels returns a metric's labels as a map.
func Labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// FindMetric returns the metrics of family name whose labels include every
// pair of match.
func FindMetric(fams map[string]*dto.MetricFamily, name string, match map[string]string) []*dto.Metric {
	fam, ok := fams[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		ls := Labels(m)
		keep := true
		for k, v := range match {
			if ls[k] != v {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, m)
		}
	}
	return out
}
