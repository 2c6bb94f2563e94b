package translate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// A 2-node CUDA graph: the shim gives each kernel node one launch id (with
// GraphIDBit) for every replay of the graph.
const (
	nodeA = GraphIDBit | 0x11
	nodeB = GraphIDBit | 0x12
)

// graphNode is a kernel node of the test graph: its id, function, name and
// device window in each replay, relative to the replay's enqueue time.
type graphNode struct {
	id, fn     uint64
	name       string
	start, end uint64
}

var testGraph = []graphNode{
	{nodeA, 0xa, "ka", 1_000, 5_000},
	{nodeB, 0xb, "kb", 6_000, 9_000},
}

// graphEvent is one record of a replay: the launch record (exec false) or
// the device window (exec true) of node node in replay replay.
type graphEvent struct {
	node   int
	replay int
	exec   bool
}

// replayEnq is the enqueue time (mono ns) of replay r, spaced by gap.
func replayEnq(r int, gap uint64) uint64 { return 10_000 + uint64(r)*gap }

func (e graphEvent) record(gap uint64) rec {
	n, enq := testGraph[e.node], replayEnq(e.replay, gap)
	if e.exec {
		return shim(&record.Exec{LaunchID: n.id, StartNS: gpuBase + enq + n.start, EndNS: gpuBase + enq + n.end,
			Blocks: 4, Threads: 512 + uint64(e.replay)})
	}
	return shim(&record.Launch{LaunchID: n.id, PID: 42, TID: 43, EnqueueNS: enq, ReturnNS: enq + 50, Stream: 7,
		Function: n.fn, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, API: record.APIGraphLaunch})
}

// graphOrder is a name and an arrival order of the records of n replays.
type graphOrder struct {
	name   string
	events []graphEvent
}

// graphOrders returns arrival orders of the records of n replays of
// testGraph. Within one node and kind, records arrive in replay order (one
// producer ring each); across them, any order.
func graphOrders(n int) []graphOrder {
	all := func(exec bool) []graphEvent {
		var ev []graphEvent
		for r := range n {
			for i := range testGraph {
				ev = append(ev, graphEvent{i, r, exec})
			}
		}
		return ev
	}
	perReplay := func(execFirst bool) []graphEvent {
		var ev []graphEvent
		for r := range n {
			for _, x := range []bool{execFirst, !execFirst} {
				for i := range testGraph {
					ev = append(ev, graphEvent{i, r, x})
				}
			}
		}
		return ev
	}
	// The host runs one replay ahead of the device.
	var pipelined []graphEvent
	for r := range n + 1 {
		for i := range testGraph {
			if r < n {
				pipelined = append(pipelined, graphEvent{i, r, false})
			}
			if r > 0 {
				pipelined = append(pipelined, graphEvent{i, r - 1, true})
			}
		}
	}
	orders := []graphOrder{
		{"all launches then all windows", append(all(false), all(true)...)},
		{"all windows then all launches", append(all(true), all(false)...)},
		{"each replay launches then windows", perReplay(false)},
		{"each replay windows then launches", perReplay(true)},
		{"launches one replay ahead", pipelined},
	}
	// Random merges of the four streams (launches and windows of each node).
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var streams [][]graphEvent
		for i := range testGraph {
			for _, x := range []bool{false, true} {
				var s []graphEvent
				for r := range n {
					s = append(s, graphEvent{i, r, x})
				}
				streams = append(streams, s)
			}
		}
		var ev []graphEvent
		for len(streams) > 0 {
			k := rng.IntN(len(streams))
			ev = append(ev, streams[k][0])
			if streams[k] = streams[k][1:]; len(streams[k]) == 0 {
				streams = slices.Delete(streams, k, k+1)
			}
		}
		orders = append(orders, graphOrder{fmt.Sprintf("random merge %d", seed), ev})
	}
	return orders
}

// children returns the spans of td by parent span id.
func children(td ptrace.Traces) map[pcommon.SpanID][]ptrace.Span {
	out := map[pcommon.SpanID][]ptrace.Span{}
	for _, ss := range spanByName(td) {
		for _, s := range ss {
			out[s.ParentSpanID()] = append(out[s.ParentSpanID()], s)
		}
	}
	return out
}

