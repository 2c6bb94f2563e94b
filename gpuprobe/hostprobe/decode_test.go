package hostprobe

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
)

// callSample builds a call_event sample as bpf/cudahost.bpf.c writes it.
func callSample(api record.HostAPI, flags uint16, enter, exit, ret, out uint64, regs [6]uint64, extra [5]uint64) []byte {
	s := make([]byte, callEventSize)
	le := binary.LittleEndian
	le.PutUint16(s[0:], eventCall)
	le.PutUint16(s[2:], uint16(api))
	le.PutUint16(s[4:], flags)
	le.PutUint32(s[8:], 4242)
	le.PutUint32(s[12:], 4243)
	le.PutUint64(s[16:], enter)
	le.PutUint64(s[24:], exit)
	le.PutUint64(s[32:], ret)
	le.PutUint64(s[40:], out)
	for i, r := range regs {
		le.PutUint64(s[48+8*i:], r)
	}
	for i, x := range extra {
		le.PutUint64(s[96+8*i:], x)
	}
	return s
}

func nameSample(api uint16, flags uint16, fn, mod uint64, nameLen int32, name string) []byte {
	s := make([]byte, nameEventSize)
	le := binary.LittleEndian
	le.PutUint16(s[0:], eventName)
	le.PutUint16(s[2:], api)
	le.PutUint16(s[4:], flags)
	le.PutUint32(s[8:], 4242)
	le.PutUint64(s[40:], fn)
	le.PutUint64(s[48:], mod)
	le.PutUint32(s[56:], uint32(nameLen))
	copy(s[64:], name)
	return s
}

