package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// requireRoot skips a test that must switch uids (CI runs the tests as root).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: this test runs clients under other uids (setuid children) and needs root (CI runs the tests as root)")
	}
}

// fdCount counts this process's open descriptors.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitFds waits until at most want descriptors are open and returns the count.
func waitFds(t *testing.T, want int) int {
	t.Helper()
	n := fdCount(t)
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = fdCount(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// sharedDir returns a directory every uid can enter, for sockets and the
// test binary that setuid children run.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuprobe-agent-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// childAs runs a client process (mode: "1" maps the regions and writes,
// "raw" takes WELCOME but maps nothing) under cred (nil: ours) and
// returns its first output line.
func childAs(t *testing.T, path, mode string, cred *syscall.Credential) *child {
	t.Helper()
	bin := os.Args[0]
	if cred != nil {
		bin = filepath.Join(sharedDir(t), "agent.test")
		data, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "GPUPROBE_AGENT_PATH="+path)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child output: %v", err)
	}
	return &child{cmd: cmd, stdin: in, line: strings.TrimSpace(line)}
}

// rawChildMain takes WELCOME without mapping a region (its descriptors
// are closed at once) and stays connected until stdin closes.
func rawChildMain() int {
	c, err := net.Dial("unix", os.Getenv("GPUPROBE_AGENT_PATH"))
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 0
	}
	hello, _ := agentwire.MarshalHello(agentwire.Hello{Name: "raw-child"})
	c.Write(hello)
	t, _, err := readFrameFds(c.(*net.UnixConn), nil)
	if err != nil || t != agentwire.FrameWelcome {
		fmt.Printf("error: frame %d, %v\n", t, err)
		return 0
	}
	fmt.Println("ok")
	io.Copy(io.Discard, os.Stdin)
	c.Close()
	return 0
}

// readError reads frames until an ERROR (returned) or the end.
func readError(c *net.UnixConn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		t, p, err := readFrameFds(c, nil)
		if err != nil {
			return err
		}
		if t == agentwire.FrameError {
			return agentwire.UnmarshalError(p)
		}
	}
}

// TestHostileFramesEndTheSession sends frames that would make the server
// hold descriptors or wait without bound: each ends the session, and every
// descriptor the server received is closed again.
func TestHostileFramesEndTheSession(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	patch, _ := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 90, Image: make([]byte, 100)}, true)
	tests := []struct {
		name  string
		send  func(c *net.UnixConn) // what the client sends, then it holds the connection
		want  string                // in the ERROR message
		maxFd int                   // descriptors the server may hold meanwhile
	}{
		{"one byte per sendmsg with 32 descriptors each", func(c *net.UnixConn) {
			for i := 0; i < len(patch)-4; i++ {
				if sendWithFds(c, patch[i:i+1], int(devnull.Fd()), 32) != nil {
					return
				}
			}
		}, "descriptors", 0},
		{"a PATCH with two descriptors", func(c *net.UnixConn) {
			sendWithFds(c, patch, int(devnull.Fd()), 2)
		}, "descriptors", 0},
		{"a descriptor on the first bytes of a frame that takes none", func(c *net.UnixConn) {
			hello, _ := agentwire.MarshalHello(agentwire.Hello{Name: "again"})
			sendWithFds(c, hello, int(devnull.Fd()), 1)
		}, "after WELCOME", 0},
		{"a frame that stops half way", func(c *net.UnixConn) {
			sendWithFds(c, patch[:20], int(devnull.Fd()), 1)
		}, "within", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwner(t)
			s := listen(t, o, Options{FrameTimeout: 300 * time.Millisecond})
			sess, err := Dial(s.Path(), agentwire.Hello{Name: "hostile"})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			base := fdCount(t)
			start := time.Now()
			tc.send(sess.conn)
			// Meanwhile the server serves others.
			other, err := Dial(s.Path(), agentwire.Hello{Name: "other"})
			if err != nil {
				t.Fatalf("another client during the hostile frame: %v", err)
			}
			other.Close()
			waitGone(t, o)
			if n := waitFds(t, base+tc.maxFd); n > base+tc.maxFd {
				t.Fatalf("%d descriptors open, %d before the hostile frame", n, base)
			}
			err = readError(sess.conn)
			var pe *agentwire.ProtocolError
			if !errors.As(err, &pe) || pe.Code != agentwire.CodeProtocol || !strings.Contains(pe.Message, tc.want) {
				t.Fatalf("got %v, want a protocol ERROR mentioning %q", err, tc.want)
			}
			waitGone(t, o)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the session ended after %v", d)
			}
		})
	}
}

// TestIdleSessions: a session whose process maps its regions stays however
// long it is silent; one whose process mapped none is reclaimed.
func TestIdleSessions(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{IdleTimeout: 300 * time.Millisecond, FrameTimeout: 100 * time.Millisecond})
	good := childAs(t, s.Path(), "1", nil)
	if !strings.HasPrefix(good.line, "ok ") {
		t.Fatalf("child: %s", good.line)
	}
	raw := childAs(t, s.Path(), "raw", nil)
	if raw.line != "ok" {
		t.Fatalf("raw child: %s", raw.line)
	}
	p := waitGone(t, o)
	if int(p.PID) != raw.cmd.Process.Pid {
		t.Fatalf("session of pid %d ended, want the raw child's %d", p.PID, raw.cmd.Process.Pid)
	}
	time.Sleep(time.Second) // three idle periods
	select {
	case p := <-o.gone:
		t.Fatalf("session of pid %d (mapped regions) was reclaimed", p.PID)
	default:
	}
	if st := s.Stats(); st.Reclaimed != 1 || st.Active != 1 {
		t.Fatalf("stats %+v", st)
	}
	raw.finish(t)
	good.finish(t)
	waitGone(t, o)
}

