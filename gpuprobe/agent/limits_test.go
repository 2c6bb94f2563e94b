package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// sendMemfd sends a PATCH whose image_size is size, with a memfd of
// length bytes of which the first filled are written (the rest is a
// hole), and returns the answer.
func sendMemfd(t *testing.T, sess *Session, size uint64, length, filled int64) (*agentwire.Patched, error) {
	t.Helper()
	fd, err := unix.MemfdCreate("test-image", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, length); err != nil {
		t.Fatal(err)
	}
	if filled > 0 {
		if _, err := unix.Pwrite(fd, bytes.Repeat([]byte{'.'}, int(filled)), 0); err != nil {
			t.Fatal(err)
		}
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, 7)
	p = le.AppendUint32(p, 80)
	p = le.AppendUint32(p, uint32(agentwire.APIModule))
	p = le.AppendUint32(p, agentwire.PatchImageMemfd)
	p = le.AppendUint64(p, size)
	if _, _, err := sess.conn.WriteMsgUnix(agentwire.AppendFrame(nil, agentwire.FramePatch, p), unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	sess.conn.SetDeadline(time.Now().Add(10 * time.Second))
	var fds []int
	ft, body, err := readFrameFds(sess.conn, &fds)
	closeAll(fds)
	if err != nil {
		t.Fatal(err)
	}
	if ft == agentwire.FrameNoPatch {
		np, err := agentwire.UnmarshalNoPatch(body)
		if err != nil {
			t.Fatal(err)
		}
		return nil, np
	}
	a, _, err := agentwire.UnmarshalPatched(body)
	return a, err
}

// TestPatchImageLimits: image memfds that are sparse, longer than
// MaxImage or over Options.ImageMemory are refused before they are
// copied, answered NOPATCH and reported to PatchRefused; a real one
// reaches Patch whole.
func TestPatchImageLimits(t *testing.T) {
	o := newOwner(t)
	cb := o.callbacks()
	var got atomic.Int64 // bytes of the last image Patch saw
	cb.Patch = func(p *Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
		got.Store(int64(len(req.Image)))
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchNoKernel, Message: "seen"}
	}
	var refused atomic.Int32
	cb.PatchRefused = func(p *Peer, id uint32, err error) { refused.Add(1) }
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock"), ImageMemory: 4 << 20, ImageWait: 10 * time.Millisecond}, cb)
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
		name           string
		size           uint64
		length, filled int64
		want           string // in the NOPATCH message; "seen": reached Patch
	}{
		{"real", 3 << 20, 3 << 20, 3 << 20, "seen"},
		{"sparse", 3 << 20, 3 << 20, 4096, "sparse"},
		{"longer than MaxImage", 4096, agentwire.MaxImage + 1, 4096, "MaxImage"},
		{"over ImageMemory", 5 << 20, 5 << 20, 5 << 20, "ImageMemory"},
		{"shorter than image_size", 8192, 4096, 4096, "image_size says"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got.Store(-1)
			before := refused.Load()
			_, err := sendMemfd(t, sess, tt.size, tt.length, tt.filled)
			var np *agentwire.NoPatch
			if !errors.As(err, &np) || !strings.Contains(np.Message, tt.want) {
				t.Fatalf("answer %v, want NOPATCH saying %q", err, tt.want)
			}
			if tt.want == "seen" {
				if got.Load() != int64(tt.size) {
					t.Errorf("Patch saw %d bytes, want %d", got.Load(), tt.size)
				}
				return
			}
			if got.Load() != -1 || refused.Load() != before+1 {
				t.Errorf("Patch saw %d bytes, PatchRefused called %d times; want not called, once", got.Load(), refused.Load()-before)
			}
		})
	}
	if u := s.images.Used(); u != 0 {
		t.Errorf("%d bytes of image memory still held", u)
	}
}