func TestDecodeCall(t *testing.T) {
	garbage := uint64(0xdeadbeef) << 32 // undefined upper halves of 32-bit arguments
	for _, tc := range []struct {
		name      string
		api       record.HostAPI
		ret, out  uint64
		flags     uint16
		regs      [6]uint64
		extra     [5]uint64
		wantArgs  [8]uint64
		wantRet   int32
		wantFlags uint16
	}{
		{name: "cudaMemcpy HtoH", api: record.HostCudaMemcpy, regs: [6]uint64{1, 2, 3, garbage | 0},
			wantArgs: args(1, 2, 3, uint64(record.MemcpyHostToHost))},
		{name: "cudaMemcpy DtoD", api: record.HostCudaMemcpy, regs: [6]uint64{1, 2, 3, garbage | 3},
			wantArgs: args(1, 2, 3, uint64(record.MemcpyDeviceToDevice))},
		{name: "cudaMemcpyAsync default", api: record.HostCudaMemcpyAsync, regs: [6]uint64{1, 2, 3, 4, 9},
			wantArgs: args(1, 2, 3, uint64(record.MemcpyUnknown), 9)},
		{name: "cudaMemcpy kind out of range", api: record.HostCudaMemcpy, regs: [6]uint64{1, 2, 3, 77},
			wantArgs: args(1, 2, 3, uint64(record.MemcpyUnknown))},
		{name: "cuMemcpyDtoHAsync", api: record.HostCuMemcpyDtoHAsync, regs: [6]uint64{1, 2, 3, 8},
			wantArgs: args(1, 2, 3, uint64(record.MemcpyDeviceToHost), 8)},
		{name: "cuLaunchKernel masks 32-bit words", api: record.HostCuLaunchKernel,
			regs:     [6]uint64{0xf00, garbage | 7, garbage | 3, garbage | 2, garbage | 64, garbage | 6},
			extra:    [5]uint64{garbage | 5, garbage | 1234, 0xabc0},
			wantArgs: args(0xf00, 7|3<<32, 2|64<<32, 6|5<<32, 1234, 0xabc0)},
		{name: "cuLaunchKernelEx masks shmem", api: record.HostCuLaunchKernelEx, regs: [6]uint64{0xcf6, 0xf00},
			extra:    [5]uint64{7 | 3<<32, 2 | 64<<32, 6 | 5<<32, garbage | 99, 0xabc0},
			wantArgs: args(0xf00, 7|3<<32, 2|64<<32, 6|5<<32, 99, 0xabc0)},
		{name: "alloc success", api: record.HostCuMemAllocAsync, out: 0x7000, regs: [6]uint64{0xa, 4096, 0x5},
			wantArgs: args(4096, 0x7000, 0, 0, 0x5)},
		{name: "alloc failure has no pointer", api: record.HostCudaMalloc, ret: 2, out: 0x7000, regs: [6]uint64{0xa, 4096},
			wantArgs: args(4096, 0), wantRet: 2},
		{name: "ret sign-extended from 32 bits", api: record.HostCuCtxSynchronize, ret: garbage | 0xfffffffe, regs: [6]uint64{0x55},
			wantArgs: args(), wantRet: -2},
		{name: "faulted flag kept", api: record.HostCuLaunchKernelEx, flags: record.HostCallArgsFaulted | 0x100, regs: [6]uint64{0, 0xf00},
			wantArgs: args(0xf00), wantFlags: record.HostCallArgsFaulted},
		{name: "graph launch", api: record.HostCuGraphLaunchPtsz, regs: [6]uint64{0x6a, 0x5e},
			wantArgs: args(0x6a, 0, 0, 0, 0, 0x5e)},
		{name: "begin capture masks the mode", api: record.HostCuStreamBeginCaptureV2, regs: [6]uint64{0xca0, garbage | 2},
			wantArgs: args(0xca0, 2)},
		{name: "begin capture v1", api: record.HostCuStreamBeginCapture, regs: [6]uint64{0xca1, 0x77},
			wantArgs: args(0xca1)},
		{name: "begin capture to graph", api: record.HostCudaStreamBeginCaptureToGraphPtsz, regs: [6]uint64{0xca2, 0x6a2, 3, 4, 5, 1},
			wantArgs: args(0xca2, 0x6a2)},
		{name: "end capture", api: record.HostCudaStreamEndCapture, regs: [6]uint64{0xca3, 0x7ff0},
			wantArgs: args(0xca3)},
		{name: "event record", api: record.HostCuEventRecordPtsz, regs: [6]uint64{0xe0, 0x5a, 0x77},
			wantArgs: args(0xe0, 0x5a)},
		{name: "stream wait masks the flags", api: record.HostCudaStreamWaitEvent, regs: [6]uint64{0x5b, 0xe1, garbage | 1},
			wantArgs: args(0x5b, 0xe1, 1)},
		{name: "stream create with flags and priority", api: record.HostCuStreamCreateWithPriority, out: 0x5c,
			regs: [6]uint64{0x7ff0, garbage | 1, garbage | 0xfffffffb}, wantArgs: args(0x5c, 1, 0xfffffffb)}, // priority -5
		{name: "failed stream create has no handle", api: record.HostCudaStreamCreateWithFlags, ret: 1, out: 0x5c,
			regs: [6]uint64{0x7ff0, garbage | 1}, wantArgs: args(0, 1), wantRet: 1},
		{name: "cudaStreamCreate has no flags", api: record.HostCudaStreamCreate, out: 0x5d, regs: [6]uint64{0x7ff0, 0x77, 0x78},
			wantArgs: args(0x5d)},
		{name: "stream destroy", api: record.HostCuStreamDestroyV2, regs: [6]uint64{0x5e, 0x77},
			wantArgs: args(0x5e)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := decodeEvent(nil, callSample(tc.api, tc.flags, 10, 20, tc.ret, tc.out, tc.regs, tc.extra))
			if err != nil {
				t.Fatalf("decodeEvent: %v", err)
			}
			var h record.HostCall
			if err := h.Decode(rec); err != nil {
				t.Fatalf("HostCall.Decode: %v", err)
			}
			want := record.HostCall{PID: 4242, TID: 4243, EnterNS: 10, ExitNS: 20, API: tc.api,
				Flags: record.HostCallReturned | tc.wantFlags, Ret: tc.wantRet, Args: tc.wantArgs}
			if h != want {
				t.Errorf("got  %+v\nwant %+v", h, want)
			}
		})
	}
}