// checkReplaySpan checks launch span root of node n, numbered ord by the
// receiver and made of the records of replay r: its replay ordinal, start,
// and queued and executing children from replay r's window (none unless
// window).
func checkReplaySpan(t *testing.T, root ptrace.Span, kids []ptrace.Span, n graphNode, ord, r int, gap uint64, window bool) {
	t.Helper()
	enq := replayEnq(r, gap)
	if v := attr(root, "cuda.graph.replay"); v != int64(ord) {
		t.Errorf("%s replay %d: cuda.graph.replay = %v, want %d", n.name, r, v, ord)
	}
	if root.StartTimestamp() != ts(enq) {
		t.Errorf("%s replay %d: starts at %d, want %d", n.name, r, root.StartTimestamp()-realBase, enq)
	}
	want := map[string][2]uint64{SpanLaunchCall: {enq, enq + 50}}
	v := attr(root, "cuda.threads.observed")
	if window {
		want[SpanQueued] = [2]uint64{enq, enq + n.start}
		want[SpanExecuting] = [2]uint64{enq + n.start, enq + n.end}
		if v != 512+int64(r) {
			t.Errorf("%s replay %d: cuda.threads.observed = %v, want %d", n.name, r, v, 512+r)
		}
	} else if v != nil {
		t.Errorf("%s replay %d: cuda.threads.observed = %v without a window", n.name, r, v)
	}
	got := map[string][2]uint64{}
	for _, c := range kids {
		got[c.Name()] = [2]uint64{uint64(c.StartTimestamp() - realBase), uint64(c.EndTimestamp() - realBase)}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s replay %d: phases %v, want %v", n.name, r, got, want)
	}
}

// attr is the value of attribute k of s, nil if it has none.
func attr(s ptrace.Span, k string) any {
	if v, ok := s.Attributes().Get(k); ok {
		return v.AsRaw()
	}
	return nil
}

// replaySpans returns the launch spans of node n by replay ordinal.
func replaySpans(t *testing.T, by map[string][]ptrace.Span, n graphNode) map[int64]ptrace.Span {
	t.Helper()
	out := map[int64]ptrace.Span{}
	for _, s := range by[n.name] {
		v, ok := s.Attributes().Get("cuda.graph.replay")
		if !ok {
			t.Fatalf("%s span without cuda.graph.replay", n.name)
		}
		if _, dup := out[v.Int()]; dup {
			t.Fatalf("%s: two spans of replay %d", n.name, v.Int())
		}
		out[v.Int()] = s
	}
	return out
}

func graphKernelNames() []rec {
	var out []rec
	for _, n := range testGraph {
		out = append(out, shim(&record.KernelName{Function: n.fn, Name: n.name}))
	}
	return out
}

// TestGraphReplays: every replay of a graph node (the same launch id each
// time) is its own launch span with its own device window and phases,
// whatever the arrival order of the launch records and windows.
func TestGraphReplays(t *testing.T) {
	const n, gap = 3, 100_000
	for _, o := range graphOrders(n) {
		t.Run(o.name, func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Unix(1000, 0)
			recs := graphKernelNames()
			for _, e := range o.events {
				recs = append(recs, e.record(gap))
			}
			handleAll(t, tr, now, recs...)
			if p := tr.Pending(); p != n*len(testGraph) {
				t.Fatalf("%d pending, want %d", p, n*len(testGraph))
			}
			tr.Expire(now)
			tr.Expire(now.Add(11 * time.Millisecond))
			if p := tr.Pending(); p != 0 {
				t.Fatalf("%d still pending", p)
			}
			c := tr.Counters()
			if c.LaunchesEmitted != n*uint64(len(testGraph)) || c.ExecDuplicate != 0 || c.LaunchesOrphan != 0 || c.LaunchesExpired != 0 {
				t.Fatalf("counters %+v", c)
			}
			td := tr.TakeTraces()
			by, kids := spanByName(td), children(td)
			for _, node := range testGraph {
				spans := replaySpans(t, by, node)
				if len(spans) != n {
					t.Fatalf("%d %s spans, want %d", len(spans), node.name, n)
				}
				for r := range n {
					s, ok := spans[int64(r)]
					if !ok {
						t.Errorf("%s: no span of replay %d", node.name, r)
						continue
					}
					checkReplaySpan(t, s, kids[s.SpanID()], node, r, r, gap, true)
					if v := attr(s, "cuda.launch.api"); v != "cuGraphLaunch" {
						t.Errorf("cuda.launch.api %v", v)
					}
				}
			}
		})
	}
}

