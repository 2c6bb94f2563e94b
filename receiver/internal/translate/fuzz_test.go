package translate

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// FuzzHandle feeds the translator, the stateful consumer of every client's
// records, sequences of records that decode (record types and field values
// chosen by the fuzzer over valid prefixes), from two clients, with
// expiries and emissions between them. No record may make it panic: Handle
// recovers one and says so (*InternalError), which this test refuses, so
// the fuzzer still finds the bug the recovery would hide.
func FuzzHandle(f *testing.F) {
	for _, r := range []interface{ Append([]byte) []byte }{
		&record.Launch{LaunchID: 7, PID: 100, TID: 101, EnqueueNS: 1000, ReturnNS: 1500, Function: 0xf00, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, API: record.APILaunchKernel, Flags: record.LaunchSASS},
		&record.KernelName{Function: 0xf00, Module: 1, PID: 100, Name: "_Z6vecAddPfS_S_i"},
		&record.Exec{LaunchID: 7, StartNS: 100, EndNS: 80100, Blocks: 4, Threads: 1024},
		&record.Window{LaunchID: 7, StartNS: 2000, EndNS: 82000},
		&record.WindowState{TimeNS: 1, State: record.WindowsOff, Reason: record.WindowsReasonRate},
		&record.Calibration{MonoNS: 1e9, RealtimeNS: 1.7e18, GPUNS: 5e8, UncertaintyNS: 300},
		&record.Device{Device: 0, PID: 100, SMCount: 132, ComputeCap: 90, Name: "H200"},
		&record.Sync{StartNS: 1, EndNS: 2, PID: 100, TID: 100},
		&record.SpanContext{PID: 100, TID: 101, TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1, Source: record.SpanContextThread},
	} {
		f.Add(r.Append(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := newTr(Options{})
		tr.Connect(1, Peer{PID: 100})
		tr.Connect(2, Peer{PID: 200})
		now := time.Unix(1700000000, 0)
		for i := 0; len(data) >= 8 && i < 64; i++ {
			size := int(binary.LittleEndian.Uint32(data[4:]))
			if size < 8 || size > len(data) || size%8 != 0 {
				size = min(len(data)&^7, 64)
				if size < 8 {
					return
				}
			}
			rec := make([]byte, size)
			copy(rec, data[:size])
			binary.LittleEndian.PutUint32(rec[4:], uint32(size))
			data = data[size:]
			err := tr.Handle(uint32(1+i%2), rec, now)
			var ie *InternalError
			if errors.As(err, &ie) {
				t.Fatalf("record %d (% x): %v\n%s", i, rec, err, ie.Stack)
			}
			now = now.Add(time.Duration(i%7) * time.Millisecond)
			if i%5 == 4 {
				tr.Expire(now.Add(time.Second))
				_ = tr.Metrics(now, nil)
				_ = tr.TakeTraces()
			}
		}
		tr.Disconnect(1, now)
		tr.Expire(now.Add(time.Minute))
		_ = tr.Metrics(now, nil)
	})
}
