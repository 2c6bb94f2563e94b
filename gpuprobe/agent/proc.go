package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

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
	b, err := os.ReadFile(p.path("stat"))
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

// read reads /proc/PID/name, then checks that it was the peer's.
func (p *peerProc) read(name string) ([]byte, error) {
	if p.pid <= 0 {
		return nil, fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	b, err := os.ReadFile(p.path(name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errPeerGone
		}
		return nil, fmt.Errorf("agent: %w", err)
	}
	if !p.alive() {
		return nil, errPeerGone
	}
	return b, nil
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

// readMax reads at most max bytes of /proc/PID/name, then checks that it
// was the peer's.
func (p *peerProc) readMax(name string, max int64) ([]byte, error) {
	if p.pid <= 0 {
		return nil, fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	f, err := os.Open(p.path(name))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if !p.alive() {
		return nil, errPeerGone
	}
	return b, nil
}

// groups returns the peer's supplementary groups.
func (p *peerProc) groups() ([]uint32, error) {
	b, err := p.read("status")
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

// mapsAny says whether the peer maps any of the files ids.
func (p *peerProc) mapsAny(ids []fileID) (bool, error) {
	b, err := p.read("maps")
	if err != nil {
		return false, err
	}
	// Each line: address perms offset major:minor inode [path].
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) < 5 {
			continue
		}
		ino, err := strconv.ParseUint(string(f[4]), 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		maj, min, ok := bytes.Cut(f[3], []byte{':'})
		if !ok {
			continue
		}
		mj, err1 := strconv.ParseUint(string(maj), 16, 32)
		mn, err2 := strconv.ParseUint(string(min), 16, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		dev := unix.Mkdev(uint32(mj), uint32(mn))
		for _, id := range ids {
			if id.ino == ino && id.dev == dev {
				return true, nil
			}
		}
	}
	return false, nil
}
