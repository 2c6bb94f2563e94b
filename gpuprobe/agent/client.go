package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

// DefaultDialTimeout bounds Dial's connect and handshake.
const DefaultDialTimeout = 5 * time.Second

// MappedRegion is a region a session received, mapped in this process.
type MappedRegion struct {
	agentwire.RegionInfo             // as described by the server
	Region               *shm.Region // the mapped region (header validated); nil for a headerless one
	Raw                  []byte      // a headerless region (FlagNoHeader): its RegionSize bytes, mapped shared
	rawFile              *os.File
}

// mapRaw maps a headerless region (a kernel map's fd) read-write, shared.
func mapRaw(f *os.File, info agentwire.RegionInfo) (MappedRegion, error) {
	if info.RegionSize == 0 || info.RegionSize > 1<<40 {
		return MappedRegion{}, fmt.Errorf("headerless region of %d bytes", info.RegionSize)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(info.RegionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return MappedRegion{}, fmt.Errorf("mmap of %d bytes: %w", info.RegionSize, err)
	}
	return MappedRegion{RegionInfo: info, Raw: b, rawFile: f}, nil
}

// close unmaps the region.
func (m *MappedRegion) close() error {
	if m.Region != nil {
		return m.Region.Close()
	}
	err := unix.Munmap(m.Raw)
	if cerr := m.rawFile.Close(); err == nil {
		err = cerr
	}
	return err
}

// Session is a client's connection to the agent socket.
type Session struct {
	conn    *net.UnixConn
	nextReq uint32         // id of the last PATCH sent
	ID      uint32         // server-assigned session id
	Regions []MappedRegion // in the server's order
}

// Dial connects to the agent socket at path, says hello and maps the regions
// the server hands over. It gives up after DefaultDialTimeout.
func Dial(path string, hello agentwire.Hello) (*Session, error) {
	return DialTimeout(path, hello, DefaultDialTimeout)
}

// DialTimeout is Dial with a given bound on connect plus handshake.
func DialTimeout(path string, hello agentwire.Hello, timeout time.Duration) (*Session, error) {
	frame, err := agentwire.MarshalHello(hello)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Deadline: deadline}
	nc, err := d.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent: connecting to %s: %w", path, err)
	}
	c := nc.(*net.UnixConn)
	c.SetDeadline(deadline)
	s, err := handshake(c, frame)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("agent: handshake with %s: %w", path, err)
	}
	c.SetDeadline(time.Time{})
	return s, nil
}

func handshake(c *net.UnixConn, hello []byte) (*Session, error) {
	if _, err := c.Write(hello); err != nil {
		// The server may have refused us before reading: its ERROR frame
		// says why, so prefer it to the write error.
		if t, p, rerr := readFrameFds(c, nil); rerr == nil && t == agentwire.FrameError {
			return nil, agentwire.UnmarshalError(p)
		}
		return nil, fmt.Errorf("sending HELLO: %w", err)
	}
	var fds []int
	t, p, err := readFrameFds(c, &fds)
	closeFds := func(from int) {
		for _, fd := range fds[from:] {
			unix.Close(fd)
		}
	}
	if err != nil {
		closeFds(0)
		return nil, err
	}
	switch t {
	case agentwire.FrameError:
		closeFds(0)
		return nil, agentwire.UnmarshalError(p)
	case agentwire.FrameWelcome:
	default:
		closeFds(0)
		return nil, &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("server sent frame type %d, want WELCOME", t)}
	}
	w, err := agentwire.UnmarshalWelcome(p)
	if err != nil {
		closeFds(0)
		return nil, err
	}
	if len(fds) != len(w.Regions) {
		closeFds(0)
		return nil, &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("WELCOME describes %d regions but carried %d descriptors", len(w.Regions), len(fds))}
	}
	s := &Session{conn: c, ID: w.Session}
	for i, info := range w.Regions {
		f := os.NewFile(uintptr(fds[i]), "agent-region-"+info.Name)
		if info.Flags&agentwire.FlagNoHeader != 0 {
			m, err := mapRaw(f, info)
			if err != nil {
				f.Close()
				closeFds(i + 1)
				s.closeRegions()
				return nil, fmt.Errorf("region %d (%q): %w", i, info.Name, err)
			}
			s.Regions = append(s.Regions, m)
			continue
		}
		r, err := shm.MapFile(f, info.Kind)
		if err == nil && r.Header().RegionSize != info.RegionSize {
			r.Close()
			err = fmt.Errorf("region is %d bytes, WELCOME says %d", r.Header().RegionSize, info.RegionSize)
		} else if err != nil {
			f.Close()
		}
		if err != nil {
			closeFds(i + 1)
			s.closeRegions()
			return nil, fmt.Errorf("region %d (%q): %w", i, info.Name, err)
		}
		s.Regions = append(s.Regions, MappedRegion{RegionInfo: info, Region: r})
	}
	return s, nil
}

