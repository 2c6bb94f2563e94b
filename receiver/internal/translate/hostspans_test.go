package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// TestHostSpans checks the spans of host calls (copies and syncs): name,
// times, ids, attributes, and that sampling drops them.
func TestHostSpans(t *testing.T) {
	const uuid = "01020304-0000-0000-0000-000000000000"
	tests := []struct {
		name    string
		rec     interface{ Append([]byte) []byte }
		sample  uint32
		span    string // "" when sampling drops it
		start   uint64
		end     uint64
		attrs   map[string]any
		noAttrs []string
	}{
		{"memcpy on a known device", &record.Memcpy{Bytes: 4096, StartNS: 2000, EndNS: 2500, Stream: 3, PID: 42, TID: 43,
			Kind: record.MemcpyHostToDevice, Flags: record.MemcpyAsync}, 0, SpanMemcpy, 2000, 2500,
			map[string]any{"cuda.memcpy.kind": "MemcpyHostToDevice", "cuda.memcpy.size": int64(4096), "cuda.memcpy.async": true,
				"cuda.device.index": int64(0), "cuda.device.uuid": uuid, "cuda.stream": int64(3), "thread.id": int64(43)}, nil},
		{"memcpy on a device the client did not report", &record.Memcpy{Bytes: 8, StartNS: 2000, EndNS: 2100, PID: 42, TID: 43, Device: 5,
			Kind: record.MemcpyDeviceToHost}, 0, SpanMemcpy, 2000, 2100,
			map[string]any{"cuda.memcpy.kind": "MemcpyDeviceToHost", "cuda.memcpy.async": false, "cuda.device.index": int64(-1)},
			[]string{"cuda.device.uuid"}},
		{"sync", &record.Sync{StartNS: 3000, EndNS: 3900, Stream: 9, PID: 42, TID: 44, Kind: record.SyncStream}, 0, SpanSync, 3000, 3900,
			map[string]any{"cuda.sync.kind": "stream", "cuda.device.index": int64(0), "cuda.stream": int64(9), "thread.id": int64(44)},
			[]string{"cuda.device.uuid"}},
		// One in 1<<30 drops the key (pid 42, start 2000): checked below.
		{"memcpy sampled out", &record.Memcpy{StartNS: 2000, EndNS: 2100, PID: 42}, 1 << 30, "", 0, 0, nil, nil},
		{"sync sampled out", &record.Sync{StartNS: 2000, EndNS: 2100, PID: 42, Kind: record.SyncContext}, 1 << 30, "", 0, 0, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sample > 1 && sampled(srcKey{42, 2000}, tc.sample) {
				t.Fatal("test key is sampled in; pick another")
			}
			var s stream
			s.calibrate(0)
			s.add(&record.Device{Device: 0, UUID: [16]byte{1, 2, 3, 4}})
			s.add(tc.rec)
			tr := newTr(Options{Sampling: SamplingOptions{OneIn: tc.sample}})
			feed(t, tr, &s, time.Now())
			n := tr.SpanCount()
			td := tr.TakeTraces()
			if tc.span == "" {
				if n != 0 || td.SpanCount() != 0 {
					t.Fatalf("%d spans (counted %d), want none", td.SpanCount(), n)
				}
				return
			}
			if n != 1 || td.SpanCount() != 1 {
				t.Fatalf("%d spans (counted %d), want 1", td.SpanCount(), n)
			}
			sp := spanByName(td)[tc.span]
			if len(sp) != 1 {
				t.Fatalf("no %s span: %v", tc.span, keys(spanByName(td)))
			}
			got := sp[0]
			if got.TraceID().IsEmpty() || got.SpanID().IsEmpty() {
				t.Error("empty trace or span id")
			}
			if got.StartTimestamp() != pcommon.Timestamp(realBase+tc.start) || got.EndTimestamp() != pcommon.Timestamp(realBase+tc.end) {
				t.Errorf("span [%d, %d], want [%d, %d]", got.StartTimestamp()-realBase, got.EndTimestamp()-realBase, tc.start, tc.end)
			}
			for k, w := range tc.attrs {
				if v, ok := got.Attributes().Get(k); !ok || v.AsRaw() != w {
					t.Errorf("%s = %v, want %v", k, v.AsRaw(), w)
				}
			}
			for _, k := range tc.noAttrs {
				if v, ok := got.Attributes().Get(k); ok {
					t.Errorf("%s = %v, want none", k, v.AsRaw())
				}
			}
		})
	}
}