// TestGraphReplayUnmatched: a replay that misses a record does not stay
// pending past LaunchTimeout nor take the records of the next replays.
func TestGraphReplayUnmatched(t *testing.T) {
	const gap = 10_000_000 // 10 ms between replays: the windows of one replay end well before the next is launched
	ev := func(replay int, exec bool) rec { return graphEvent{0, replay, exec}.record(gap) }
	failed := ev(0, false)
	failed.r.(*record.Launch).Result = 1
	type step struct {
		recs    []rec
		advance time.Duration // since the start
		pending int           // after the records and a completion grace
	}
	type span struct {
		ord, replay int  // replay ordinal given, replay whose records it shows
		window      bool // with a device window
	}
	tests := []struct {
		name     string
		steps    []step
		want     []span
		counters func(Counters) bool
	}{
		{"launch without window expires, next replay pairs", []step{
			{[]rec{ev(0, false), ev(1, false), ev(0, true)}, 0, 1}, // replay 1 waits
			{nil, time.Second, 0}, // and expires without a window
			{[]rec{ev(2, false), ev(2, true)}, 2 * time.Second, 0},
		}, []span{{0, 0, true}, {1, 1, false}, {2, 2, true}},
			func(c Counters) bool {
				return c.LaunchesExpired == 1 && c.LaunchesOrphan == 0 && c.LaunchesEmitted == 3
			}},
		{"window without launch is an orphan", []step{
			{[]rec{ev(0, true)}, 0, 1},
			{nil, time.Second, 0},
			{[]rec{ev(1, false), ev(1, true)}, 2 * time.Second, 0},
		}, []span{{0, 1, true}}, // the first launch record is replay 1's
			func(c Counters) bool { return c.LaunchesOrphan == 1 && c.LaunchesEmitted == 1 }},
		{"window of a lost launch record waiting", []step{
			{[]rec{ev(0, true), ev(1, false), ev(1, true)}, 0, 0},
		}, []span{{0, 1, true}},
			func(c Counters) bool { return c.LaunchesOrphan == 1 && c.LaunchesEmitted == 1 }},
		{"late window of an expired launch", []step{
			{[]rec{ev(0, false)}, 0, 1},
			{nil, time.Second, 0}, // replay 0 expires
			{[]rec{ev(1, false), ev(0, true), ev(1, true)}, 2 * time.Second, 0},
		}, []span{{0, 0, false}, {1, 1, true}},
			func(c Counters) bool {
				return c.LaunchesExpired == 1 && c.LaunchesOrphan == 1 && c.LaunchesEmitted == 2
			}},
		{"failed launch takes no window", []step{
			{[]rec{failed, ev(1, false), ev(1, true)}, 0, 1},
			{nil, time.Second, 0},
		}, []span{{0, 0, false}, {1, 1, true}},
			func(c Counters) bool { return c.LaunchesExpired == 1 && c.LaunchesEmitted == 2 }},
		{"failed launch takes no waiting window", []step{
			{[]rec{ev(1, true), failed, ev(1, false)}, 0, 1},
			{nil, time.Second, 0},
		}, []span{{0, 0, false}, {1, 1, true}},
			func(c Counters) bool { return c.LaunchesExpired == 1 && c.LaunchesEmitted == 2 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: 500 * time.Millisecond})
			t0 := time.Unix(1000, 0)
			handleAll(t, tr, t0, graphKernelNames()...)
			node := testGraph[0]
			var got []span
			for i, st := range tc.steps {
				now := t0.Add(st.advance)
				handleAll(t, tr, now, st.recs...)
				tr.Expire(now)
				tr.Expire(now.Add(11 * time.Millisecond))
				if p := tr.Pending(); p != st.pending {
					t.Fatalf("step %d: %d pending, want %d", i, p, st.pending)
				}
				td := tr.TakeTraces()
				by, kids := spanByName(td), children(td)
				for _, s := range by[node.name] {
					v, ok := s.Attributes().Get("cuda.graph.replay")
					if !ok {
						t.Errorf("step %d: span without cuda.graph.replay", i)
						continue
					}
					_, window := s.Attributes().Get("cuda.threads.observed")
					w := span{int(v.Int()), -1, window}
					for _, x := range tc.want {
						if x.ord == w.ord {
							w.replay = x.replay
							checkReplaySpan(t, s, kids[s.SpanID()], node, x.ord, x.replay, gap, x.window)
						}
					}
					got = append(got, w)
				}
			}
			slices.SortFunc(got, func(a, b span) int { return a.ord - b.ord })
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("spans {ordinal replay window} %v, want %v", got, tc.want)
			}
			if c := tr.Counters(); !tc.counters(c) {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// TestGraphReplayWarps: Warp records (per-warp producers) of graph nodes
// go to the replays in order too: to the oldest replay short of warps,
// else to the run that collects them until its window or grid is complete.
func TestGraphReplayWarps(t *testing.T) {
	// One block of 64 threads: 2 warps per run. Replay r's warps run at
	// [enq+1000+w, enq+2000+w] for warp w.
	const gap = 100_000
	warp := func(r, w int) rec {
		st := gpuBase + replayEnq(r, gap) + 1000 + uint64(w)
		return shim(&record.Warp{LaunchID: nodeA, Block: [3]uint32{0, 0, 0}, Warp: uint32(w), ActiveMask: 0xffffffff,
			StartNS: st, MinExitNS: st + 900, EndNS: st + 1000})
	}
	launch := func(r int) rec {
		enq := replayEnq(r, gap)
		return shim(&record.Launch{LaunchID: nodeA, PID: 42, TID: 43, EnqueueNS: enq, ReturnNS: enq + 50, Function: 0xa,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{64, 1, 1}, API: record.APIGraphLaunch})
	}
	exec := func(r int) rec {
		enq := replayEnq(r, gap)
		return shim(&record.Exec{LaunchID: nodeA, StartNS: gpuBase + enq + 1000, EndNS: gpuBase + enq + 2001, Blocks: 1, Threads: 64})
	}
	tests := []struct {
		name string
		n    int // replays
		recs []rec
	}{
		{"launches then warps", 2, []rec{launch(0), launch(1), warp(0, 0), warp(0, 1), warp(1, 0), warp(1, 1)}},
		{"warps then launches", 2, []rec{warp(0, 0), warp(0, 1), exec(0), warp(1, 0), warp(1, 1), exec(1), launch(0), launch(1)}},
		{"warps of the next replay before its launch", 2, []rec{launch(0), warp(0, 0), warp(0, 1), warp(1, 0), warp(1, 1), launch(1)}},
		{"warps of two replays before their launches", 3, []rec{launch(0), warp(0, 0), warp(0, 1), warp(1, 0), warp(1, 1),
			warp(2, 0), warp(2, 1), launch(1), launch(2)}},
		{"warps interleaved with launches", 2, []rec{warp(0, 0), launch(0), warp(0, 1), launch(1), warp(1, 0), warp(1, 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, append(graphKernelNames(), tc.recs...)...)
			tr.Expire(now)
			tr.Expire(now.Add(11 * time.Millisecond))
			if p := tr.Pending(); p != 0 {
				t.Fatalf("%d pending; counters %+v", p, tr.Counters())
			}
			td := tr.TakeTraces()
			by, kids := spanByName(td), children(td)
			spans := replaySpans(t, by, testGraph[0])
			if len(spans) != tc.n {
				t.Fatalf("%d spans, want %d", len(spans), tc.n)
			}
			for r := range tc.n {
				s, ok := spans[int64(r)]
				if !ok {
					t.Fatalf("no span of replay %d", r)
				}
				enq := replayEnq(r, gap)
				if v := attr(s, "cuda.warps.observed"); v != int64(2) {
					t.Errorf("replay %d: %v warps observed, want 2", r, v)
				}
				for _, c := range kids[s.SpanID()] {
					if c.Name() == SpanExecuting && (c.StartTimestamp() != ts(enq+1000) || c.EndTimestamp() != ts(enq+2001)) {
						t.Errorf("replay %d: executing [%d, %d], want [%d, %d]", r, c.StartTimestamp()-realBase,
							c.EndTimestamp()-realBase, enq+1000, enq+2001)
					}
				}
			}
		})
	}
}

// TestGraphReplaySampling: replays of a node are sampled one by one (not
// all or none), and the nodes of one graph launch together.
func TestGraphReplaySampling(t *testing.T) {
	const n, gap = 200, 100_000
	tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{OneIn: 4}, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
	now := time.Unix(1000, 0)
	recs := graphKernelNames()
	for _, o := range graphOrders(n)[2:3] { // each replay launches then windows
		for _, e := range o.events {
			recs = append(recs, e.record(gap))
		}
	}
	handleAll(t, tr, now, recs...)
	tr.Expire(now)
	tr.Expire(now.Add(11 * time.Millisecond))
	by := spanByName(tr.TakeTraces())
	var kept [2][]int64
	for i, node := range testGraph {
		for r := range replaySpans(t, by, node) {
			kept[i] = append(kept[i], r)
		}
		slices.Sort(kept[i])
	}
	if len(kept[0]) < n/8 || len(kept[0]) > n/2 {
		t.Errorf("%d of %d replays kept, want about a quarter", len(kept[0]), n)
	}
	if !slices.Equal(kept[0], kept[1]) {
		t.Errorf("nodes of one graph launch sampled apart: %v vs %v", kept[0], kept[1])
	}
	if c := tr.Counters(); c.LaunchesEmitted != 2*n {
		t.Errorf("%d launches emitted, want %d", c.LaunchesEmitted, 2*n)
	}
}

// TestGraphPendingBounded: replays that never get their window count
// against MaxPendingLaunches like other launches, and the per-node queues
// stay bounded by what is pending.
func TestGraphPendingBounded(t *testing.T) {
	for _, exec := range []bool{false, true} {
		t.Run(fmt.Sprintf("exec %v", exec), func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, MaxPendingLaunches: 100, LaunchTimeout: time.Hour})
			now := time.Unix(1000, 0)
			recs := graphKernelNames()
			for r := range 1000 {
				recs = append(recs, graphEvent{0, r, exec}.record(100_000))
			}
			handleAll(t, tr, now, recs...)
			if p := tr.Pending(); p != 100 {
				t.Fatalf("%d pending, want 100", p)
			}
			c := tr.Counters()
			if exec && c.LaunchesOrphan != 900 || !exec && c.LaunchesEvicted != 900 {
				t.Fatalf("counters %+v", c)
			}
			ch := tr.launches.graphs.chains[srcKey{1, nodeA}]
			for _, q := range []*runQueue{&ch.wantLaunch, &ch.wantExec, &ch.wantWarps, &ch.wantDone} {
				if n := len(q.q) - q.head; n > 2*100+16 {
					t.Errorf("queue of %d runs for 100 pending", n)
				}
			}
			if ch.live != 100 || tr.launches.graphs.n != 100 || tr.launches.pending.n != 0 {
				t.Errorf("live %d, nGraph %d, pending map %d", ch.live, tr.launches.graphs.n, tr.launches.pending.n)
			}
		})
	}
}