// TestFloodDoesNotLockOut: one uid tries more sessions than the server
// has slots, then holds 300 connections that never say HELLO, all with
// the default limits; a client of another uid, and one of the same uid
// within its budget, still get WELCOME.
func TestFloodDoesNotLockOut(t *testing.T) {
	requireRoot(t)
	o := newOwner(t)
	dir := sharedDir(t)
	s := listen(t, o, Options{Path: filepath.Join(dir, "agent.sock"), Mode: 0o666,
		AllowedUIDs: []uint32{0, 65534}, HandshakeTimeout: 20 * time.Second})
	base := fdCount(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Sessions up to and past the uid's budget.
	hello, _ := agentwire.MarshalHello(agentwire.Hello{Name: "hog"})
	refused := 0
	const hogs = agentwire.DefaultMaxConns + 44
	for i := 0; i < hogs; i++ {
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.Write(hello)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		ft, p, err := readFrameFds(c.(*net.UnixConn), nil)
		switch {
		case err == nil && ft == agentwire.FrameWelcome:
		case err == nil && ft == agentwire.FrameError && agentwire.UnmarshalError(p).(*agentwire.ProtocolError).Code == agentwire.CodeTooMany:
			refused++
		default:
			t.Fatalf("hog session %d: frame %d, %v", i, ft, err)
		}
	}
	if refused != hogs-agentwire.DefaultMaxConnsPerUID {
		t.Fatalf("%d of %d sessions of one uid refused, want %d (budget %d)", refused, hogs, hogs-agentwire.DefaultMaxConnsPerUID, agentwire.DefaultMaxConnsPerUID)
	}
	// Then 300 connections that never say HELLO.
	for i := 0; i < 300; i++ {
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	st := s.Stats()
	for deadline := time.Now().Add(10 * time.Second); st.Evicted < 300-agentwire.DefaultMaxPendingPerUID && time.Now().Before(deadline); st = s.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if st.Evicted < 300-agentwire.DefaultMaxPendingPerUID {
		t.Fatalf("stats %+v: want at least %d evicted", st, 300-agentwire.DefaultMaxPendingPerUID)
	}
	other := childAs(t, s.Path(), "1", &syscall.Credential{Uid: 65534, Gid: 65534})
	if !strings.HasPrefix(other.line, "ok ") {
		t.Fatalf("uid 65534 client: %s", other.line)
	}
	other.finish(t)
	waitGone(t, o)
	// The hog's uid still gets in once one of its sessions is gone.
	held[0].Close()
	waitGone(t, o)
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "same uid"})
	if err != nil {
		t.Fatalf("uid 0 client within its budget: %v", err)
	}
	sess.Close()
	waitGone(t, o)
	for _, c := range held {
		c.Close()
	}
	held = nil
	o.mu.Lock()
	base += len(o.rings) // the owner keeps each session's ring until the test ends
	o.mu.Unlock()
	if n := waitFds(t, base); n > base {
		ents, _ := os.ReadDir("/proc/self/fd")
		var links []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			links = append(links, e.Name()+"->"+l)
		}
		t.Fatalf("%d descriptors open after the flood, %d before: %v", n, base, links)
	}
}

// TestSupplementaryGroups admits a peer by a supplementary group.
func TestSupplementaryGroups(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name   string
		groups []uint32
		want   string
	}{
		{"in an allowed supplementary group", []uint32{100, 4243}, "ok "},
		{"in no allowed group", []uint32{100}, "permission denied: peer uid 65534"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwner(t)
			s := listen(t, o, Options{Path: filepath.Join(sharedDir(t), "agent.sock"), Mode: 0o666, AllowedGIDs: []uint32{4243}})
			c := childAs(t, s.Path(), "1", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: tc.groups})
			if !strings.HasPrefix(c.line, tc.want) && !strings.Contains(c.line, tc.want) {
				t.Fatalf("client: %s, want %q", c.line, tc.want)
			}
			c.finish(t)
			if tc.want == "ok " {
				if p := waitGone(t, o); len(p.Groups) != len(tc.groups) || p.Groups[1] != 4243 {
					t.Fatalf("peer groups %v, want %v", p.Groups, tc.groups)
				}
			}
		})
	}
}

// TestPeerProcPinning: what /proc says of a peer counts only while the
// connecting process lives, with a pidfd (SO_PEERPIDFD) or by start time.
func TestPeerProcPinning(t *testing.T) {
	tests := []struct {
		name   string
		pidfd  bool
		exited bool
		want   error // of groups(); nil: read
	}{
		{"pidfd, running", true, false, nil},
		{"pidfd, exited", true, true, errPeerGone},
		{"start time, running", false, false, nil},
		{"start time, exited", false, true, errPeerGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", "read x")
			in, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p := &peerProc{pid: int32(cmd.Process.Pid), pidfd: -1}
			defer p.close()
			p.start, _ = p.startTime()
			if tc.pidfd {
				fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
				if err != nil {
					t.Fatal(err)
				}
				p.pidfd = fd
			}
			if tc.exited {
				in.Close()
				cmd.Wait()
			}
			if _, err := p.groups(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("groups: %v, want %v", err, tc.want)
			}
			if !tc.exited {
				in.Close()
				cmd.Wait()
			}
		})
	}
}
