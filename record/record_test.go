package record

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// decoder is implemented by every record type.
type decoder interface {
	Decode(b []byte) error
	Append(b []byte) []byte
}

func sampleRecords() []decoder {
	return []decoder{
		&Launch{LaunchID: 7, PID: 100, TID: 101, EnqueueNS: 1000, ReturnNS: 1500, Stream: 0xabc, Function: 0xf00,
			Device: 1, SharedMem: 4096, Grid: [3]uint32{64, 2, 1}, Block: [3]uint32{256, 1, 1}, Result: 0, API: APILaunchKernelEx, Flags: LaunchUnprobed},
		&KernelName{Function: 0xf00, Module: 0xdead, PID: 100, Name: "_Z6vecAddPfS_S_i"},
		&KernelName{Function: 1, PID: 2, Truncated: true, Name: "abcdefgh"},
		&Warp{LaunchID: 7, Block: [3]uint32{3, 1, 0}, Warp: 5, SMID: 17, ActiveMask: 0xffff, StartNS: 10, EndNS: 90, MinExitNS: 70},
		&Completion{LaunchID: 7, CompleteNS: 99999, Device: 1, How: SeenByEventQuery},
		&Memcpy{Bytes: 1 << 20, StartNS: 5, EndNS: 9, Stream: 3, PID: 100, TID: 102, Device: 0, Kind: MemcpyDeviceToHost, Flags: MemcpyAsync},
		&Sync{StartNS: 1, EndNS: 2, Stream: 0, PID: 100, TID: 100, Device: 0, Kind: SyncContext},
		&Calibration{MonoNS: 1e9, RealtimeNS: 1.7e18, GPUNS: 5e8, Device: 1, UncertaintyNS: 300},
		&ThreadCount{LaunchID: 7, FirstThread: 256, Counts: []uint64{1, 2, 3}},
		&Device{Device: 1, PID: 100, UUID: [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, SMCount: 132, ComputeCap: 90, Name: "NVIDIA H100 80GB HBM3"},
		&Exec{LaunchID: 7, StartNS: 100, EndNS: 80100, Blocks: 65536, Threads: 1 << 24},
		&Window{LaunchID: 7, StartNS: 2000, EndNS: 82000, Device: 1, NameHash: NameHash("_Z6vecAddPfS_S_i"), Correlation: 12345, Flags: WindowGraph},
		&WindowState{TimeNS: 1500, State: WindowsUnavailable, Reason: WindowsReasonAPIError, Detail: 17, Dropped: 3},
		&SpanContext{PID: 100, TID: 101, TraceID: [16]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf},
			SpanID: [8]byte{0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7}, Flags: TraceFlagSampled, Source: SpanContextThread},
		&Stack{LaunchID: 7, PID: 100, TID: 101, Part: 1, Flags: StackLast | StackNativeCut, PyVersion: 0x030b,
			Native: []uint64{0x401000, 0x7f0000001234}, Python: []PyFrame{{Code: 0x7f0000100000, Instr: 0x7f00001000a6}}},
		&Patch{Module: 0xdead, RequestNS: 2500000, CompileNS: 41000000, PID: 100, Kernels: 160, Outcome: PatchFailed, Cache: PatchCacheCorrupt},
		&CounterSample{StartNS: 5000, EndNS: 105000, Device: 1, Flags: CounterOverflowBefore, Values: []float64{87.5, 3.2e12, math.Copysign(0, -1)},
			SetHash: CounterSetHash([]string{"sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum.per_second"})},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, rec := range sampleRecords() {
		name := reflect.TypeOf(rec).Elem().Name()
		t.Run(name, func(t *testing.T) {
			b := rec.Append(nil)
			p, err := ParsePrefix(b)
			if err != nil {
				t.Fatal(err)
			}
			if int(p.Size) != len(b) || p.Size%8 != 0 || p.Version != Version {
				t.Fatalf("prefix %+v for %d bytes", p, len(b))
			}
			got := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(decoder)
			if err := got.Decode(b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, rec) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, rec)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	var buf []byte
	var want []Type
	for _, rec := range sampleRecords() {
		buf = rec.Append(buf)
		p, _ := ParsePrefix(rec.Append(nil))
		want = append(want, p.Type)
	}
	var got []Type
	if err := Split(buf, func(p Prefix, rec []byte) error {
		got = append(got, p.Type)
		if len(rec) != int(p.Size) {
			t.Errorf("record of %d bytes, prefix says %d", len(rec), p.Size)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("types %v, want %v", got, want)
	}
	// A cut buffer names the byte where the bad record starts.
	err := Split(buf[:len(buf)-8], func(Prefix, []byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "field size at offset 4") {
		t.Fatalf("cut buffer: %v", err)
	}
}

// mutate returns a fresh encoding of rec with fn applied to its bytes.
func mutate(rec decoder, fn func(b []byte)) []byte {
	b := rec.Append(nil)
	fn(b)
	return b
}

func TestDecodeErrors(t *testing.T) {
	s := sampleRecords()
	launch, name, warp, memcpy, sync, calib, tc, exec := s[0], s[1], s[3], s[5], s[6], s[7], s[8], s[10]
	window, state, spanCtx, stack, counter := s[11], s[12], s[13], s[14], s[16]
	u16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint16(b[off:], v) }
	}
	u32 := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	u64 := func(off int, v uint64) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint64(b[off:], v) }
	}
	tests := []struct {
		name   string
		into   decoder
		b      []byte
		field  string
		offset int
		reason string
	}{
		{"short prefix", &Launch{}, []byte{1, 0, 1}, "type", 0, "need the 8-byte prefix, have 3 bytes"},
		{"size not aligned", &Launch{}, mutate(launch, u32(4, 95)), "size", 4, "must be a multiple of 8 and ≥ 8, got 95"},
		{"size beyond buffer", &Launch{}, launch.Append(nil)[:64], "size", 4, "record of 96 bytes but only 64 bytes available"},
		{"wrong type", &Launch{}, warp.Append(nil), "type", 0, "is warp, not launch"},
		{"wrong version", &Launch{}, mutate(launch, u16(2, 2)), "version", 2, "unsupported version 2 (want 1)"},
		{"wrong size", &Launch{}, append(mutate(launch, u32(4, 104)), make([]byte, 8)...), "size", 4, "must be 96, got 104"},
		{"grid_y zero", &Launch{}, mutate(launch, u32(68, 0)), "grid_y", 68, "must be ≥ 1, got 0"},
		{"block_z zero", &Launch{}, mutate(launch, u32(84, 0)), "block_z", 84, "must be ≥ 1, got 0"},
		{"return before enqueue", &Launch{}, mutate(launch, u64(32, 10)), "return_ns", 32, "10 is before enqueue_ns 1000"},
		{"name_len zero", &KernelName{}, mutate(name, u16(28, 0)), "name_len", 28, "must be 1..4096, got 0"},
		{"name_len vs size", &KernelName{}, mutate(name, u16(28, 17)), "size", 4, "must be 56 for name_len 17, got 48"},
		{"name size small", &KernelName{}, mutate(name, u32(4, 24)), "size", 4, "must be ≥ 32, got 24"},
		{"exec no blocks", &Exec{}, mutate(exec, u64(32, 0)), "blocks", 32, "must be nonzero"},
		{"exec end before start", &Exec{}, mutate(exec, u64(24, 99)), "end_ns", 24, "99 is before start_ns 100"},
		{"window end before start", &Window{}, mutate(window, u64(24, 1999)), "end_ns", 24, "1999 is before start_ns 2000"},
		{"window unknown flags", &Window{}, mutate(window, u32(44, 33)), "flags", 44, "unknown flags 0x20"},
		{"window graph exec alone", &Window{}, mutate(window, u32(44, 16)), "flags", 44, "GRAPH_EXEC without GRAPH"},
		{"window untimed with times", &Window{}, mutate(window, u32(44, 8)), "start_ns", 16, "must be 0 with UNTIMED, got 2000..82000"},
		{"window no launch with id", &Window{}, mutate(window, u32(44, 2)), "launch_id", 8, "must be 0 with NO_LAUNCH, got 7"},
		{"window wrong size", &Window{}, append(mutate(window, u32(4, 56)), make([]byte, 8)...), "size", 4, "must be 48, got 56"},
		{"window as state", &WindowState{}, window.Append(nil), "type", 0, "is window, not window_state"},
		{"state zero", &WindowState{}, mutate(state, u32(16, 0)), "state", 16, "unknown state 0"},
		{"state unknown", &WindowState{}, mutate(state, u32(16, 5)), "state", 16, "unknown state 5"},
		{"state reason unknown", &WindowState{}, mutate(state, u32(20, 8)), "reason", 20, "unknown reason 8"},
		{"state version", &WindowState{}, mutate(state, u16(2, 2)), "version", 2, "unsupported version 2 (want 1)"},
		{"warp no lanes", &Warp{}, mutate(warp, u32(36, 0)), "active_mask", 36, "must be nonzero"},
		{"warp exit before start", &Warp{}, mutate(warp, u64(56, 5)), "min_exit_ns", 56, "5 is before start_ns 10"},
		{"warp end before exit", &Warp{}, mutate(warp, u64(48, 60)), "end_ns", 48, "60 is before min_exit_ns 70"},
		{"memcpy kind", &Memcpy{}, mutate(memcpy, u16(52, 9)), "kind", 52, "unknown kind 9"},
		{"memcpy end", &Memcpy{}, mutate(memcpy, u64(24, 1)), "end_ns", 24, "1 is before start_ns 5"},
		{"sync kind", &Sync{}, mutate(sync, u16(44, 0)), "kind", 44, "unknown kind 0"},
		{"sync reserved", &Sync{}, mutate(sync, u16(46, 1)), "reserved", 46, "must be zero"},
		{"sync end", &Sync{}, mutate(sync, u64(8, 5)), "end_ns", 16, "2 is before start_ns 5"},
		{"calibration realtime", &Calibration{}, mutate(calib, u64(16, 0)), "realtime_ns", 16, "must be nonzero"},
		{"span context source", &SpanContext{}, mutate(spanCtx, func(b []byte) { b[41] = 3 }), "source", 41, "unknown source 3"},
		{"span context reserved", &SpanContext{}, mutate(spanCtx, u32(44, 1)), "reserved", 42, "must be zero"},
		{"span context zero trace", &SpanContext{}, mutate(spanCtx, func(b []byte) { clear(b[16:32]) }), "trace_id", 16, "must be nonzero with source thread"},
		{"span context zero span", &SpanContext{}, mutate(spanCtx, func(b []byte) { clear(b[32:40]) }), "span_id", 32, "must be nonzero with source thread"},
		{"span context none with ids", &SpanContext{}, mutate(spanCtx, func(b []byte) { b[41] = 0 }), "trace_id", 16, "must be zero with source none"},
		{"span context wrong size", &SpanContext{}, append(mutate(spanCtx, u32(4, 56)), make([]byte, 8)...), "size", 4, "must be 48, got 56"},
		{"stack flags", &Stack{}, mutate(stack, func(b []byte) { b[25] = 0x10 }), "flags", 25, "unknown flags 0x10"},
		{"stack reserved", &Stack{}, mutate(stack, u16(30, 1)), "reserved", 30, "must be zero"},
		{"stack count vs size", &Stack{}, mutate(stack, func(b []byte) { b[26] = 3 }), "size", 4, "must be 72 for 3 native and 1 Python frames, got 64"},
		{"counter count vs size", &CounterSample{}, mutate(counter, u16(32, 4)), "size", 4, "must be 72 for 4 values (at most 64), got 64"},
		{"counter too many values", &CounterSample{}, mutate(counter, u16(32, 65)), "size", 4, "must be 560 for 65 values (at most 64), got 64"},
		{"counter flags", &CounterSample{}, mutate(counter, u16(34, 6)), "flags", 34, "unknown flags 0x6"},
		{"counter reserved", &CounterSample{}, mutate(counter, u32(36, 1)), "reserved", 36, "must be zero"},
		{"counter ends before it starts", &CounterSample{}, mutate(counter, u64(16, 4999)), "end_ns", 16, "4999 is before start_ns 5000"},
		{"thread count zero", &ThreadCount{}, mutate(tc, u32(20, 0)), "count", 20, "must be 1..65536, got 0"},
		{"thread count vs size", &ThreadCount{}, mutate(tc, u32(20, 2)), "size", 4, "must be 40 for count 2, got 48"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.into.Decode(tt.b)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %v, want a *DecodeError", err)
			}
			if de.Field != tt.field || de.Offset != tt.offset || de.Reason != tt.reason {
				t.Fatalf("Decode = %q\nwant field %s at offset %d: %s", err, tt.field, tt.offset, tt.reason)
			}
		})
	}
}

