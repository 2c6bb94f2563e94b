package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/internal/procread"
	"golang.org/x/sys/unix"
)

// The peer's process, as /proc shows it: its supplementary groups (for
// allowed_gids) and whether it maps a session's regions (for reclaiming
// idle sessions). SO_PEERCRED's pid may be reused once the peer exits, so
// a peerProc is pinned to the process: by a pidfd (SO_PEERPIDFD, Linux
// 6.5), which refers to the connecting process whatever happens to its
// pid, or on older kernels by the start time read at accept. What is read
// from /proc/PID counts only if the pinned process still exists after
// the read. Without a pidfd one race is left: the peer exits and its pid
// is reused between connect and accept; the start time then pins the new
// process, whose groups are read. /proc/PID/maps of another uid's process
// is readable by root only (the collector's normal case); when it cannot
// be read, a session counts as live.

// soPeerPidfd is SO_PEERPIDFD (asm-generic, Linux 6.5).
const soPeerPidfd = 77

// errPeerGone: the pinned process exited (its pid may name another now).
var errPeerGone = errors.New("agent: the peer process exited")

// fileID identifies a file by device and inode.
type fileID struct{ dev, ino uint64 }

// peerProc is the process at the other end of a connection.
type peerProc struct {
	pid   int32
	pidfd int    // -1: none
	start string // /proc/PID/stat starttime at open ("": unknown)
}

// openPeerProc pins the peer process of c, whose SO_PEERCRED pid is pid.
func openPeerProc(c *net.UnixConn, pid int32) *peerProc {
	p := &peerProc{pid: pid, pidfd: -1}
	if pid <= 0 {
		return p // not in our pid namespace
	}
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
				unix.CloseOnExec(v)
				p.pidfd = v
			}
		})
	}
	p.start, _ = p.startTime()
	return p
}

func (p *peerProc) close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

func (p *peerProc) path(name string) string {
	return "/proc/" + strconv.Itoa(int(p.pid)) + "/" + name
}

// startTime reads field 22 of /proc/PID/stat.
func (p *peerProc) startTime() (string, error) {
	b, err := procread.File(p.path("stat"), procread.MaxStat)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:])) // fields 3 on
	if i < 0 || len(f) < 20 {
		return "", fmt.Errorf("agent: %s: %d fields", p.path("stat"), len(f)+2)
	}
	return f[19], nil
}

// alive says whether the pinned process still exists.
func (p *peerProc) alive() bool {
	if p.pidfd >= 0 {
		return unix.PidfdSendSignal(p.pidfd, 0, nil, 0) == nil
	}
	st, err := p.startTime()
	return err == nil && p.start != "" && st == p.start
}

// read reads at most max bytes of /proc/PID/name, then checks that it was
// the peer's. Past max it returns the first max bytes with an error
// wrapping procread.ErrTruncated.
func (p *peerProc) read(name string, max int64) ([]byte, error) {
	if p.pid <= 0 {
		return nil, fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	b, err := procread.File(p.path(name), max)
	if err != nil && !errors.Is(err, procread.ErrTruncated) {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errPeerGone
		}
		return nil, fmt.Errorf("agent: %w", err)
	}
	if !p.alive() {
		return nil, errPeerGone
	}
	return b, err
}

// readMax is read with a file cut at max bytes taken as it is.
func (p *peerProc) readMax(name string, max int64) ([]byte, error) {
	b, err := p.read(name, max)
	if errors.Is(err, procread.ErrTruncated) {
		err = nil
	}
	return b, err
}

// ProcInfo is what the server read about a peer's process from /proc/PID
// at its handshake, while the process was pinned; "" or 0: unknown (the
// process is outside the collector's pid namespace, gone, or not readable).
type ProcInfo struct {
	ExePath string // the target of /proc/PID/exe, " (deleted)" cut
	Comm    string // /proc/PID/comm: set by the process itself, a name of last resort
	Cgroup  string // /proc/PID/cgroup, at most MaxCgroupRead bytes
	Start   uint64 // start time in clock ticks after boot (/proc/PID/stat field 22)
}

// MaxCgroupRead bounds the bytes of /proc/PID/cgroup read (a process can
// lengthen its cgroup paths where cgroups are delegated to it).
const MaxCgroupRead = 16 << 10

