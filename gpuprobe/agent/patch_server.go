package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// DefaultPatchTimeout bounds the server's read of one PATCH and write of
// its answer (Options.PatchTimeout).
const DefaultPatchTimeout = 10 * time.Second

// session is a connection after WELCOME.
type session struct {
	peer    *Peer
	proc    *peerProc
	regions []fileID // the shm regions handed over
	opaque  int      // regions whose mapping cannot be checked (kernel maps)
}

// patchFds is the most descriptors a frame after WELCOME may carry: a
// PATCH's image memfd. It is also all a client can make the server hold.
const patchFds = 1

// serve serves a connection after WELCOME: PATCH requests, one at a
// time, until the client closes. Any other frame is a protocol error that
// ends the session, and so are a frame with more than patchFds
// descriptors and one whose rest does not follow its first byte within
// FrameTimeout. A session silent for IdleTimeout whose process maps none
// of its regions is ended.
func (s *Server) serve(c *net.UnixConn, ss *session, log *zap.Logger) {
	peer := ss.peer
	for {
		var fds []int
		t, p, err := readFrameLimited(c, &fds, frameLimits{maxFds: patchFds,
			idle: time.Now().Add(s.opts.IdleTimeout), rest: s.opts.FrameTimeout})
		if errors.Is(err, errIdle) {
			if s.live(ss, log) {
				continue
			}
			s.reclaimed.Add(1)
			log.Info("agent: idle session reclaimed: its process maps none of its regions", zap.Duration("idle", s.opts.IdleTimeout))
			return
		}
		if err != nil {
			closeAll(fds)
			var pe *ProtocolError
			if errors.As(err, &pe) {
				c.SetWriteDeadline(time.Now().Add(s.opts.HandshakeTimeout))
				s.refuse(c, pe.Code, "frame after WELCOME: "+pe.Message)
				log.Warn("agent: bad frame after the handshake; closing", zap.Error(err))
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
				log.Debug("agent: connection ended", zap.Error(err))
			}
			return
		}
		if t != FramePatch {
			closeAll(fds)
			c.SetWriteDeadline(time.Now().Add(s.opts.HandshakeTimeout))
			s.refuse(c, CodeProtocol, fmt.Sprintf("frame type %d after WELCOME: only PATCH (%d) is expected", t, FramePatch))
			log.Warn("agent: unexpected frame after the handshake; closing", zap.Uint16("type", uint16(t)))
			return
		}
		deadline := time.Now().Add(s.opts.PatchTimeout)
		id, held, err := s.holdImage(p, deadline)
		req := PatchRequest{ID: id}
		if err != nil {
			closeAll(fds)
		} else {
			req, err = s.readPatch(p, fds)
		}
		var frame []byte
		var out *os.File
		if err == nil {
			frame, out = s.answer(peer, &req, log)
		} else {
			s.patchRejected.Add(1)
			if s.cb.PatchRejected != nil {
				s.cb.PatchRejected(peer, err)
			}
			log.Warn("agent: bad PATCH", zap.Error(err))
			frame = MarshalNoPatch(&NoPatch{ID: req.ID, Code: NoPatchError, Message: err.Error()})
		}
		c.SetWriteDeadline(deadline)
		err = s.send(c, frame, out)
		if out != nil {
			out.Close()
		}
		s.images.Release(held)
		if err != nil {
			log.Warn("agent: sending the PATCH answer failed; closing", zap.Error(err))
			return
		}
	}
}

// live says whether a silent session is still in use: its process maps
// one of its regions, or that cannot be told.
func (s *Server) live(ss *session, log *zap.Logger) bool {
	if len(ss.regions) == 0 {
		return ss.opaque > 0
	}
	mapped, err := ss.proc.mapsAny(ss.regions)
	if errors.Is(err, errPeerGone) {
		return false
	}
	if err != nil {
		log.Debug("agent: cannot tell whether an idle session's regions are mapped; keeping it", zap.Error(err))
		return true
	}
	return mapped
}

