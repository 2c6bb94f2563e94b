package agent

import (
	"bytes"
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

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

func samplePatched() *agentwire.Patched {
	return &agentwire.Patched{ID: 7, Image: []byte(".version 7.8\n.target sm_90\n\x00"), DeviceOneIn: 8, DeviceMaxPerSecond: 250,
		Kernels: []agentwire.PatchedKernel{{Name: "_Z9vectorAddPKfS0_Pfi", ParamIndex: 4, ParamOffset: 32}},
		Globals: []agentwire.PatchedGlobal{
			{Name: "p0_map_kp_warps", Kind: agentwire.GlobalRegion, Region: 2},
			{Name: "p0_ring_dev_kp_warps", Kind: agentwire.GlobalRingBlock, Region: 2, Size: 64, Init: bytes.Repeat([]byte{1}, 64)},
			{Name: "p1_map_kp_start", Kind: agentwire.GlobalDeviceAlloc, Region: 0, Size: 4096},
			{Name: "p1_lanes_kp_start", Kind: agentwire.GlobalConst, Value: 2048},
		}}
}

// sassPatched is an answer to an APISASS PATCH: a patch module, no
// kernels, globals in magic order.
// TestPatchedRoundTrip: PATCHED answers, one with kernels and one of the
// SASS route with none, decode to what was encoded.
// TestSASSPatchRequest: an APISASS PATCH carries no image (size 0, inline)
// and decodes as such.
// TestPatchOverSocket runs PATCH through a real server: the image arrives
// whole through its memfd, PATCHED comes back with its image, a *NoPatch
// from the owner reaches the client as is, and the session stays usable.
func TestPatchOverSocket(t *testing.T) {
	o := newOwner(t)
	cb := o.callbacks()
	big := bytes.Repeat([]byte("// a long PTX comment line\n"), 20000) // > MaxPayload: must go by memfd
	cb.Patch = func(p *Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
		switch {
		case bytes.Equal(req.Image, big) && req.Arch == 90:
			a := samplePatched()
			a.Image = append([]byte("patched:"), req.Image[:64]...)
			return a, nil
		case string(req.Image) == "cubin":
			return nil, &agentwire.NoPatch{Code: agentwire.NoPatchNoPTX, Message: "no PTX entry for sm_90"}
		}
		return nil, errors.New("inject failed")
	}
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock")}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	tests := []struct {
		image   []byte
		code    agentwire.NoPatchCode // 0: PATCHED
		message string
	}{
		{big, 0, ""},
		{[]byte("cubin"), agentwire.NoPatchNoPTX, "no PTX entry for sm_90"},
		{[]byte("other"), agentwire.NoPatchError, "inject failed"},
		{big, 0, ""},
	}
	for i, tc := range tests {
		a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: tc.image}, 10*time.Second)
		if tc.code != 0 {
			var np *agentwire.NoPatch
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
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	_, err = sess.Patch(agentwire.PatchRequest{Arch: 80, Image: []byte("x")}, 5*time.Second)
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || np.Code != agentwire.NoPatchDisabled {
		t.Fatalf("got %v, want NOPATCH disabled", err)
	}
}

// TestPatchedImageIsSealed: the PATCHED memfd can be neither resized nor
// written, nor its seals changed.
func TestPatchedImageIsSealed(t *testing.T) {
	o := newOwner(t)
	cb := o.callbacks()
	cb.Patch = func(p *Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) { return samplePatched(), nil }
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock")}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	frame, _ := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 90, Image: []byte("ptx")}, false)
	sess.conn.Write(frame)
	var fds []int
	sess.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	ft, _, err := readFrameFds(sess.conn, &fds)
	defer closeAll(fds)
	if err != nil || ft != agentwire.FramePatched || len(fds) != 1 {
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
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	frame, _ := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 90, Image: make([]byte, 100)}, true)
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
			if err != nil || ft != agentwire.FrameNoPatch {
				t.Fatalf("answer: frame %d, %v", ft, err)
			}
			if np, err := agentwire.UnmarshalNoPatch(p); err != nil || np.Code != agentwire.NoPatchError || !strings.Contains(np.Message, tc.want) {
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
// FuzzKernelQuery: no image makes ParseKernelQuery panic, and what it
// accepts joins back to the same bytes within the bounds.