// TestGraphNodesBounded: the replay counts of graph nodes are forgotten
// beyond maxGraphNodes nodes with nothing pending; completion records
// finish graph runs.
func TestGraphNodesBounded(t *testing.T) {
	tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
	now := time.Unix(1000, 0)
	handleAll(t, tr, now, shim(&record.KernelName{Function: 0xa, Name: "ka"}))
	var b []byte
	for i := range uint64(maxGraphNodes + 100) {
		b = (&record.Launch{LaunchID: GraphIDBit | i, PID: 42, EnqueueNS: 10_000, ReturnNS: 10_050, Function: 0xa,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}).Append(b[:0])
		if err := tr.Handle(1, b, now); err != nil {
			t.Fatal(err)
		}
		b = (&record.Exec{LaunchID: GraphIDBit | i, StartNS: gpuBase + 11_000, EndNS: gpuBase + 12_000, Blocks: 1, Threads: 1}).Append(b[:0])
		if err := tr.Handle(1, b, now); err != nil {
			t.Fatal(err)
		}
		// A completion record finishes the run at once.
		b = (&record.Completion{LaunchID: GraphIDBit | i, CompleteNS: 13_000}).Append(b[:0])
		if err := tr.Handle(1, b, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.launches.graphs.chains); n > maxGraphNodes || n < 100 {
		t.Errorf("%d graph nodes remembered (bound %d)", n, maxGraphNodes)
	}
	if tr.Pending() != 0 || tr.Counters().LaunchesEmitted != maxGraphNodes+100 {
		t.Errorf("pending %d, counters %+v", tr.Pending(), tr.Counters())
	}
}

// TestGraphBitOnly: launch ids without GraphIDBit keep the one-span-per-id
// join (a second window is a duplicate) and get no cuda.graph.replay.
func TestGraphBitOnly(t *testing.T) {
	const id = 0x11 // nodeA without the graph bit
	tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
	now := time.Unix(1000, 0)
	recs := graphKernelNames()
	for r := range 2 {
		for _, x := range []bool{false, true} {
			e := graphEvent{0, r, x}.record(100_000)
			switch v := e.r.(type) {
			case *record.Launch:
				v.LaunchID, v.API = id, record.APILaunchKernel
			case *record.Exec:
				v.LaunchID = id
			}
			recs = append(recs, e)
		}
	}
	handleAll(t, tr, now, recs...)
	tr.Expire(now)
	tr.Expire(now.Add(11 * time.Millisecond))
	by := spanByName(tr.TakeTraces())
	if len(by["ka"]) != 1 {
		t.Fatalf("%d spans, want 1", len(by["ka"]))
	}
	if _, ok := by["ka"][0].Attributes().Get("cuda.graph.replay"); ok {
		t.Error("cuda.graph.replay on a launch that is not a graph node's")
	}
	if c := tr.Counters(); c.ExecDuplicate != 1 || c.LaunchesEmitted != 1 {
		t.Errorf("counters %+v", c)
	}
}

// TestGraphReplayCompletion: completion records of a graph node go to its
// replays in order, and a replay with its window and completion is done
// at once.
func TestGraphReplayCompletion(t *testing.T) {
	const gap = 100_000
	done := func(r int) rec {
		return shim(&record.Completion{LaunchID: nodeA, CompleteNS: replayEnq(r, gap) + 20_000})
	}
	ev := func(r int, exec bool) rec { return graphEvent{0, r, exec}.record(gap) }
	for _, tc := range []struct {
		name string
		recs []rec
	}{
		{"each completion after its window", []rec{ev(0, false), ev(1, false), ev(0, true), done(0), ev(1, true), done(1)}},
		{"completions before the windows", []rec{ev(0, false), ev(1, false), done(0), done(1), ev(0, true), ev(1, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, append(graphKernelNames(), tc.recs...)...)
			if p := tr.Pending(); p != 0 {
				t.Fatalf("%d pending, want 0 (completed replays are done at once)", p)
			}
			td := tr.TakeTraces()
			by, kids := spanByName(td), children(td)
			spans := replaySpans(t, by, testGraph[0])
			for r := range 2 {
				s, ok := spans[int64(r)]
				if !ok {
					t.Fatalf("no span of replay %d", r)
				}
				enq := replayEnq(r, gap)
				var n int
				for _, c := range kids[s.SpanID()] {
					if c.Name() != SpanCompletion {
						continue
					}
					n++
					if c.StartTimestamp() != ts(enq+5_000) || c.EndTimestamp() != ts(enq+20_000) {
						t.Errorf("replay %d: completion [%d, %d], want [%d, %d]", r, c.StartTimestamp()-realBase,
							c.EndTimestamp()-realBase, enq+5_000, enq+20_000)
					}
				}
				if n != 1 {
					t.Errorf("replay %d: %d completion spans, want 1", r, n)
				}
			}
		})
	}
}

// BenchmarkGraphReplaysToPdata measures launches/s turned into spans for
// 500 replays of a 2-node graph (launch record, Exec window and completion
// of each node), against the same records with unique launch ids and no
// graph bit.
func BenchmarkGraphReplaysToPdata(b *testing.B) {
	const replays, gap = 500, 100_000
	for _, graph := range []bool{true, false} {
		b.Run(fmt.Sprintf("graph=%v", graph), func(b *testing.B) {
			var s stream
			s.calibrate(0)
			for _, n := range testGraph {
				s.add(&record.KernelName{Function: n.fn, Name: n.name})
			}
			id := uint64(0)
			for r := range replays {
				for i, n := range testGraph {
					ev := []rec{graphEvent{i, r, false}.record(gap), graphEvent{i, r, true}.record(gap),
						shim(&record.Completion{LaunchID: n.id, CompleteNS: replayEnq(r, gap) + 20_000})}
					id++
					for _, e := range ev {
						if !graph {
							switch v := e.r.(type) {
							case *record.Launch:
								v.LaunchID, v.API = id, record.APILaunchKernel
							case *record.Exec:
								v.LaunchID = id
							case *record.Completion:
								v.LaunchID = id
							}
						}
						s.add(e.r)
					}
				}
			}
			now := time.Now()
			tr := newTr(Options{ExpectWarps: true})
			b.ResetTimer()
			for i := range b.N {
				for _, r := range s.b {
					_ = tr.Handle(uint32(i), r, now)
				}
				if td := tr.TakeTraces(); td.SpanCount() != 2*replays*5 {
					b.Fatalf("%d spans", td.SpanCount())
				}
			}
			b.ReportMetric(float64(2*replays*b.N)/b.Elapsed().Seconds(), "launches/s")
		})
	}
}
