package agent

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// Patch sends a PATCH (the image in a memfd) and waits at most timeout for
// the answer: the PATCHED description with its image, or a *NoPatch error.
// A timeout leaves the session usable: a late answer to this request is
// skipped by the next Patch (answers carry the request id).
func (s *Session) Patch(req agentwire.PatchRequest, timeout time.Duration) (*agentwire.Patched, error) {
	s.nextReq++
	req.ID = s.nextReq
	frame, err := agentwire.MarshalPatch(&req, true)
	if err != nil {
		return nil, err
	}
	f, err := memfdWith("gpuprobe-image", req.Image)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deadline := time.Now().Add(timeout)
	s.conn.SetDeadline(deadline)
	defer s.conn.SetDeadline(time.Time{})
	n, _, err := s.conn.WriteMsgUnix(frame, unix.UnixRights(int(f.Fd())), nil)
	if err == nil && n < len(frame) {
		_, err = s.conn.Write(frame[n:])
	}
	if err != nil {
		return nil, fmt.Errorf("agent: sending PATCH %d: %w", req.ID, err)
	}
	for {
		var fds []int
		t, p, err := readFrameFds(s.conn, &fds)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("agent: waiting for the answer to PATCH %d: %w", req.ID, err)
		}
		switch t {
		case agentwire.FrameNoPatch:
			closeAll(fds)
			np, err := agentwire.UnmarshalNoPatch(p)
			if err != nil {
				return nil, err
			}
			if np.ID != req.ID {
				continue // a late answer to an earlier request
			}
			return nil, np
		case agentwire.FramePatched:
			a, size, err := agentwire.UnmarshalPatched(p)
			if err != nil || a.ID != req.ID {
				closeAll(fds)
				if err != nil {
					return nil, err
				}
				continue
			}
			if len(fds) != 1 {
				closeAll(fds)
				return nil, &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("PATCHED %d carried %d descriptors, want 1", a.ID, len(fds))}
			}
			img := os.NewFile(uintptr(fds[0]), "gpuprobe-patched")
			a.Image = make([]byte, size)
			_, err = img.ReadAt(a.Image, 0)
			img.Close()
			if err != nil {
				return nil, fmt.Errorf("agent: reading the %d-byte patched image of PATCH %d: %w", size, a.ID, err)
			}
			return a, nil
		case agentwire.FrameError:
			closeAll(fds)
			return nil, agentwire.UnmarshalError(p)
		default:
			closeAll(fds)
			return nil, &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("answer to PATCH %d is frame type %d", req.ID, t)}
		}
	}
}
