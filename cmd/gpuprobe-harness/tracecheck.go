package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func init() {
	Register(&Command{Name: "tracecheck", Summary: "check host/device span nesting in file-exporter output", Run: runTraceCheck})
}

// span is one span of the file exporter's output, flattened.
type span struct {
	pid        int64
	exe        string
	trace      pcommon.TraceID
	id, parent pcommon.SpanID
	name       string
	start, end uint64
	attrs      pcommon.Map
}

func (s *span) str(k string) string {
	v, ok := s.attrs.Get(k)
	if !ok {
		return ""
	}
	return v.AsString()
}

func (s *span) has(k string) bool { _, ok := s.attrs.Get(k); return ok }

// readJSONLines calls fn for every non-empty line of the file.
func readJSONLines(path string, fn func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s line %d: %w", path, n, err)
		}
	}
	return sc.Err()
}

// loadSpans reads every span of a file exporter's JSON-lines traces file.
func loadSpans(path string) ([]*span, error) {
	var out []*span
	var um ptrace.JSONUnmarshaler
	err := readJSONLines(path, func(line []byte) error {
		td, err := um.UnmarshalTraces(line)
		if err != nil {
			return err
		}
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			pid, exe := int64(-1), ""
			if v, ok := rs.Resource().Attributes().Get("process.pid"); ok {
				pid = v.Int()
			}
			if v, ok := rs.Resource().Attributes().Get("process.executable.name"); ok {
				exe = v.Str()
			}
			for j := range rs.ScopeSpans().Len() {
				ss := rs.ScopeSpans().At(j).Spans()
				for k := range ss.Len() {
					s := ss.At(k)
					out = append(out, &span{pid: pid, exe: exe, trace: s.TraceID(), id: s.SpanID(), parent: s.ParentSpanID(),
						name: s.Name(), start: uint64(s.StartTimestamp()), end: uint64(s.EndTimestamp()), attrs: s.Attributes()})
				}
			}
		}
		return nil
	})
	return out, err
}

// sameExe matches an executable name, also as the kernel's comm cuts it
// (15 bytes) when only /proc/PID/comm was readable.
func sameExe(got, want string) bool {
	return want != "" && (got == want || (len(got) == 15 && strings.HasPrefix(want, got)))
}

type checkTable struct {
	w      io.Writer
	failed bool
}

func (t *checkTable) row(name string, ok bool, format string, args ...any) {
	res := "ok"
	if !ok {
		res, t.failed = "FAIL", true
	}
	fmt.Fprintf(t.w, "%-44s %-5s %s\n", name, res, fmt.Sprintf(format, args...))
}

