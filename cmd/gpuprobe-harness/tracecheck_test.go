package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// writeTraces writes one JSON line with a shim process (pid 10: a
// cudaLaunchKernel host span → launch span → executing/queued children)
// and a shim-less one (pid 20: host launch call → approximate span).
func writeTraces(t *testing.T, nestOK bool) string {
	t.Helper()
	td := ptrace.NewTraces()
	mk := func(pid int64) ptrace.SpanSlice {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutInt("process.pid", pid)
		rs.Resource().Attributes().PutStr("process.executable.name", "pid"+strconv.FormatInt(pid, 10))
		return rs.ScopeSpans().AppendEmpty().Spans()
	}
	tid := pcommon.TraceID{1}
	add := func(ss ptrace.SpanSlice, id, parent byte, name string, s, e uint64) ptrace.Span {
		sp := ss.AppendEmpty()
		sp.SetTraceID(tid)
		sp.SetSpanID(pcommon.SpanID{id})
		if parent != 0 {
			sp.SetParentSpanID(pcommon.SpanID{parent})
		}
		sp.SetName(name)
		sp.SetStartTimestamp(pcommon.Timestamp(s))
		sp.SetEndTimestamp(pcommon.Timestamp(e))
		return sp
	}
	a := mk(10)
	host := add(a, 1, 0, "cudaLaunchKernel", 1000, 9000)
	host.Attributes().PutStr("cuda.api.category", "launch")
	parent := byte(1)
	if !nestOK {
		parent = 0
	}
	l := add(a, 2, parent, "vectorAdd", 2000, 50000)
	l.Attributes().PutInt("cuda.launch.id", 1)
	add(a, 3, 2, "cuda.queued", 2000, 6000)
	add(a, 4, 2, "cuda.executing", 6000, 40000)

	b := mk(20)
	h2 := add(b, 5, 0, "cuLaunchKernel", 1000, 2000)
	h2.Attributes().PutStr("cuda.api.category", "launch")
	ap := add(b, 6, 5, "vectorAdd", 1000, 30000)
	ap.Attributes().PutBool("cuda.kernel.approximate", true)

	c := mk(30) // a shim-less process that captured its launch
	h3 := add(c, 7, 0, "cudaLaunchKernel", 1000, 2000)
	h3.Attributes().PutStr("cuda.api.category", "launch")
	h3.Attributes().PutBool("cuda.graph.captured", true)
	h4 := add(c, 8, 0, "cudaGraphLaunch", 3000, 3100)
	h4.Attributes().PutStr("cuda.api.category", "graph_launch")
	g := add(c, 9, 8, "cuda.graph", 3000, 9000)
	g.Attributes().PutBool("cuda.graph.approximate", true)

	return writeTracesFile(t, td)
}

// writeTracesFile writes td as one JSON line, as the file exporter does,
// and returns the file's path.
func writeTracesFile(t *testing.T, td ptrace.Traces) string {
	t.Helper()
	var m ptrace.JSONMarshaler
	js, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "traces.json")
	if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTraceCheck(t *testing.T) {
	tests := []struct {
		name   string
		nestOK bool
		args   []string
		code   int
		want   string
	}{
		{"nested ok", true, []string{"--nested-pid", "10", "--launches", "1"}, 0, "shim: host launch call is the parent"},
		{"not nested", false, []string{"--nested-pid", "10", "--launches", "1"}, 1, "0 of 1 launch spans"},
		{"wrong launch count", true, []string{"--nested-pid", "10", "--launches", "2"}, 1, "1 launch spans, want 2"},
		{"approximate ok", true, []string{"--approx-pid", "20", "--launches", "1"}, 0, "no shim: approximate kernel spans"},
		{"approximate missing", true, []string{"--approx-pid", "10", "--launches", "1"}, 1, "FAIL"},
		{"captured ok", true, []string{"--captured-exe", "pid30", "--captured-launches", "1"}, 0, "no shim, capture: no approximate span"},
		{"captured count wrong", true, []string{"--captured-exe", "pid30", "--captured-launches", "2"}, 1, "1, want 2"},
		{"captured process has an approximate span", true, []string{"--captured-exe", "pid20"}, 1, "1 approximate spans"},
		{"graph spans ok", true, []string{"--captured-exe", "pid30", "--captured-launches", "1", "--captured-graph-launches", "1"}, 0, "1 (1 under their graph launch call), want 1"},
		{"graph spans missing", true, []string{"--captured-exe", "pid30", "--captured-graph-launches", "2"}, 1, "want 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTraces(t, tt.nestOK)
			var out, errb bytes.Buffer
			code := runTraceCheck(append([]string{"--traces", p}, tt.args...), &out, &errb)
			if code != tt.code || !strings.Contains(out.String(), tt.want) {
				t.Fatalf("code %d (want %d), output:\n%s%s\nwant %q", code, tt.code, out.String(), errb.String(), tt.want)
			}
		})
	}
}
