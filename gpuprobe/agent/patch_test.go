package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// sassPatched is an answer to an APISASS PATCH: a patch module, no
// kernels, globals in magic order.
func sassPatched() *Patched {
	return &Patched{ID: 9, Image: []byte(".version 7.8\n.target sm_90\n\x00"), DeviceMaxPerSecond: 100,
		Globals: []PatchedGlobal{
			{Name: "gpuprobe_sp0_threadhist_map_hist", Kind: GlobalDeviceMap, Region: 5, Size: 10000},
			{Name: "gpuprobe_sp0_threadhist_clock", Kind: GlobalRegion, Region: 1, Value: 64},
		}}
}

// TestPatchedRoundTrip: PATCHED answers, one with kernels and one of the
// SASS route with none, decode to what was encoded.
func TestPatchedRoundTrip(t *testing.T) {
	for name, a := range map[string]*Patched{"ptx": samplePatched(), "sass, no kernels": sassPatched()} {
		t.Run(name, func(t *testing.T) {
			frame, err := MarshalPatched(a)
			if err != nil {
				t.Fatal(err)
			}
			typ, n, err := parseFrameHeader(frame)
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

// TestSASSPatchRequest: an APISASS PATCH carries no image (size 0, inline)
// and decodes as such.
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

// TestPatchOverSocket runs PATCH through a real server: the image arrives
// whole through its memfd, PATCHED comes back with its image, a *NoPatch
// from the owner reaches the client as is, and the session stays usable.
func TestPatchOverSocket(t *testing.T) {
	o := newOwner(t)
	cb := o.callbacks()
	big := bytes.Repeat([]byte("// a long PTX comment line\n"), 20000) // > MaxPayload: must go by memfd
	cb.Patch = func(p *Peer, req *PatchRequest) (*Patched, error) {
		switch {
		case bytes.Equal(req.Image, big) && req.Arch == 90:
			a := samplePatched()
			a.Image = append([]byte("patched:"), req.Image[:64]...)
			return a, nil
		case string(req.Image) == "cubin":
			return nil, &NoPatch{Code: NoPatchNoPTX, Message: "no PTX entry for sm_90"}
		}
		return nil, errors.New("inject failed")
	}
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock")}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := Dial(s.Path(), Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	tests := []struct {
		image   []byte
		code    NoPatchCode // 0: PATCHED
		message string
	}{
		{big, 0, ""},
		{[]byte("cubin"), NoPatchNoPTX, "no PTX entry for sm_90"},
		{[]byte("other"), NoPatchError, "inject failed"},
		{big, 0, ""},
	}
	for i, tc := range tests {
		a, err := sess.Patch(PatchRequest{Arch: 90, API: APIModule, Image: tc.image}, 10*time.Second)
		if tc.code != 0 {
			var np *NoPatch
			if !errors.As(err, &np) || np.Code != tc.code || np.Message != tc.message {
				t.Fatalf("request %d: got %v, want NOPATCH %v %q", i, err, tc.code, tc.message)
			}
			continue
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := samplePatched()
		want.ID, want.Image = uint32(i+1), append([]byte("patched:"), big[:64]...)
		if !reflect.DeepEqual(a, want) {
			t.Fatalf("request %d:\n got %+v\nwant %+v", i, a, want)
		}
	}
}

func TestPatchWithoutCallback(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{})
	sess, err := Dial(s.Path(), Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	_, err = sess.Patch(PatchRequest{Arch: 80, Image: []byte("x")}, 5*time.Second)
	var np *NoPatch
	if !errors.As(err, &np) || np.Code != NoPatchDisabled {
		t.Fatalf("got %v, want NOPATCH disabled", err)
	}
}

// TestPatchedImageIsSealed: the PATCHED memfd can be neither resized nor
// written, nor its seals changed.
func TestPatchedImageIsSealed(t *testing.T) {
	o := newOwner(t)
	cb := o.callbacks()
	cb.Patch = func(p *Peer, req *PatchRequest) (*Patched, error) { return samplePatched(), nil }
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock")}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := Dial(s.Path(), Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	frame, _ := MarshalPatch(&PatchRequest{ID: 1, Arch: 90, Image: []byte("ptx")}, false)
	sess.conn.Write(frame)
	var fds []int
	sess.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	ft, _, err := readFrameFds(sess.conn, &fds)
	defer closeAll(fds)
	if err != nil || ft != FramePatched || len(fds) != 1 {
		t.Fatalf("answer: frame %d, %d descriptors, %v", ft, len(fds), err)
	}
	seals, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0)
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if err != nil || seals != want {
		t.Fatalf("seals %#x, %v; want %#x", seals, err, want)
	}
	if _, err := unix.Pwrite(fds[0], []byte("x"), 0); err == nil {
		t.Fatal("the patched image could be written")
	}
}

// sendWithFds writes b with n copies of fd attached.
func sendWithFds(c *net.UnixConn, b []byte, fd, n int) error {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = fd
	}
	var oob []byte
	if n > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}

// TestPatchImageNotMemfd: a PATCH whose image descriptor is missing, no
// shmem file (reads from it could block) or short is answered NOPATCH and
// reported to PatchRefused.
func TestPatchImageNotMemfd(t *testing.T) {
	disk, err := os.Open("/etc/passwd") // regular, allocated, not shmem
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	short, err := memfdWith("short", []byte("12"))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	tests := []struct {
		name string
		fd   int // -1: none
		want string
	}{
		{"no descriptor", -1, "carried 0 descriptors"},
		{"a file on disk", int(disk.Fd()), "no memfd"},
		{"a memfd shorter than image_size", int(short.Fd()), "image_size says 100"},
	}
	o := newOwner(t)
	cb := o.callbacks()
	var refused atomic.Int32
	cb.PatchRefused = func(p *Peer, id uint32, err error) { refused.Add(1) }
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock")}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := Dial(s.Path(), Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	frame, _ := MarshalPatch(&PatchRequest{ID: 1, Arch: 90, Image: make([]byte, 100)}, true)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			if tc.fd >= 0 {
				n = 1
			}
			if err := sendWithFds(sess.conn, frame, tc.fd, n); err != nil {
				t.Fatal(err)
			}
			sess.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			ft, p, err := readFrameFds(sess.conn, nil)
			if err != nil || ft != FrameNoPatch {
				t.Fatalf("answer: frame %d, %v", ft, err)
			}
			if np, err := UnmarshalNoPatch(p); err != nil || np.Code != NoPatchError || !strings.Contains(np.Message, tc.want) {
				t.Fatalf("NOPATCH %+v %v, want %q", np, err, tc.want)
			}
			if n := refused.Load(); n != int32(i+1) {
				t.Fatalf("PatchRefused called %d times, want %d", n, i+1)
			}
		})
	}
}

// TestParseKernelQuery: an APISASSKernels image splits into its names, and
// each way to break the format is refused naming the offset.
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

// FuzzKernelQuery: no image makes ParseKernelQuery panic, and what it
// accepts joins back to the same bytes within the bounds.
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