func runTraceCheck(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("tracecheck", "gpuprobe-harness tracecheck --traces FILE [checks]", stderr)
	traces := fs.String("traces", "", "traces written by the file exporter (JSON lines)")
	metrics := fs.String("metrics", "", "metrics written by the file exporter (JSON lines), for --launchlate")
	nestedPID := fs.Int64("nested-pid", 0, "a process run with the shim: its launch spans must have a host launch-call parent")
	approxPID := fs.Int64("approx-pid", 0, "a process run without the shim: it must have approximate kernel spans")
	nestedExe := fs.String("nested-exe", "", "like --nested-pid, by process.executable.name")
	approxExe := fs.String("approx-exe", "", "like --approx-pid, by process.executable.name")
	launches := fs.Int("launches", 0, "launches each checked process made (exact)")
	tolNS := fs.Uint64("tol-ns", 5000, "clock tolerance between host-probe and shim timestamps, ns")
	launchlate := fs.String("launchlate", "", "metric name prefix of launchlate's delay histogram: compare it with the shim's queued phases of --nested-pid")
	graphExe := fs.String("graph-exe", "", "a process that launched a CUDA graph --graph-replays times: every kernel node must have one launch span per replay")
	graphReplays := fs.Int("graph-replays", 0, "times --graph-exe launched its graph")
	absentKernel := fs.String("absent-kernel", "", "with --graph-exe: a kernel (part of its mangled name) that the process captured into a graph and never launched: it must have no span")
	capturedExe := fs.String("captured-exe", "", "a process run without the shim whose every launch was captured into a graph: its launch calls must be marked cuda.graph.captured, with no approximate kernel span")
	capturedLaunches := fs.Int("captured-launches", 0, "with --captured-exe: its launch calls (outermost, exact)")
	capturedGraphs := fs.Int("captured-graph-launches", 0, "with --captured-exe: its graph launches, each followed by a sync: one approximate cuda.graph span each (exact)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *traces == "" {
		fmt.Fprintln(stderr, "gpuprobe-harness tracecheck: --traces is required")
		return 2
	}
	spans, err := loadSpans(*traces)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe-harness tracecheck: %v\n", err)
		return 1
	}
	byID := map[[24]byte]*span{}
	children := map[[24]byte][]*span{}
	for _, s := range spans {
		byID[spanKey(s.trace, s.id)] = s
	}
	for _, s := range spans {
		if !s.parent.IsEmpty() {
			k := spanKey(s.trace, s.parent)
			children[k] = append(children[k], s)
		}
	}
	t := &checkTable{w: stdout}
	fmt.Fprintf(stdout, "%-44s %-5s %s\n", "check", "result", "detail")
	t.row("spans read", len(spans) > 0, "%d spans in %s", len(spans), *traces)
	procs := map[string]int{}
	for _, s := range spans {
		procs[fmt.Sprintf("%s(%d)", s.exe, s.pid)]++
	}
	t.row("processes (spans each)", true, "%v", procs)

	inNested := func(s *span) bool {
		return (*nestedPID != 0 && s.pid == *nestedPID) || sameExe(s.exe, *nestedExe)
	}
	inApprox := func(s *span) bool {
		return (*approxPID != 0 && s.pid == *approxPID) || sameExe(s.exe, *approxExe)
	}
	if *nestedPID != 0 || *nestedExe != "" {
		var n, nested, phases, contained int
		var queued []uint64
		for _, s := range spans {
			if !inNested(s) || !s.has("cuda.launch.id") || s.has("cuda.api.category") {
				continue
			}
			n++
			p := byID[spanKey(s.trace, s.parent)]
			if p != nil && p.str("cuda.api.category") == "launch" {
				nested++
				if p.start <= s.start+*tolNS && s.start <= p.end+*tolNS {
					contained++
				}
			}
			for _, c := range children[spanKey(s.trace, s.id)] {
				if c.name == "cuda.executing" {
					phases++
				}
				if c.name == "cuda.queued" {
					queued = append(queued, c.end-c.start)
				}
			}
		}
		t.row("shim: launch spans", *launches == 0 || n == *launches, "%d launch spans, want %d", n, *launches)
		t.row("shim: host launch call is the parent", n > 0 && nested == n, "%d of %d launch spans", nested, n)
		t.row("shim: launch starts inside its host call", n > 0 && contained == n, "%d of %d (tolerance %d ns)", contained, n, *tolNS)
		t.row("shim: device phases under the launch", n > 0 && phases == n, "%d of %d launch spans have cuda.executing", phases, n)
		if *launchlate != "" {
			checkLaunchLate(t, *metrics, *launchlate, queued)
		}
	}
	if *approxPID != 0 || *approxExe != "" {
		var n, parented, ordered int
		names := map[string]int{}
		for _, s := range spans {
			if !inApprox(s) {
				continue
			}
			if v, ok := s.attrs.Get("cuda.kernel.approximate"); !ok || !v.Bool() {
				continue
			}
			n++
			names[s.name]++
			if p := byID[spanKey(s.trace, s.parent)]; p != nil && p.str("cuda.api.category") == "launch" {
				parented++
			}
			if s.end >= s.start {
				ordered++
			}
		}
		var host int
		for _, s := range spans {
			if inApprox(s) && s.has("cuda.api.category") {
				host++
			}
		}
		t.row("no shim: host call spans", host > 0, "%d host API spans", host)
		t.row("no shim: approximate kernel spans", n > 0 && (*launches == 0 || n == *launches), "%d, want %d; by name %v", n, *launches, names)
		t.row("no shim: approximate span under launch call", n > 0 && parented == n, "%d of %d", parented, n)
		t.row("no shim: approximate span end ≥ start", n > 0 && ordered == n, "%d of %d", ordered, n)
	}
	if *capturedExe != "" {
		checkCaptured(t, spans, byID, *capturedExe, *capturedLaunches, *capturedGraphs)
	}
	if *graphExe != "" {
		checkGraphReplays(t, spans, func(s *span) []*span { return children[spanKey(s.trace, s.id)] }, *graphExe, *graphReplays)
		if *absentKernel != "" {
			checkAbsentKernel(t, spans, *graphExe, *absentKernel)
		}
	}
	if t.failed {
		return 1
	}
	return 0
}

