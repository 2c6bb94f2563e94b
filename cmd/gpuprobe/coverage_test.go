package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exported is what the collector's prometheus exporter writes for one
// process: launch 1 timed by its probes, 2 and 3 by the driver, 4 not
// (translate's TestCoverage).
const exported = `# HELP gpuprobe_receiver_coverage_launches_total Launches by the route of their exact device window.
# TYPE gpuprobe_receiver_coverage_launches_total counter
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="inline_ptx",job="trainer",process_pid="4242"} 1
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="windows",job="trainer",process_pid="4242"} 2
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="patched_sass",job="trainer",process_pid="4242"} 0
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="none",job="trainer",process_pid="4242"} 1
# HELP gpuprobe_receiver_coverage_gpu_time_seconds_total GPU time of launches by route.
# TYPE gpuprobe_receiver_coverage_gpu_time_seconds_total counter
gpuprobe_receiver_coverage_gpu_time_seconds_total{gpuprobe_windows_route="inline_ptx",job="trainer",process_pid="4242"} 1.5
gpuprobe_receiver_coverage_gpu_time_seconds_total{gpuprobe_windows_route="windows",job="trainer",process_pid="4242"} 2.5
gpuprobe_receiver_coverage_gpu_time_seconds_total{gpuprobe_windows_route="patched_sass",job="trainer",process_pid="4242"} 0
gpuprobe_receiver_coverage_gpu_time_seconds_total{gpuprobe_windows_route="none",job="trainer",process_pid="4242"} 0.0015
# TYPE gpuprobe_receiver_records_read_total counter
gpuprobe_receiver_records_read_total{job="trainer"} 99
`

const exportedTable = `PID   ROUTE         LAUNCHES  SHARE  GPU_TIME  SHARE
4242  inline_ptx    1         25.0%  1.5s      37.5%
4242  windows       2         50.0%  2.5s      62.5%
4242  patched_sass  0         0.0%   0s        0.0%
4242  none          1         25.0%  1.5ms     0.0%
4242  exact         3         75.0%  4s        100.0%
`

func TestCoverage(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		status int
		want   string // stdout
		errHas string // stderr
	}{
		{"prometheus exporter names", exported, 0, exportedTable, ""},
		{"internal telemetry names", strings.ReplaceAll(exported, "gpuprobe_receiver_", "otelcol_gpuprobe_receiver_"), 0, exportedTable, ""},
		{"several processes in pid order, other labels summed", `
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="windows",instance="a",process_pid="10"} 4
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="windows",instance="a",process_pid="9"} 1
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="windows",instance="b",process_pid="9"} 2
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="none",instance="b",process_pid="9"} 1
gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="none",instance="b",process_pid="-1"} 8
`, 0, `PID  ROUTE         LAUNCHES  SHARE   GPU_TIME  SHARE
-1   inline_ptx    0         0.0%    0s        -
-1   windows       0         0.0%    0s        -
-1   patched_sass  0         0.0%    0s        -
-1   none          8         100.0%  0s        -
-1   exact         0         0.0%    0s        -
9    inline_ptx    0         0.0%    0s        -
9    windows       3         75.0%   0s        -
9    patched_sass  0         0.0%    0s        -
9    none          1         25.0%   0s        -
9    exact         3         75.0%   0s        -
10   inline_ptx    0         0.0%    0s        -
10   windows       4         100.0%  0s        -
10   patched_sass  0         0.0%    0s        -
10   none          0         0.0%    0s        -
10   exact         4         100.0%  0s        -
`, ""},
		{"names without suffixes, untyped", `
gpuprobe_receiver_coverage_launches{gpuprobe_windows_route="inline_ptx",process_pid="7"} 3
gpuprobe_receiver_coverage_gpu_time{gpuprobe_windows_route="inline_ptx",process_pid="7"} 0.25
`, 0, `PID  ROUTE         LAUNCHES  SHARE   GPU_TIME  SHARE
7    inline_ptx    3         100.0%  250ms     100.0%
7    windows       0         0.0%    0s        0.0%
7    patched_sass  0         0.0%    0s        0.0%
7    none          0         0.0%    0s        0.0%
7    exact         3         100.0%  250ms     100.0%
`, ""},
		{"UTF-8 names", `
{"gpuprobe.receiver.coverage.launches_total","process.pid"="7","gpuprobe.windows.route"="windows"} 2
`, 0, `PID  ROUTE         LAUNCHES  SHARE   GPU_TIME  SHARE
7    inline_ptx    0         0.0%    0s        -
7    windows       2         100.0%  0s        -
7    patched_sass  0         0.0%    0s        -
7    none          0         0.0%    0s        -
7    exact         2         100.0%  0s        -
`, ""},
		{"no coverage metrics", "gpuprobe_receiver_records_read_total 3\n", 1, "", "no gpuprobe_receiver_coverage_* metrics"},
		{"a series without its pid is skipped", `gpuprobe_receiver_coverage_launches_total{gpuprobe_windows_route="none"} 3` + "\n", 1, "", "no gpuprobe_receiver_coverage_* metrics"},
		{"not the text format", "{{{\n", 1, "", "parsing the metrics"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "metrics.txt")
			if err := os.WriteFile(file, []byte(tc.input), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if got := run([]string{"coverage", "-file", file}, &stdout, &stderr); got != tc.status {
				t.Fatalf("status %d, want %d; stderr: %s", got, tc.status, stderr.String())
			}
			if stdout.String() != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), tc.want)
			}
			if !strings.Contains(stderr.String(), tc.errHas) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.errHas)
			}
		})
	}
}

func TestCoverageUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := run([]string{"coverage", "extra"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "usage: gpuprobe coverage") {
		t.Fatalf("status %d, stderr %q: want 2 and the usage", got, stderr.String())
	}
}

// TestCoverageURL: the metrics come from an HTTP endpoint in the text
// format; an endpoint that fails is an error.
func TestCoverageURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(exported))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{{"/metrics", 0, exportedTable}, {"/nothing", 1, ""}} {
		var stdout, stderr bytes.Buffer
		if got := run([]string{"coverage", "-url", srv.URL + tc.path}, &stdout, &stderr); got != tc.status {
			t.Fatalf("%s: status %d, want %d; stderr: %s", tc.path, got, tc.status, stderr.String())
		}
		if stdout.String() != tc.want {
			t.Errorf("%s: stdout:\n%s\nwant:\n%s", tc.path, stdout.String(), tc.want)
		}
	}
}
