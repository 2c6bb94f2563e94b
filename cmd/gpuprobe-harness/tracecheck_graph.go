package main

import (
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// checkGraphReplays checks the launch spans of a CUDA graph's kernel nodes
// in process exe (the receiver gives every replay of a node, whose launch
// id does not change, its own span): each node id launched with the graph
// bit has exactly replays spans, cuda.graph.replay 0..replays-1 once each,
// each with its own cuda.executing phase (replays run one after another,
// so their device windows are distinct).
func checkGraphReplays(t *checkTable, spans []*span, children func(*span) []*span, exe string, replays int) {
	type replay struct {
		n     int
		start uint64 // of its cuda.executing child, 0 if none
	}
	byNode := map[int64]map[int64]*replay{}
	var total, executing int
	for _, s := range spans {
		if !sameExe(s.exe, exe) || !s.has("cuda.graph.replay") {
			continue
		}
		id, _ := s.attrs.Get("cuda.launch.id")
		r, _ := s.attrs.Get("cuda.graph.replay")
		if byNode[id.Int()] == nil {
			byNode[id.Int()] = map[int64]*replay{}
		}
		rp := byNode[id.Int()][r.Int()]
		if rp == nil {
			rp = &replay{}
			byNode[id.Int()][r.Int()] = rp
		}
		rp.n++
		total++
		for _, c := range children(s) {
			if c.name == "cuda.executing" {
				rp.start = c.start
				executing++
			}
		}
	}
	complete, distinct := 0, 0
	for _, rs := range byNode {
		ok := len(rs) == replays
		var starts []uint64
		for k := range replays {
			rp := rs[int64(k)]
			if rp == nil || rp.n != 1 {
				ok = false
				continue
			}
			starts = append(starts, rp.start)
		}
		if ok {
			complete++
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		d := len(starts) > 0
		for i := 1; i < len(starts); i++ {
			if starts[i] == starts[i-1] || starts[i-1] == 0 {
				d = false
			}
		}
		if d {
			distinct++
		}
	}
	nodes := len(byNode)
	t.row("graph: replay spans per node", nodes > 0 && complete == nodes,
		"%d of %d nodes have replays 0..%d once each (%d spans)", complete, nodes, replays-1, total)
	t.row("graph: each replay has its device phase", total > 0 && executing == total, "%d of %d replay spans have cuda.executing", executing, total)
	t.row("graph: replays' device windows distinct", nodes > 0 && distinct == nodes, "%d of %d nodes", distinct, nodes)
}

// checkAbsentKernel checks that process exe has no span of a kernel whose
// mangled name contains kernel: one it only captured into a graph that it
// never launched, so the kernel never ran.
func checkAbsentKernel(t *checkTable, spans []*span, exe, kernel string) {
	n := 0
	for _, s := range spans {
		if sameExe(s.exe, exe) && strings.Contains(s.str("cuda.kernel.mangled_name"), kernel) {
			n++
		}
	}
	t.row("graph: no span for a captured launch that never ran", n == 0, "%d spans of %s", n, kernel)
}

// checkCaptured checks a shim-less process whose every kernel launch went
// into a stream capture: each outermost launch call is marked
// cuda.graph.captured, and no launch got an approximate kernel span (the
// captured launches did not run); each graph launch (closed by a sync) has
// an approximate cuda.graph span under its call.
func checkCaptured(t *checkTable, spans []*span, byID map[[24]byte]*span, exe string, launches, graphs int) {
	var marked, approx, graphSpans, underCall int
	for _, s := range spans {
		if !sameExe(s.exe, exe) {
			continue
		}
		if v, ok := s.attrs.Get("cuda.graph.captured"); ok && v.Bool() && s.str("cuda.api.category") == "launch" {
			marked++
		}
		if v, ok := s.attrs.Get("cuda.kernel.approximate"); ok && v.Bool() {
			approx++
		}
		if v, ok := s.attrs.Get("cuda.graph.approximate"); ok && v.Bool() && s.name == "cuda.graph" {
			graphSpans++
			if p := byID[spanKey(s.trace, s.parent)]; p != nil && p.str("cuda.api.category") == "graph_launch" && s.end >= s.start {
				underCall++
			}
		}
	}
	t.row("no shim, capture: launch calls captured", marked > 0 && (launches == 0 || marked == launches), "%d, want %d", marked, launches)
	t.row("no shim, capture: no approximate span", approx == 0, "%d approximate spans", approx)
	if graphs > 0 {
		t.row("no shim: approximate graph spans", graphSpans == graphs && underCall == graphs, "%d (%d under their graph launch call), want %d", graphSpans, underCall, graphs)
	}
}

// spanKey identifies a span within the file: trace id and span id.
func spanKey(t pcommon.TraceID, s pcommon.SpanID) (k [24]byte) {
	copy(k[:16], t[:])
	copy(k[16:], s[:])
	return k
}