// checkLaunchLate compares launchlate's log2 histogram of launch delays
// (host cudaLaunchKernel → first instruction of each block, both on
// CLOCK_MONOTONIC) with the shim's queued phases (shim enqueue → first warp
// start): the shortest of each must fall within one log2 bucket.
func checkLaunchLate(t *checkTable, path, prefix string, queued []uint64) {
	if path == "" {
		t.row("launchlate: histogram", false, "--metrics is required")
		return
	}
	var um pmetric.JSONUnmarshaler
	buckets := map[int64]float64{}
	err := readJSONLines(path, func(line []byte) error {
		md, err := um.UnmarshalMetrics(line)
		if err != nil {
			return err
		}
		for i := range md.ResourceMetrics().Len() {
			sms := md.ResourceMetrics().At(i).ScopeMetrics()
			for j := range sms.Len() {
				ms := sms.At(j).Metrics()
				for k := range ms.Len() {
					m := ms.At(k)
					if !strings.HasPrefix(m.Name(), prefix) {
						continue
					}
					var dps pmetric.NumberDataPointSlice
					switch m.Type() {
					case pmetric.MetricTypeSum:
						dps = m.Sum().DataPoints()
					case pmetric.MetricTypeGauge:
						dps = m.Gauge().DataPoints()
					default:
						continue
					}
					for d := range dps.Len() {
						dp := dps.At(d)
						kv, ok := dp.Attributes().Get("gpuprobe.map.key")
						if !ok {
							continue
						}
						v := dp.DoubleValue()
						if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
							v = float64(dp.IntValue())
						}
						buckets[kv.Int()] = v // cumulative: the last value wins
					}
				}
			}
		}
		return nil
	})
	if err != nil || len(buckets) == 0 {
		t.row("launchlate: histogram", false, "no %s* data points with a key attribute in %s (%v)", prefix, path, err)
		return
	}
	var total float64
	lowest := int64(-1)
	for k, v := range buckets {
		total += v
		if v > 0 && (lowest < 0 || k < lowest) {
			lowest = k
		}
	}
	t.row("launchlate: histogram", total > 0, "%v blocks over buckets %v", total, buckets)
	if len(queued) == 0 {
		t.row("launchlate vs shim queued phase", false, "no cuda.queued spans to compare with")
		return
	}
	// The first block of a launch starts when its first warp does: the
	// lowest delay bucket must hold the shortest queued phase (one bucket
	// of slack: the uprobe fires in cudaLaunchKernel, before the shim's
	// enqueue stamp in cuLaunchKernel, and both clocks carry calibration
	// error).
	slices.Sort(queued)
	q := queued[0]
	qb := int64(0)
	if q > 0 {
		qb = int64(math.Floor(math.Log2(float64(q))))
	}
	diff := lowest - qb
	t.row("launchlate vs shim queued phase", diff >= -1 && diff <= 1,
		"launchlate lowest bucket [2^%d, 2^%d) ns, shim shortest queued %d ns (2^%d), median %d ns", lowest, lowest+1, q, qb, queued[len(queued)/2])
}
