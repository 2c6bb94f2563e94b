package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// writeGraphTraces writes the launch spans of a graph process ("graph",
// pid 30): nodes × replays spans, each with a cuda.executing child, as
// the receiver makes them; edit may change a span before it is written.
func writeGraphTraces(t *testing.T, nodes, replays int, edit func(node, replay int, l ptrace.Span) bool) string {
	t.Helper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutInt("process.pid", 30)
	rs.Resource().Attributes().PutStr("process.executable.name", "graph")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	id := byte(1)
	for n := range nodes {
		for r := range replays {
			l := ptrace.NewSpan()
			l.SetTraceID(pcommon.TraceID{byte(n + 1), byte(r + 1)})
			l.SetSpanID(pcommon.SpanID{id})
			l.SetName("g_scale")
			l.Attributes().PutInt("cuda.launch.id", int64(-9223372036854775807+n))
			l.Attributes().PutInt("cuda.graph.replay", int64(r))
			start := uint64(1000 * (r*nodes + n + 1))
			l.SetStartTimestamp(pcommon.Timestamp(start))
			l.SetEndTimestamp(pcommon.Timestamp(start + 900))
			id++
			if edit != nil && !edit(n, r, l) {
				continue
			}
			l.CopyTo(ss.AppendEmpty())
			x := ss.AppendEmpty()
			x.SetTraceID(l.TraceID())
			x.SetSpanID(pcommon.SpanID{id - 1, 1})
			x.SetParentSpanID(l.SpanID())
			x.SetName("cuda.executing")
			x.SetStartTimestamp(pcommon.Timestamp(start + 100))
			x.SetEndTimestamp(pcommon.Timestamp(start + 800))
		}
	}
	return writeTracesFile(t, td)
}

func TestTraceCheckGraphReplays(t *testing.T) {
	tests := []struct {
		name    string
		replays int // --graph-replays
		edit    func(node, replay int, l ptrace.Span) bool
		code    int
		want    string
	}{
		{"every replay its span", 3, nil, 0, "2 of 2 nodes have replays 0..2 once each (6 spans)"},
		{"fewer replays than launched", 4, nil, 1, "0 of 2 nodes have replays 0..3"},
		{"a replay lost", 3, func(n, r int, _ ptrace.Span) bool { return n != 1 || r != 2 }, 1, "1 of 2 nodes have replays 0..2"},
		{"replays merged into one number", 3, func(n, r int, l ptrace.Span) bool {
			l.Attributes().PutInt("cuda.graph.replay", 0)
			return true
		}, 1, "0 of 2 nodes"},
		{"another process", 3, func(n, r int, l ptrace.Span) bool {
			l.Attributes().Remove("cuda.graph.replay")
			return true
		}, 1, "0 of 0 nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeGraphTraces(t, 2, 3, tt.edit)
			var out, errb bytes.Buffer
			code := runTraceCheck([]string{"--traces", p, "--graph-exe", "graph", "--graph-replays", strconv.Itoa(tt.replays)}, &out, &errb)
			if code != tt.code || !strings.Contains(out.String(), tt.want) {
				t.Fatalf("code %d, want %d; output lacks %q:\n%s%s", code, tt.code, tt.want, out.String(), errb.String())
			}
		})
	}
}

func TestTraceCheckAbsentKernel(t *testing.T) {
	tests := []struct {
		name  string
		never bool // one span of the never-launched kernel
		code  int
		want  string
	}{
		{"absent", false, 0, "0 spans of g_never"},
		{"a span of the captured launch", true, 1, "1 spans of g_never"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeGraphTraces(t, 2, 3, func(n, r int, l ptrace.Span) bool {
				l.Attributes().PutStr("cuda.kernel.mangled_name", "_Z7g_scalePjij")
				if tt.never && n == 1 && r == 0 {
					// An extra span, as the capture-time launch record gave
					// after launch_timeout.
					x := ptrace.NewSpan()
					l.CopyTo(x)
					x.Attributes().PutStr("cuda.kernel.mangled_name", "_Z7g_neverPji")
					x.Attributes().Remove("cuda.graph.replay")
					x.SetSpanID(pcommon.SpanID{0xee})
					x.CopyTo(l)
				}
				return true
			})
			var out, errb bytes.Buffer
			code := runTraceCheck([]string{"--traces", p, "--graph-exe", "graph", "--graph-replays", "3", "--absent-kernel", "g_never"}, &out, &errb)
			if code != tt.code || !strings.Contains(out.String(), tt.want) {
				t.Fatalf("code %d, want %d; output lacks %q:\n%s%s", code, tt.code, tt.want, out.String(), errb.String())
			}
		})
	}
}
