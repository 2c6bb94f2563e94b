package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func init() {
	Register(&Command{
		Name:    "coverage",
		Summary: "print, per process, the share of launches and GPU time with exact device windows, by route",
		Run:     runCoverage,
	})
}

// defaultCoverageURL is the collector's internal telemetry endpoint (its
// default), where the receiver's self-metrics go; with
// telemetry::in_pipeline, testdata/config.yaml's pipeline endpoint
// (http://127.0.0.1:9464/metrics) has them too.
const defaultCoverageURL = "http://127.0.0.1:8888/metrics"

// Bounds of what coverage reads.
const (
	maxCoverageBody = 64 << 20
	coverageTimeout = 10 * time.Second
)

// coverageRoutes are the values of gpuprobe.windows.route, in print order.
var coverageRoutes = []string{"inline_ptx", "windows", "patched_sass", "none"}

// runCoverage reads the receiver's gpuprobe.receiver.coverage.* metrics
// from a Prometheus text endpoint (or file) and prints them per process.
// Exit status: 0 when it printed coverage, 1 when the metrics hold none or
// cannot be fetched or parsed, 2 on a usage error.
func runCoverage(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("coverage", "usage: gpuprobe coverage [-url URL | -file FILE]", stderr)
	url := fs.String("url", defaultCoverageURL, "Prometheus text endpoint with the receiver's self-metrics: the collector's internal telemetry, or a metrics pipeline's exporter with telemetry::in_pipeline")
	file := fs.String("file", "", "read the metrics from this file instead (- for stdin)")
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	r, err := openMetrics(*url, *file)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe coverage: %v\n", err)
		return 1
	}
	defer r.Close()
	procs, err := readCoverage(io.LimitReader(r, maxCoverageBody))
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe coverage: %v\n", err)
		return 1
	}
	if len(procs) == 0 {
		fmt.Fprintln(stderr, "gpuprobe coverage: no gpuprobe_receiver_coverage_* metrics (is the collector's internal telemetry, or a pipeline with telemetry::in_pipeline, exported there, and has an application launched kernels?)")
		return 1
	}
	printCoverage(stdout, procs)
	return 0
}

// openMetrics opens the exposition text: file if set, else url.
func openMetrics(url, file string) (io.ReadCloser, error) {
	switch file {
	case "":
	case "-":
		return io.NopCloser(os.Stdin), nil
	default:
		return os.Open(file)
	}
	ctx, cancel := context.WithTimeout(context.Background(), coverageTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return cancelCloser{resp.Body, cancel}, nil
}

type cancelCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelCloser) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// procCoverage is one process's launches and GPU seconds by route.
type procCoverage struct {
	pid      string
	launches map[string]float64
	seconds  map[string]float64
}

// readCoverage parses Prometheus text and sums the coverage series per
// process and route (over any other labels, such as several collectors).
// Names and labels are matched after mapping dots to underscores, with
// or without the internal telemetry's otelcol_ prefix and the _total and
// _seconds suffixes, so the exporter's naming options do not matter.
func readCoverage(r io.Reader) ([]*procCoverage, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics: %w", err)
	}
	byPID := map[string]*procCoverage{}
	for name, fam := range fams {
		var launches bool
		switch baseName(name) {
		case "gpuprobe_receiver_coverage_launches":
			launches = true
		case "gpuprobe_receiver_coverage_gpu_time":
		default:
			continue
		}
		for _, m := range fam.GetMetric() {
			pid, route := label(m, "process_pid"), label(m, "gpuprobe_windows_route")
			if pid == "" || route == "" {
				continue
			}
			p := byPID[pid]
			if p == nil {
				p = &procCoverage{pid: pid, launches: map[string]float64{}, seconds: map[string]float64{}}
				byPID[pid] = p
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			if launches {
				p.launches[route] += v
			} else {
				p.seconds[route] += v
			}
		}
	}
	out := make([]*procCoverage, 0, len(byPID))
	for _, p := range byPID {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *procCoverage) int { return comparePIDs(a.pid, b.pid) })
	return out, nil
}

// baseName is a family name with dots as underscores and without the
// otelcol_ prefix and the _total and _seconds suffixes.
func baseName(n string) string {
	n = strings.TrimPrefix(strings.ReplaceAll(n, ".", "_"), "otelcol_")
	n = strings.TrimSuffix(n, "_total")
	return strings.TrimSuffix(n, "_seconds")
}

// label returns the value of label name (dots read as underscores).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if strings.ReplaceAll(l.GetName(), ".", "_") == name {
			return l.GetValue()
		}
	}
	return ""
}

// comparePIDs orders numeric pids numerically, before anything else.
func comparePIDs(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return int(min(max(x-y, -1), 1))
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// printCoverage writes one line per process and route, and the exact
// routes together, with their shares of the process's launches and GPU
// time.
func printCoverage(w io.Writer, procs []*procCoverage) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tROUTE\tLAUNCHES\tSHARE\tGPU_TIME\tSHARE")
	for _, p := range procs {
		var n, secs, exactN, exactS float64
		for _, rt := range coverageRoutes {
			n, secs = n+p.launches[rt], secs+p.seconds[rt]
			if rt != "none" {
				exactN, exactS = exactN+p.launches[rt], exactS+p.seconds[rt]
			}
		}
		for _, rt := range coverageRoutes {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\n", p.pid, rt, p.launches[rt], share(p.launches[rt], n),
				seconds(p.seconds[rt]), share(p.seconds[rt], secs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\n", p.pid, "exact", exactN, share(exactN, n), seconds(exactS), share(exactS, secs))
	}
	_ = tw.Flush()
}

// share is part/total as a percentage, "-" when total is 0.
func share(part, total float64) string {
	if total <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*part/total, 'f', 1, 64) + "%"
}

// seconds formats a GPU time: to the millisecond from 1 s, to the
// microsecond from 1 ms.
func seconds(s float64) string {
	d := time.Duration(s * 1e9)
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}
