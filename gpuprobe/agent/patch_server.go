package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/internal/procread"
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
			var pe *agentwire.ProtocolError
			if errors.As(err, &pe) {
				c.SetWriteDeadline(time.Now().Add(s.opts.HandshakeTimeout))
				s.refuse(c, pe.Code, "frame after WELCOME: "+pe.Message)
				log.Warn("agent: bad frame after the handshake; closing", zap.Error(err))
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
				log.Debug("agent: connection ended", zap.Error(err))
			}
			return
		}
		if t != agentwire.FramePatch {
			closeAll(fds)
			c.SetWriteDeadline(time.Now().Add(s.opts.HandshakeTimeout))
			s.refuse(c, agentwire.CodeProtocol, fmt.Sprintf("frame type %d after WELCOME: only PATCH (%d) is expected", t, agentwire.FramePatch))
			log.Warn("agent: unexpected frame after the handshake; closing", zap.Uint16("type", uint16(t)))
			return
		}
		deadline := time.Now().Add(s.opts.PatchTimeout)
		req, release, err := s.readPatch(p, fds)
		var frame []byte
		var out *os.File
		if err == nil {
			frame, out = s.answer(peer, &req, log)
			release()
		} else {
			log.Warn("agent: bad PATCH", zap.Error(err))
			frame = agentwire.MarshalNoPatch(&agentwire.NoPatch{ID: req.ID, Code: agentwire.NoPatchError, Message: err.Error()})
			if s.cb.PatchRefused != nil {
				s.cb.PatchRefused(peer, req.ID, err)
			}
		}
		req.Image = nil
		c.SetWriteDeadline(deadline)
		err = s.send(c, frame, out)
		if out != nil {
			out.Close()
		}
		if err != nil {
			log.Warn("agent: sending the PATCH answer failed; closing", zap.Error(err))
			return
		}
	}
}

// live says whether a silent session is still in use: its process maps
// one of its regions within the first procread.MaxMapsBytes of its maps,
// or /proc cannot tell (not readable).
func (s *Server) live(ss *session, log *zap.Logger) bool {
	if len(ss.regions) == 0 {
		return ss.opaque > 0
	}
	mapped, cut, err := s.idle.mapped(ss.proc, ss.regions, time.Now())
	if errors.Is(err, errPeerGone) {
		return false
	}
	if err != nil {
		log.Debug("agent: cannot tell whether an idle session's regions are mapped; keeping it", zap.Error(err))
		return true
	}
	if cut {
		s.mapsCut.Add(1)
		log.Warn("agent: an idle session's process has a /proc/PID/maps past the read bound before any of its regions; ending the session",
			zap.Int64("bound", procread.MaxMapsBytes))
	}
	return mapped
}

// sealable says whether fd is a shmem file (a memfd), which alone has seals.
func sealable(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	return err == nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// DefaultImageMemory is Options.ImageMemory's default: two images of
// the largest size (MaxImage) at once.
const DefaultImageMemory = 2 * agentwire.MaxImage

// readPatch decodes a PATCH and reads its image (inline or from its
// memfd), holding its size in the server's image budget until release.
// It closes every descriptor.
func (s *Server) readPatch(p []byte, fds []int) (agentwire.PatchRequest, func(), error) {
	defer closeAll(fds)
	req, flags, size, err := agentwire.UnmarshalPatch(p)
	if err != nil {
		return req, nil, err
	}
	want := 0
	if flags&agentwire.PatchImageMemfd != 0 {
		want = 1
	}
	if len(fds) != want {
		return req, nil, fmt.Errorf("PATCH %d carried %d descriptors, want %d", req.ID, len(fds), want)
	}
	release, err := s.images.Acquire(int64(size), fmt.Sprintf("PATCH %d: the %d-byte image", req.ID, size))
	if err != nil {
		return req, nil, fmt.Errorf("%w (agent Options.ImageMemory)", err)
	}
	if want == 0 {
		req.Image = append([]byte(nil), req.Image...)
		return req, release, nil
	}
	if req.Image, err = readImage(fds[0], req.ID, size); err != nil {
		release()
		return req, nil, err
	}
	return req, release, nil
}

// readImage reads size bytes of an image memfd. fstat first: a file that
// is not regular, shorter than size or longer than MaxImage, or sparse
// (fewer blocks than size: holes cost the client nothing and the
// collector a copy) is refused before any copy. The buffer then grows as
// bytes really arrive.
func readImage(fd int, id uint32, size uint64) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("PATCH %d: fstat of the image memfd: %w", id, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) < size:
		return nil, fmt.Errorf("PATCH %d: image memfd is %d bytes (mode %#o), image_size says %d", id, st.Size, st.Mode, size)
	case st.Size > agentwire.MaxImage:
		return nil, fmt.Errorf("PATCH %d: image memfd is %d bytes, over the %d-byte limit (MaxImage)", id, st.Size, agentwire.MaxImage)
	case uint64(st.Blocks)*512 < size:
		return nil, fmt.Errorf("PATCH %d: image memfd of %d bytes is sparse (%d bytes allocated): refused", id, st.Size, st.Blocks*512)
	case !sealable(fd):
		// Only shmem files (memfds) have seals: a FUSE or network file
		// could make the reads below block.
		return nil, fmt.Errorf("PATCH %d: the image descriptor is no memfd (F_GET_SEALS fails)", id)
	}
	img := make([]byte, 0, min(size, 1<<20))
	for uint64(len(img)) < size {
		if len(img) == cap(img) {
			img = append(img, 0)[:len(img)] // room to grow, by append's doubling
		}
		room := img[len(img):min(uint64(cap(img)), size)]
		n, err := unix.Pread(fd, room, int64(len(img)))
		if err != nil {
			return nil, fmt.Errorf("PATCH %d: reading the image memfd at offset %d: %w", id, len(img), err)
		}
		if n == 0 {
			return nil, fmt.Errorf("PATCH %d: image memfd ends at offset %d of %d", id, len(img), size)
		}
		img = img[:len(img)+n]
	}
	return img, nil
}

// answer runs the owner's Patch callback and encodes PATCHED (with the
// memfd holding the image) or NOPATCH.
func (s *Server) answer(peer *Peer, req *agentwire.PatchRequest, log *zap.Logger) ([]byte, *os.File) {
	no := func(code agentwire.NoPatchCode, msg string) ([]byte, *os.File) {
		return agentwire.MarshalNoPatch(&agentwire.NoPatch{ID: req.ID, Code: code, Message: msg}), nil
	}
	if s.cb.Patch == nil {
		return no(agentwire.NoPatchDisabled, "this server patches nothing")
	}
	a, err := s.cb.Patch(peer, req)
	if err != nil {
		var np *agentwire.NoPatch
		if errors.As(err, &np) {
			return no(np.Code, np.Message)
		}
		return no(agentwire.NoPatchError, err.Error())
	}
	a.ID = req.ID
	frame, err := agentwire.MarshalPatched(a)
	if err != nil {
		log.Warn("agent: encoding PATCHED failed", zap.Error(err))
		return no(agentwire.NoPatchError, err.Error())
	}
	f, err := memfdWith("gpuprobe-patched", a.Image)
	if err != nil {
		log.Warn("agent: memfd for the patched image failed", zap.Error(err))
		return no(agentwire.NoPatchError, err.Error())
	}
	return frame, f
}

// memfdWith returns a memfd holding b, sealed against any change: the
// shim refuses a patched image without F_SEAL_WRITE|F_SEAL_SHRINK.
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
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
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
