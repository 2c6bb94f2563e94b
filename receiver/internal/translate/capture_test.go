package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// TestGraphCaptured: a graph captured from a stream. The captured launch
// never ran; every cuGraphLaunch writes a record with its id (7), without
// GraphIDBit, and each run writes a window with it. The shim writes no
// record for the captured launch (shim/src/capture.c); older shims wrote
// one with a plain API. The capture must give no span, and each replay
// must be its own span with its own window, whether the first window is
// read before the first cuGraphLaunch record or after it.
func TestGraphCaptured(t *testing.T) {
	const id, n, gap = 7, 3, 100_000
	launch := func(api record.LaunchAPI, enq uint64) rec {
		return shim(&record.Launch{LaunchID: id, PID: 42, TID: 43, EnqueueNS: enq, ReturnNS: enq + 50, Stream: 7,
			Function: 0xa, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, API: api})
	}
	window := func(r int) rec {
		enq := replayEnq(r, gap)
		return shim(&record.Exec{LaunchID: id, StartNS: gpuBase + enq + 1_000, EndNS: gpuBase + enq + 5_000, Blocks: 4, Threads: 512 + uint64(r)})
	}
	capture := launch(record.APILaunchKernel, 5_000)
	tests := []struct {
		name     string
		order    []rec
		captured uint64 // LaunchesCaptured: captured launch records dropped
	}{
		{"launch records before windows", []rec{capture,
			launch(record.APIGraphLaunch, replayEnq(0, gap)), window(0),
			launch(record.APIGraphLaunch, replayEnq(1, gap)), launch(record.APIGraphLaunch, replayEnq(2, gap)),
			window(1), window(2)}, 1},
		{"first window before the first cuGraphLaunch record", []rec{capture,
			window(0), launch(record.APIGraphLaunch, replayEnq(0, gap)),
			window(1), launch(record.APIGraphLaunch, replayEnq(1, gap)),
			launch(record.APIGraphLaunch, replayEnq(2, gap)), window(2)}, 1},
		{"no capture record", []rec{
			launch(record.APIGraphLaunch, replayEnq(0, gap)), window(0),
			window(1), launch(record.APIGraphLaunch, replayEnq(1, gap)),
			launch(record.APIGraphLaunch, replayEnq(2, gap)), window(2)}, 0},
		{"no capture record, first window first", []rec{
			window(0), launch(record.APIGraphLaunch, replayEnq(0, gap)),
			launch(record.APIGraphLaunch, replayEnq(1, gap)), window(1),
			launch(record.APIGraphLaunch, replayEnq(2, gap)), window(2)}, 0},
	}
	node := graphNode{id, 0xa, "ka", 1_000, 5_000}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, append([]rec{shim(&record.KernelName{Function: 0xa, Name: "ka"})}, tt.order...)...)
			tr.Expire(now)
			tr.Expire(now.Add(11 * time.Millisecond))
			if p := tr.Pending(); p != 0 {
				t.Fatalf("%d still pending", p)
			}
			c := tr.Counters()
			if c.LaunchesCaptured != tt.captured || c.LaunchesEmitted != n || c.ExecDuplicate != 0 || c.LaunchesOrphan != 0 {
				t.Fatalf("counters %+v", c)
			}
			td := tr.TakeTraces()
			by, kids := spanByName(td), children(td)
			spans := replaySpans(t, by, node)
			if len(spans) != n {
				t.Fatalf("%d spans, want %d (the capture gives none)", len(spans), n)
			}
			for r := range n {
				s := spans[int64(r)]
				checkReplaySpan(t, s, kids[s.SpanID()], node, r, r, gap, true)
			}
		})
	}
}
