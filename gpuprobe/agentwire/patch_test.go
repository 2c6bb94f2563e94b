package agentwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func samplePatched() *Patched {
	return &Patched{ID: 7, Image: []byte(".version 7.8\n.target sm_90\n\x00"), DeviceOneIn: 8, DeviceMaxPerSecond: 250,
		Kernels: []PatchedKernel{{Name: "_Z9vectorAddPKfS0_Pfi", ParamIndex: 4, ParamOffset: 32}},
		Globals: []PatchedGlobal{
			{Name: "p0_map_kp_warps", Kind: GlobalRegion, Region: 2},
			{Name: "p0_ring_dev_kp_warps", Kind: GlobalRingBlock, Region: 2, Size: 64, Init: bytes.Repeat([]byte{1}, 64)},
			{Name: "p1_map_kp_start", Kind: GlobalDeviceAlloc, Region: 0, Size: 4096},
			{Name: "p1_lanes_kp_start", Kind: GlobalConst, Value: 2048},
		}}
}

func sassPatched() *Patched {
	return &Patched{ID: 9, Image: []byte(".version 7.8\n.target sm_90\n\x00"), DeviceMaxPerSecond: 100,
		Globals: []PatchedGlobal{
			{Name: "gpuprobe_sp0_threadhist_map_hist", Kind: GlobalDeviceMap, Region: 5, Size: 10000},
			{Name: "gpuprobe_sp0_threadhist_clock", Kind: GlobalRegion, Region: 1, Value: 64},
		}}
}

func TestPatchedRoundTrip(t *testing.T) {
	for name, a := range map[string]*Patched{"ptx": samplePatched(), "sass, no kernels": sassPatched()} {
		t.Run(name, func(t *testing.T) {
			frame, err := MarshalPatched(a)
			if err != nil {
				t.Fatal(err)
			}
			typ, n, err := ParseFrameHeader(frame)
			if err != nil || typ != FramePatched || int(n) != len(frame)-FrameHeader {
				t.Fatalf("header: %v %d %v", typ, n, err)
			}
			got, size, err := UnmarshalPatched(frame[FrameHeader:])
			if err != nil {
				t.Fatal(err)
			}
			if size != uint64(len(a.Image)) {
				t.Errorf("image size %d, want %d", size, len(a.Image))
			}
			got.Image = a.Image
			if !reflect.DeepEqual(got, a) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, a)
			}
		})
	}
}

func TestSASSPatchRequest(t *testing.T) {
	frame, err := MarshalPatch(&PatchRequest{ID: 4, Arch: 90, API: APISASS}, false)
	if err != nil {
		t.Fatal(err)
	}
	r, flags, size, err := UnmarshalPatch(frame[FrameHeader:])
	if err != nil || r.ID != 4 || r.Arch != 90 || r.API != APISASS || flags != 0 || size != 0 || len(r.Image) != 0 {
		t.Fatalf("got %+v flags %#x size %d: %v", r, flags, size, err)
	}
}

func TestPatchedCorrupt(t *testing.T) {
	frame, err := MarshalPatched(samplePatched())
	if err != nil {
		t.Fatal(err)
	}
	good := frame[FrameHeader:]
	put32 := func(off int, v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	kernelName := patchedHeader + 8
	firstGlobal := patchedHeader + kernelHeader + len("_Z9vectorAddPKfS0_Pfi")
	tests := []struct {
		name string
		p    []byte
		want string
	}{
		{"short", good[:10], "offset 0"},
		{"version 2 header", good[:28], "want at least 32"},
		{"too many kernels", put32(4, 1<<20), "offset 4"},
		{"kernel name length", put32(kernelName, 0), "offset 40: name length 0"},
		{"kernel name past end", put32(kernelName, 60000), "offset 40"},
		{"global kind", put32(firstGlobal, 9), "kind 9 unknown"},
		{"init larger than block", put32(firstGlobal+32+len("p0_map_kp_warps")+28, 65), "65 init bytes"},
		{"truncated", good[:len(good)-1], "offset"},
		{"trailing", append(append([]byte(nil), good...), 0), "1 trailing bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := UnmarshalPatched(tc.p)
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a protocol error with %q", err, tc.want)
			}
		})
	}
}

func TestPatchRequestFrames(t *testing.T) {
	img := []byte("// ptx\n.version 7.0\n")
	tests := []struct {
		name  string
		memfd bool
		edit  func([]byte) []byte
		want  string // "" = valid
	}{
		{"inline", false, nil, ""},
		{"memfd", true, nil, ""},
		{"size mismatch", false, func(p []byte) []byte { return p[:len(p)-1] }, "but 19 bytes follow"},
		{"memfd with inline bytes", true, func(p []byte) []byte { return append(p, 1) }, "want 0"},
		{"unknown flag", false, func(p []byte) []byte { p[12] |= 2; return p }, "offset 12"},
		{"huge", true, func(p []byte) []byte { binary.LittleEndian.PutUint64(p[16:], MaxImage+1); return p }, "offset 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame, err := MarshalPatch(&PatchRequest{ID: 3, Arch: 90, API: APILibrary, Image: img}, tc.memfd)
			if err != nil {
				t.Fatal(err)
			}
			p := append([]byte(nil), frame[FrameHeader:]...)
			if tc.edit != nil {
				p = tc.edit(p)
			}
			r, flags, size, err := UnmarshalPatch(p)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error with %q", err, tc.want)
				}
				return
			}
			if err != nil || r.ID != 3 || r.Arch != 90 || r.API != APILibrary || size != uint64(len(img)) {
				t.Fatalf("got %+v %d %v", r, size, err)
			}
			if tc.memfd != (flags&PatchImageMemfd != 0) || (!tc.memfd && !bytes.Equal(r.Image, img)) {
				t.Fatalf("flags %#x image %q", flags, r.Image)
			}
		})
	}
}

func TestParseKernelQuery(t *testing.T) {
	long := strings.Repeat("k", MaxKernelName+1)
	many := strings.Repeat("k\x00", SASSMaxQuery+1)
	for _, tc := range []struct {
		name, img string
		want      []string
		err       string
	}{
		{"empty", "", nil, ""},
		{"two", "a\x00_Z1bv\x00", []string{"a", "_Z1bv"}, ""},
		{"no NUL", "a\x00b", nil, "name at image offset 2 has no terminating NUL"},
		{"empty name", "a\x00\x00", nil, "name at image offset 2 is 0 bytes"},
		{"too long", long + "\x00", nil, "name at image offset 0 is 4097 bytes, want 1..4096"},
		{"too many", many, nil, "name at image offset 128 is past the 64 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKernelQuery([]byte(tc.img))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzKernelQuery(f *testing.F) {
	f.Add([]byte("a\x00b\x00"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := ParseKernelQuery(b)
		if err != nil {
			return
		}
		var re []byte
		for _, n := range names {
			if len(n) == 0 || len(n) > MaxKernelName {
				t.Fatalf("name of %d bytes accepted", len(n))
			}
			re = append(append(re, n...), 0)
		}
		if len(names) > SASSMaxQuery || !bytes.Equal(re, b) {
			t.Fatalf("%d names do not re-join to the image", len(names))
		}
	})
}