// holdImage reserves a PATCH's image_size bytes of Options.MaxImageBytes,
// waiting half the time to the deadline at most (the rest is for
// answering); the caller releases them once the answer is sent. A payload that does not decode holds nothing (readPatch
// reports it).
func (s *Server) holdImage(p []byte, deadline time.Time) (id uint32, n int64, err error) {
	req, _, size, err := UnmarshalPatch(p)
	if err != nil {
		return req.ID, 0, nil
	}
	n = int64(size)
	if n > s.opts.MaxImageBytes {
		return req.ID, 0, fmt.Errorf("PATCH %d: its %d-byte image exceeds the %d bytes of images the server holds at once", req.ID, n, s.opts.MaxImageBytes)
	}
	ctx, cancel := context.WithDeadline(s.ctx, deadline.Add(-time.Until(deadline)/2))
	defer cancel()
	if err := s.images.Acquire(ctx, n); err != nil {
		return req.ID, 0, fmt.Errorf("PATCH %d: no room for its %d-byte image in %v (the server holds %d bytes of images at once): %w",
			req.ID, n, s.opts.PatchTimeout/2, s.opts.MaxImageBytes, err)
	}
	return req.ID, n, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// readPatch decodes a PATCH and reads its image (inline or from its memfd).
// It closes every descriptor.
func (s *Server) readPatch(p []byte, fds []int) (PatchRequest, error) {
	defer closeAll(fds)
	req, flags, size, err := UnmarshalPatch(p)
	if err != nil {
		return req, err
	}
	want := 0
	if flags&PatchImageMemfd != 0 {
		want = 1
	}
	if len(fds) != want {
		return req, fmt.Errorf("PATCH %d carried %d descriptors, want %d", req.ID, len(fds), want)
	}
	if want == 0 {
		req.Image = append([]byte(nil), req.Image...)
		return req, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		return req, fmt.Errorf("PATCH %d: fstat of the image memfd: %w", req.ID, err)
	}
	// Only shmem files (memfds) have seals: a FIFO, socket or FUSE file
	// could make the reads below block.
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return req, fmt.Errorf("PATCH %d: the image descriptor (mode %#o) is not a memfd", req.ID, st.Mode)
	}
	if uint64(st.Size) < size {
		return req, fmt.Errorf("PATCH %d: image memfd is %d bytes (mode %#o), image_size says %d", req.ID, st.Size, st.Mode, size)
	}
	req.Image = make([]byte, size)
	for off := 0; off < len(req.Image); {
		n, err := unix.Pread(fds[0], req.Image[off:], int64(off))
		if err != nil {
			return req, fmt.Errorf("PATCH %d: reading the image memfd at offset %d: %w", req.ID, off, err)
		}
		if n == 0 {
			return req, fmt.Errorf("PATCH %d: image memfd ends at offset %d of %d", req.ID, off, size)
		}
		off += n
	}
	return req, nil
}

// answer runs the owner's Patch callback and encodes PATCHED (with the
// memfd holding the image) or NOPATCH.
func (s *Server) answer(peer *Peer, req *PatchRequest, log *zap.Logger) ([]byte, *os.File) {
	no := func(code NoPatchCode, msg string) ([]byte, *os.File) {
		return MarshalNoPatch(&NoPatch{ID: req.ID, Code: code, Message: msg}), nil
	}
	if s.cb.Patch == nil {
		return no(NoPatchDisabled, "this server patches nothing")
	}
	a, err := s.cb.Patch(peer, req)
	if err != nil {
		var np *NoPatch
		if errors.As(err, &np) {
			return no(np.Code, np.Message)
		}
		return no(NoPatchError, err.Error())
	}
	a.ID = req.ID
	frame, err := MarshalPatched(a)
	if err != nil {
		log.Warn("agent: encoding PATCHED failed", zap.Error(err))
		return no(NoPatchError, err.Error())
	}
	f, err := memfdWith("gpuprobe-patched", a.Image)
	if err != nil {
		log.Warn("agent: memfd for the patched image failed", zap.Error(err))
		return no(NoPatchError, err.Error())
	}
	return frame, f
}

// imageSeals make a memfd's contents final: no shrinking, growing or
// writing, and no changing the seals.
const imageSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL

// memfdWith returns a memfd holding b, sealed with imageSeals.
func memfdWith(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("agent: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: writing %d bytes to a memfd: %w", len(b), err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, imageSeals); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: sealing a memfd: %w", err)
	}
	return f, nil
}

// send writes a frame, with f's descriptor when f is not nil.
func (s *Server) send(c *net.UnixConn, frame []byte, f *os.File) error {
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	n, _, err := c.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return fmt.Errorf("sendmsg: %w", err)
	}
	if n < len(frame) {
		if _, err := c.Write(frame[n:]); err != nil {
			return fmt.Errorf("writing the rest of a frame: %w", err)
		}
	}
	return nil
}