// readFrameFds reads one frame, collecting descriptors passed with it into
// *fds (fds nil: a received descriptor is closed at once); a frame may
// carry at most MaxRegions of them.
func readFrameFds(c *net.UnixConn, fds *[]int) (agentwire.FrameType, []byte, error) {
	return readFrameLimited(c, fds, frameLimits{maxFds: agentwire.MaxRegions})
}

// frameLimits bound the reading of one frame.
type frameLimits struct {
	maxFds int           // most descriptors the frame may carry; more is a *ProtocolError
	idle   time.Time     // deadline of the frame's first byte (zero: the connection's, unchanged)
	rest   time.Duration // bound on the rest once the first byte came (0: the connection's deadline)
}

// errIdle: no byte of a frame came before frameLimits.idle.
var errIdle = errors.New("agent: no frame before the idle deadline")

// readFrameLimited reads one frame within lim, collecting descriptors into
// *fds (nil: closed at once). On an error the caller closes *fds.
func readFrameLimited(c *net.UnixConn, fds *[]int, lim frameLimits) (agentwire.FrameType, []byte, error) {
	oob := make([]byte, unix.CmsgSpace(4*lim.maxFds))
	if !lim.idle.IsZero() {
		c.SetReadDeadline(lim.idle)
	}
	got, nfds := 0, 0
	read := func(b []byte) error {
		for len(b) > 0 {
			n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
			n, oobn = max(n, 0), max(oobn, 0) // a failed recvmsg may report -1
			if n > 0 && got == 0 && lim.rest > 0 {
				c.SetReadDeadline(time.Now().Add(lim.rest))
			}
			got += n
			if oobn > 0 {
				recvd, perr := parseRights(oob[:oobn])
				nfds += len(recvd)
				if fds != nil {
					*fds = append(*fds, recvd...)
				} else {
					closeAll(recvd)
				}
				if perr != nil {
					return perr
				}
			}
			if nfds > lim.maxFds || flags&unix.MSG_CTRUNC != 0 {
				return &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("frame carried more than %d descriptors", lim.maxFds)}
			}
			b = b[n:]
			if err != nil && len(b) > 0 {
				switch {
				case errors.Is(err, os.ErrDeadlineExceeded) && got == 0 && !lim.idle.IsZero():
					return errIdle
				case errors.Is(err, os.ErrDeadlineExceeded) && got > 0 && lim.rest > 0:
					return &agentwire.ProtocolError{Code: agentwire.CodeProtocol, Message: fmt.Sprintf("frame not complete within %v of its first byte (%d bytes came)", lim.rest, got)}
				case errors.Is(err, io.EOF):
					return fmt.Errorf("connection closed: %w", io.ErrUnexpectedEOF)
				}
				return err
			}
			if n == 0 && len(b) > 0 && err == nil {
				return io.ErrUnexpectedEOF
			}
		}
		return nil
	}
	var h [agentwire.FrameHeader]byte
	if err := read(h[:]); err != nil {
		return 0, nil, fmt.Errorf("reading frame header: %w", err)
	}
	t, n, err := agentwire.ParseFrameHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	p := make([]byte, n)
	if err := read(p); err != nil {
		return 0, nil, fmt.Errorf("reading %d-byte frame payload: %w", n, err)
	}
	return t, p, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parsing control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("parsing SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Region returns the first region of the given role and name ("" matches
// any name), or nil.
func (s *Session) Region(role agentwire.Role, name string) *shm.Region {
	for _, r := range s.Regions {
		if r.Role == role && (name == "" || r.Name == name) {
			return r.Region
		}
	}
	return nil
}

// Raw returns the mapping of the first headerless region of the given role
// and name ("" matches any name), or nil.
func (s *Session) Raw(role agentwire.Role, name string) []byte {
	for _, r := range s.Regions {
		if r.Role == role && r.Raw != nil && (name == "" || r.Name == name) {
			return r.Raw
		}
	}
	return nil
}

func (s *Session) closeRegions() error {
	var first error
	for i := range s.Regions {
		if err := s.Regions[i].close(); err != nil && first == nil {
			first = err
		}
	}
	s.Regions = nil
	return first
}

// Close unmaps the regions and closes the connection (the server then
// learns that the session ended).
func (s *Session) Close() error {
	err := s.closeRegions()
	if cerr := s.conn.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("agent: closing session %d: %w", s.ID, cerr)
	}
	return err
}