// info reads the peer's ProcInfo.
func (p *peerProc) info() ProcInfo {
	var in ProcInfo
	in.Start, _ = strconv.ParseUint(p.start, 10, 64)
	if exe, err := p.readlink("exe"); err == nil {
		in.ExePath = strings.TrimSuffix(exe, " (deleted)")
	}
	if b, err := p.readMax("comm", 64); err == nil {
		in.Comm = strings.TrimSpace(string(b))
	}
	if b, err := p.readMax("cgroup", MaxCgroupRead); err == nil {
		in.Cgroup = string(b)
	}
	return in
}

// readlink reads the link /proc/PID/name, then checks that it was the peer's.
func (p *peerProc) readlink(name string) (string, error) {
	if p.pid <= 0 {
		return "", fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	s, err := os.Readlink(p.path(name))
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	if !p.alive() {
		return "", errPeerGone
	}
	return s, nil
}

// groups returns the peer's supplementary groups.
func (p *peerProc) groups() ([]uint32, error) {
	b, err := p.read("status", procread.MaxStatus)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, f := range strings.Fields(rest) {
			g, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("agent: %s: group %q: %w", p.path("status"), f, err)
			}
			out = append(out, uint32(g))
		}
		return out, nil
	}
	return nil, fmt.Errorf("agent: %s has no Groups line", p.path("status"))
}

// mapsAny says whether the peer maps any of the files ids. It reads
// /proc/PID/maps line by line, stopping at the first match, and at most
// procread.MaxMapsBytes of it: past them, with no match, it returns an
// error wrapping procread.ErrTruncated (the caller keeps the session, as
// when the file cannot be read).
func (p *peerProc) mapsAny(ids []fileID) (bool, error) {
	if p.pid <= 0 {
		return false, fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	f, err := os.Open(p.path("maps"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, errPeerGone
		}
		return false, fmt.Errorf("agent: %w", err)
	}
	defer f.Close()
	found, sc, err := mapsMatch(f, ids)
	if err != nil {
		return false, fmt.Errorf("agent: %s: %w", p.path("maps"), err)
	}
	if !p.alive() {
		return false, errPeerGone
	}
	if !found && sc.Truncated {
		return false, fmt.Errorf("agent: %s: no region mapped in its first %d bytes: %w",
			p.path("maps"), sc.Bytes, procread.ErrTruncated)
	}
	return found, nil
}

// mapsMatch says whether the maps lines of r map any of the files ids.
// Each line: address perms offset major:minor inode [path].
func mapsMatch(r io.Reader, ids []fileID) (bool, procread.Scan, error) {
	found := false
	sc, err := procread.Lines(r, procread.MaxMapsBytes, procread.MaxMapsLine, func(line []byte, _ bool) bool {
		found = mapsLineIs(line, ids)
		return !found
	})
	return found, sc, err
}

// mapsLineIs says whether a maps line maps one of the files ids.
func mapsLineIs(line []byte, ids []fileID) bool {
	id, ok := mapsLineFile(line)
	return ok && slices.Contains(ids, id)
}

// mapsLineFile returns the file a maps line maps (device and inode).
// Each line: address perms offset major:minor inode [path].
func mapsLineFile(line []byte) (fileID, bool) {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		f[i], rest = rest[:end], rest[end:]
	}
	ino, ok := parseUint(f[4], 10, 64)
	if !ok || ino == 0 {
		return fileID{}, false
	}
	maj, min, ok := bytes.Cut(f[3], []byte{':'})
	if !ok {
		return fileID{}, false
	}
	mj, ok1 := parseUint(maj, 16, 32)
	mn, ok2 := parseUint(min, 16, 32)
	if !ok1 || !ok2 {
		return fileID{}, false
	}
	return fileID{dev: unix.Mkdev(uint32(mj), uint32(mn)), ino: ino}, true
}

// parseUint parses b, digits of base 10 or 16, as a number of at most
// bits bits, without allocating.
func parseUint(b []byte, base, bits int) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case base == 16 && 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		if n > (1<<bits-1-d)/uint64(base) {
			return 0, false
		}
		n = n*uint64(base) + d
	}
	return n, true
}
