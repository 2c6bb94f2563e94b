package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// TestExecWindow: a launch whose device window comes as one record.Exec
// (kernel_phases' aggregate) instead of per-warp records finishes as soon
// as the window is in, whatever the order of the records, gets its queued
// and executing phases from it and the observed blocks and threads; a
// second window for the same launch id is counted and ignored.
func TestExecWindow(t *testing.T) {
	ts := func(mono uint64) pcommon.Timestamp { return pcommon.Timestamp(realBase + mono) }
	launch := &record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
		Grid: [3]uint32{65536, 1, 1}, Block: [3]uint32{256, 1, 1}}
	exec := &record.Exec{LaunchID: 9, StartNS: gpuBase + 10_600, EndNS: gpuBase + 90_600, Blocks: 65536, Threads: 1 << 24}
	tests := []struct {
		name      string
		recs      []interface{ Append([]byte) []byte }
		pending   int // after the records, before any Expire
		finished  bool
		duplicate uint64
	}{
		{"launch then window", []interface{ Append([]byte) []byte }{launch, exec}, 1, true, 0},
		{"window then launch", []interface{ Append([]byte) []byte }{exec, launch}, 1, true, 0},
		{"window twice", []interface{ Append([]byte) []byte }{launch, exec, exec}, 1, true, 1},
		{"no window", []interface{ Append([]byte) []byte }{launch}, 1, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 0xf, Name: "k"})
			for _, r := range tc.recs {
				s.add(r)
			}
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Now()
			feed(t, tr, &s, now)
			if tr.Pending() != tc.pending {
				t.Fatalf("%d pending, want %d", tr.Pending(), tc.pending)
			}
			// No completion record (the shim writes none): the launch is
			// done a grace after its device records are all in.
			tr.Expire(now)
			tr.Expire(now.Add(11 * time.Millisecond))
			if got := tr.Pending() == 0; got != tc.finished {
				t.Fatalf("finished %v, want %v", got, tc.finished)
			}
			if c := tr.Counters(); c.ExecDuplicate != tc.duplicate {
				t.Errorf("ExecDuplicate %d, want %d", c.ExecDuplicate, tc.duplicate)
			}
			if !tc.finished {
				return
			}
			by := spanByName(tr.TakeTraces())
			for _, w := range []struct {
				name       string
				start, end pcommon.Timestamp
			}{{SpanQueued, ts(10_000), ts(10_600)}, {SpanExecuting, ts(10_600), ts(90_600)}} {
				got := by[w.name]
				if len(got) != 1 || got[0].StartTimestamp() != w.start || got[0].EndTimestamp() != w.end {
					t.Fatalf("%s spans %d, want one [%d, %d]", w.name, len(got), w.start-realBase, w.end-realBase)
				}
			}
			root := by["k"]
			if len(root) != 1 {
				t.Fatalf("spans %v", keys(by))
			}
			for k, want := range map[string]int64{"cuda.blocks.observed": 65536, "cuda.threads.observed": 1 << 24} {
				if v, ok := root[0].Attributes().Get(k); !ok || v.Int() != want {
					t.Errorf("attribute %s = %v, want %d", k, v.AsRaw(), want)
				}
			}
			if _, ok := root[0].Attributes().Get("cuda.warps.observed"); ok {
				t.Error("cuda.warps.observed set without warp records")
			}
		})
	}
}

// TestUnprobedLaunch: a launch the shim marks unprobed (its kernel is not
// patched, or it got launch id 0) finishes a grace after its launch record
// instead of waiting LaunchTimeout for device records that will not come,
// and its span has no device phases.
func TestUnprobedLaunch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    record.LaunchFlags
		finished bool
	}{
		{"unprobed", record.LaunchUnprobed, true},
		{"probed, no device records yet", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s stream
			s.calibrate(0)
			s.add(&record.KernelName{Function: 0xf, Name: "k"})
			s.add(&record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
				Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: tc.flags})
			tr := newTr(Options{ExpectWarps: true, CompletionGrace: 10 * time.Millisecond, LaunchTimeout: time.Hour})
			now := time.Now()
			feed(t, tr, &s, now)
			tr.Expire(now)
			tr.Expire(now.Add(11 * time.Millisecond))
			if got := tr.Pending() == 0; got != tc.finished {
				t.Fatalf("finished %v, want %v", got, tc.finished)
			}
			if !tc.finished {
				return
			}
			by := spanByName(tr.TakeTraces())
			if len(by["k"]) != 1 || len(by[SpanExecuting]) != 0 || len(by[SpanQueued]) != 0 {
				t.Fatalf("spans %v, want the launch span alone", keys(by))
			}
			if v, ok := by["k"][0].Attributes().Get("cuda.launch.probed"); !ok || v.Bool() {
				t.Errorf("cuda.launch.probed = %v (set %v), want false", v.AsRaw(), ok)
			}
			if c := tr.Counters(); c.LaunchesExpired != 0 || c.LaunchesEmitted != 1 {
				t.Errorf("expired %d, emitted %d; want 0, 1", c.LaunchesExpired, c.LaunchesEmitted)
			}
		})
	}
}
