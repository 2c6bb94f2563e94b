package record

import (
	"strings"
	"testing"
)

func TestHostCallRoundTrip(t *testing.T) {
	h := HostCall{PID: 7, TID: 8, EnterNS: 100, ExitNS: 250, API: HostCuLaunchKernel, Flags: HostCallReturned, Ret: -3}
	h.Args[0] = 0xdeadbeef
	h.Args[4] = 4096
	h.Args[5] = 0x55
	h.SetDims([3]uint32{65536, 2, 3}, [3]uint32{256, 1, 4})
	b := h.Append(nil)
	if len(b) != HostCallSize {
		t.Fatalf("size %d, want %d", len(b), HostCallSize)
	}
	var got HostCall
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("round trip: got %+v, want %+v", got, h)
	}
	if g := got.Grid(); g != [3]uint32{65536, 2, 3} {
		t.Errorf("Grid() = %v", g)
	}
	if bl := got.Block(); bl != [3]uint32{256, 1, 4} {
		t.Errorf("Block() = %v", bl)
	}
}

func TestHostCallDecodeErrors(t *testing.T) {
	good := (&HostCall{API: HostCudaMemcpy, EnterNS: 5, ExitNS: 6}).Append(nil)
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:40] }, "size"},
		{"unknown api", func(b []byte) []byte { put16(b, 32, 999); return b }, "api"},
		{"api zero", func(b []byte) []byte { put16(b, 32, 0); return b }, "offset 32"},
		{"exit before enter", func(b []byte) []byte { put64(b, 24, 1); return b }, "exit_ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mutate(append([]byte(nil), good...))
			var h HostCall
			err := h.Decode(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestHostAPICategories(t *testing.T) {
	tests := []struct {
		api    HostAPI
		cat    HostCategory
		async  bool
		driver bool
		name   string
	}{
		{HostCudaLaunchKernel, HostCatLaunch, true, false, "cudaLaunchKernel"},
		{HostCuLaunchKernelExPtsz, HostCatLaunch, true, true, "cuLaunchKernelEx_ptsz"},
		{HostCudaMemcpy, HostCatMemcpy, false, false, "cudaMemcpy"},
		{HostCuMemcpyHtoDAsync, HostCatMemcpy, true, true, "cuMemcpyHtoDAsync_v2"},
		{HostCuMemAlloc, HostCatAlloc, false, true, "cuMemAlloc_v2"},
		{HostCudaFreeAsync, HostCatFree, true, false, "cudaFreeAsync"},
		{HostCuCtxSynchronize, HostCatSync, false, true, "cuCtxSynchronize"},
		{HostCudaGraphLaunch, HostCatGraphLaunch, true, false, "cudaGraphLaunch"},
		{HostCudaStreamBeginCapturePtsz, HostCatCapture, false, false, "cudaStreamBeginCapture_ptsz"},
		{HostCuStreamBeginCaptureV2, HostCatCapture, false, true, "cuStreamBeginCapture_v2"},
		{HostCuStreamEndCapture, HostCatCapture, false, true, "cuStreamEndCapture"},
		{HostCudaEventRecordWithFlagsPtsz, HostCatEvent, false, false, "cudaEventRecordWithFlags_ptsz"},
		{HostCuStreamWaitEvent, HostCatEvent, false, true, "cuStreamWaitEvent"},
		{HostCudaStreamCreateWithFlags, HostCatStream, false, false, "cudaStreamCreateWithFlags"},
		{HostCuStreamCreateWithPriority, HostCatStream, false, true, "cuStreamCreateWithPriority"},
		{HostCuStreamDestroyV2, HostCatStream, false, true, "cuStreamDestroy_v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := tt.api.Category(); c != tt.cat {
				t.Errorf("Category() = %v, want %v", c, tt.cat)
			}
			if a := tt.api.Async(); a != tt.async {
				t.Errorf("Async() = %v, want %v", a, tt.async)
			}
			if d := tt.api.Driver(); d != tt.driver {
				t.Errorf("Driver() = %v, want %v", d, tt.driver)
			}
			if s := tt.api.String(); s != tt.name {
				t.Errorf("String() = %q, want %q", s, tt.name)
			}
		})
	}
	seen := map[string]bool{}
	for _, a := range HostAPIs() {
		if a.Category() == HostCatUnknown {
			t.Errorf("%v: no category", a)
		}
		if seen[a.String()] {
			t.Errorf("%v listed twice", a)
		}
		seen[a.String()] = true
	}
	for _, a := range HostAPIs() {
		if a.Category() == HostCatCapture && a.CaptureBegins() == a.CaptureEnds() {
			t.Errorf("%v: CaptureBegins() = CaptureEnds() = %v", a, a.CaptureEnds())
		}
		if a.Category() != HostCatCapture && (a.CaptureBegins() || a.CaptureEnds()) {
			t.Errorf("%v: not a capture API, but begins or ends one", a)
		}
		if ends := strings.Contains(a.String(), "EndCapture"); ends != a.CaptureEnds() {
			t.Errorf("%v: CaptureEnds() = %v", a, a.CaptureEnds())
		}
		if waits := strings.Contains(a.String(), "WaitEvent"); waits != a.WaitsEvent() {
			t.Errorf("%v: WaitsEvent() = %v", a, a.WaitsEvent())
		}
	}
	if len(seen) != len(hostAPINames) {
		t.Errorf("HostAPIs() lists %d of %d", len(seen), len(hostAPINames))
	}
}
