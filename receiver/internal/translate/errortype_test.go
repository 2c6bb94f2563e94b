package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func TestErrorType(t *testing.T) {
	tests := []struct {
		code   int64
		driver bool
		want   string
	}{
		{1, true, "CUDA_ERROR_INVALID_VALUE"},
		{1, false, "cudaErrorInvalidValue"},
		{719, true, "CUDA_ERROR_LAUNCH_FAILED"},
		{719, false, "cudaErrorLaunchFailure"},
		{98, true, "98"}, // no CUresult 98: the number
		{98, false, "cudaErrorInvalidDeviceFunction"},
		{-3, false, "-3"},
	}
	for _, tt := range tests {
		if got := errorType(tt.code, tt.driver); got != tt.want {
			t.Errorf("errorType(%d, driver %v) = %q, want %q", tt.code, tt.driver, got, tt.want)
		}
	}
}

// TestLaunchErrorType checks error.type on the span of a failed launch
// call, and its absence on a successful one.
func TestLaunchErrorType(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 0xf, Name: "ok"})
	s.add(&record.KernelName{Function: 0xe, Name: "bad"})
	s.launch(1, 0xf, 10_000, 1, 32, 0, true)
	s.add(&record.Launch{LaunchID: 2, PID: 42, TID: 43, EnqueueNS: 20_000, ReturnNS: 20_100, Function: 0xe,
		Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1 << 20, 1, 1}, Result: 701})
	tr := newTr(Options{})
	now := time.Now()
	feed(t, tr, &s, now)
	tr.Expire(now.Add(time.Minute))
	by := spanByName(tr.TakeTraces())
	for name, want := range map[string]string{"ok": "", "bad": "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"} {
		if len(by[name]) != 1 {
			t.Fatalf("%d %q spans (all %v)", len(by[name]), name, keys(by))
		}
		sp := by[name][0]
		v, ok := sp.Attributes().Get("error.type")
		if got := v.Str(); ok != (want != "") || got != want {
			t.Errorf("%s: error.type %q (set %v), want %q", name, got, ok, want)
		}
		if failed := sp.Status().Code() == ptrace.StatusCodeError; failed != (want != "") {
			t.Errorf("%s: status %v", name, sp.Status().Code())
		}
	}
}