func TestDecodeName(t *testing.T) {
	long := strings.Repeat("n", 300)
	for _, tc := range []struct {
		name    string
		nameLen int32
		text    string
		want    string
		cut     bool
	}{
		{"short", 5, "_Z1f", "_Z1f", false},
		{"exactly the cap", nameCap + 1, long[:nameCap], long[:nameCap], false},
		{"one over the cap", nameCap + 2, long[:nameCap+1], long[:nameCap], true},
		{"a length beyond the buffer", 5000, long, long[:nameCap], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := decodeEvent(nil, nameSample(apiLibraryGetKernel, 0, 0x77, 0x88, tc.nameLen, tc.text))
			if err != nil {
				t.Fatalf("decodeEvent: %v", err)
			}
			var k record.KernelName
			if err := k.Decode(rec); err != nil {
				t.Fatalf("KernelName.Decode: %v", err)
			}
			want := record.KernelName{Function: 0x77, Module: 0x88, PID: 4242, Name: tc.want, Truncated: tc.cut}
			if k != want {
				t.Errorf("got %+v, want %+v", k, want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	ok := callSample(record.HostCudaFree, 0, 1, 2, 0, 0, [6]uint64{}, [5]uint64{})
	for _, tc := range []struct {
		name   string
		sample []byte
		field  string
		reason string
	}{
		{"empty", nil, "kind", "too short"},
		{"short call", ok[:100], "kind", "call event needs 136 bytes, sample has 100"},
		{"short name", nameSample(apiModuleGetFunction, 0, 1, 2, 3, "ab")[:64], "kind", "name event needs 312"},
		{"unknown kind", []byte{9, 0, 0, 0}, "kind", "unknown event kind 9"},
		{"unknown API", callSample(99, 0, 1, 2, 0, 0, [6]uint64{}, [5]uint64{}), "api", "unknown API 99"},
		{"exit before enter", callSample(record.HostCudaFree, 0, 5, 4, 0, 0, [6]uint64{}, [5]uint64{}), "exit_ns", "4 is before enter_ns 5"},
		{"unknown name function", nameSample(7, 0, 1, 2, 3, "ab"), "api", "unknown name function 7"},
		{"unreadable handle", nameSample(apiModuleGetFunction, record.HostCallArgsFaulted, 0, 2, 3, "ab"), "function", "could not be read"},
		{"unreadable name", nameSample(apiModuleGetFunction, 0, 1, 2, -14, ""), "name_len", "unreadable or empty (-14)"},
		{"empty name", nameSample(apiModuleGetFunction, 0, 1, 2, 1, ""), "name_len", "unreadable or empty (1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := decodeEvent(dst, tc.sample)
			var ee *EventError
			if !errors.As(err, &ee) || ee.Field != tc.field || !strings.Contains(ee.Reason, tc.reason) {
				t.Fatalf("decodeEvent: %v, want an EventError on field %s with %q", err, tc.field, tc.reason)
			}
			if string(out) != "keep" {
				t.Errorf("dst changed to %q on error", out)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name   string
		sample []byte
	}{
		{"launch", callSample(record.HostCuLaunchKernel, 0, 1, 2, 0, 0, [6]uint64{1, 2, 3, 4, 5, 6}, [5]uint64{7, 8, 9})},
		{"memcpy", callSample(record.HostCudaMemcpyAsync, 0, 1, 2, 0, 0, [6]uint64{1, 2, 3, 1, 5}, [5]uint64{})},
		{"name", nameSample(apiModuleGetFunction, 0, 1, 2, 17, "_Z6vecAddPfS_S_i")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 512)
			for b.Loop() {
				var err error
				if buf, err = decodeEvent(buf[:0], bc.sample); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