func TestKernelNameTruncation(t *testing.T) {
	long := strings.Repeat("x", MaxKernelNameLen+10)
	b := (&KernelName{Function: 1, Name: long}).Append(nil)
	var k KernelName
	if err := k.Decode(b); err != nil {
		t.Fatal(err)
	}
	if !k.Truncated || len(k.Name) != MaxKernelNameLen {
		t.Fatalf("truncated=%v len=%d", k.Truncated, len(k.Name))
	}
}

func TestDeviceUUIDString(t *testing.T) {
	d := sampleRecords()[9].(*Device)
	if got, want := d.UUIDString(), "GPU-deadbeef-0102-0304-0506-0708090a0b0c"; got != want {
		t.Fatalf("UUIDString = %q, want %q", got, want)
	}
}

func TestWarpDerived(t *testing.T) {
	w := sampleRecords()[3].(*Warp)
	if w.ActiveLanes() != 16 || w.ExitSkewNS() != 20 {
		t.Fatalf("lanes %d skew %d", w.ActiveLanes(), w.ExitSkewNS())
	}
	l := sampleRecords()[0].(*Launch)
	if l.Threads() != 64*2*256 || l.WarpsPerBlock() != 8 {
		t.Fatalf("threads %d warps/block %d", l.Threads(), l.WarpsPerBlock())
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: no panics, and whatever
// decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(r.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, d := range []decoder{&Launch{}, &KernelName{}, &Warp{}, &Completion{}, &Memcpy{}, &Sync{}, &Calibration{}, &ThreadCount{}, &Device{}, &Exec{}, &Window{}, &WindowState{}, &SpanContext{}, &Stack{}, &Patch{}, &CounterSample{}} {
			if err := d.Decode(b); err != nil {
				continue
			}
			p, _ := ParsePrefix(b)
			if _, isDev := d.(*Device); isDev {
				continue // the name's NUL padding is not kept
			}
			if _, isName := d.(*KernelName); isName {
				continue // padding bytes are not kept
			}
			if got := d.Append(nil); string(got) != string(b[:p.Size]) {
				t.Fatalf("%T re-encodes differently:\n%x\n%x", d, got, b[:p.Size])
			}
		}
		_ = Split(b, func(Prefix, []byte) error { return nil })
	})
}

func BenchmarkDecode(b *testing.B) {
	var buf []byte
	n := 0
	for i := 0; buf == nil || len(buf) < 1<<16; i++ {
		for _, r := range sampleRecords()[:8] {
			buf = r.Append(buf)
			n++
		}
	}
	var (
		l  Launch
		w  Warp
		c  Completion
		m  Memcpy
		s  Sync
		cb Calibration
		k  KernelName
		tc ThreadCount
	)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		err := Split(buf, func(p Prefix, rec []byte) error {
			switch p.Type {
			case TypeLaunch:
				return l.Decode(rec)
			case TypeWarp:
				return w.Decode(rec)
			case TypeCompletion:
				return c.Decode(rec)
			case TypeMemcpy:
				return m.Decode(rec)
			case TypeSync:
				return s.Decode(rec)
			case TypeCalibration:
				return cb.Decode(rec)
			case TypeKernelName:
				return k.Decode(rec)
			case TypeThreadCount:
				return tc.Decode(rec)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
