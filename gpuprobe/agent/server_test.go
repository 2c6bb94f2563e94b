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
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

const childEnv = "GPUPROBE_AGENT_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "raw":
		os.Exit(rawChildMain())
	default:
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// childMain is a real client in its own process: it dials, writes into the
// regions it was given, reports, and stays connected until stdin closes.
func childMain() int {
	s, err := Dial(os.Getenv("GPUPROBE_AGENT_PATH"), agentwire.Hello{PID: uint32(os.Getpid()), Name: "agent-child"})
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 0
	}
	ring, err := shm.NewRing(s.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 0
	}
	if r := ring.Produce(1, []byte(fmt.Sprintf("hello from %d", os.Getpid()))); r != shm.Published {
		fmt.Printf("error: produce: %v\n", r)
		return 0
	}
	arr, err := shm.NewArray(s.Region(agentwire.RoleMap, "counts"))
	if err == nil {
		_, err = arr.AddUint64(0, 0, uint64(os.Getpid()))
	}
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 0
	}
	fmt.Printf("ok %d %d\n", s.ID, len(s.Regions))
	io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// owner plays the receiver: a ring per connection plus one shared array.
type owner struct {
	t      *testing.T
	shared *shm.Array
	mu     sync.Mutex
	rings  map[uint32]*shm.Ring
	peers  []*Peer
	gone   chan *Peer
	fail   error
}

func newOwner(t *testing.T) *owner {
	a, err := shm.CreateArray(shm.KindArray, 8, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{t: t, shared: a, rings: map[uint32]*shm.Ring{}, gone: make(chan *Peer, 1024)}
	t.Cleanup(func() {
		a.Close()
		for _, g := range o.rings {
			g.Close()
		}
	})
	return o
}

func (o *owner) setFail(err error) {
	o.mu.Lock()
	o.fail = err
	o.mu.Unlock()
}

func (o *owner) callbacks() Callbacks {
	return Callbacks{
		Connect: func(p *Peer) ([]agentwire.Offer, error) {
			o.mu.Lock()
			fail := o.fail
			o.mu.Unlock()
			if fail != nil {
				return nil, fail
			}
			g, err := shm.CreateRing(64, 16)
			if err != nil {
				return nil, err
			}
			o.mu.Lock()
			o.rings[p.Session] = g
			o.peers = append(o.peers, p)
			o.mu.Unlock()
			return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: g.Region()},
				{Role: agentwire.RoleMap, Name: "counts", Region: o.shared.Region()}}, nil
		},
		Disconnect: func(p *Peer) { o.gone <- p },
	}
}

func listen(t *testing.T, o *owner, opts Options) *Server {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "agent.sock")
	}
	s, err := Listen(opts, o.callbacks())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  string
}

// startChild runs a client process and returns its first output line.
func startChild(t *testing.T, path string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GPUPROBE_AGENT_PATH="+path)
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

func (c *child) finish(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

func waitGone(t *testing.T, o *owner) *Peer {
	t.Helper()
	select {
	case p := <-o.gone:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("Disconnect was not called")
		return nil
	}
}

func TestClientProcessGetsRegions(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{Mode: 0o600})
	st, err := os.Stat(s.Path())
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v mode %v", err, st.Mode())
	}
	c := startChild(t, s.Path())
	if !strings.HasPrefix(c.line, "ok ") {
		t.Fatalf("child: %s", c.line)
	}
	var id, n int
	fmt.Sscanf(c.line, "ok %d %d", &id, &n)
	if n != 2 {
		t.Fatalf("child mapped %d regions", n)
	}
	// The server counts the handshake once WELCOME is sent, which the
	// child may have read (and answered) before the count: wait for it.
	var stats Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if stats = s.Stats(); stats.Accepted == 1 || time.Now().After(deadline) {
			break
		}
	}
	if stats.Accepted != 1 || stats.Active != 1 {
		t.Fatalf("stats while connected: %+v", stats)
	}
	c.finish(t)
	p := waitGone(t, o)
	if int(p.PID) != c.cmd.Process.Pid || p.Hello.Name != "agent-child" || p.UID != uint32(os.Getuid()) || int(p.Session) != id {
		t.Fatalf("peer %+v, child pid %d", p, c.cmd.Process.Pid)
	}
	// Its executable, cgroups and start time, read from /proc/PID at the
	// handshake (the child is this test binary).
	self, _ := os.Executable()
	cg, _ := os.ReadFile("/proc/self/cgroup")
	if p.Proc.ExePath != self || p.Proc.Comm == "" || p.Proc.Start == 0 || (len(cg) > 0 && p.Proc.Cgroup == "") {
		t.Fatalf("peer's process %+v, want exe %s", p.Proc, self)
	}
	// What the child wrote is in the collector's regions.
	var got []string
	o.rings[p.Session].NewConsumer(shm.ConsumerOptions{}).Read(0, func(r shm.Record) { got = append(got, string(r.Payload)) })
	if want := fmt.Sprintf("hello from %d", p.PID); len(got) != 1 || got[0] != want {
		t.Fatalf("ring holds %q, want %q", got, want)
	}
	if v, _ := o.shared.Uint64(0, 0); v != uint64(p.PID) {
		t.Fatalf("shared array holds %d, want %d", v, p.PID)
	}
	if st := s.Stats(); st.Active != 0 {
		t.Fatalf("stats after disconnect: %+v", st)
	}
}

func TestPeerCredRejection(t *testing.T) {
	if os.Getuid() == 4242 {
		t.Skip("running as uid 4242")
	}
	core, logs := observer.New(zap.WarnLevel)
	o := newOwner(t)
	s := listen(t, o, Options{AllowedUIDs: []uint32{4242}, AllowedGIDs: []uint32{4243}, Logger: zap.New(core)})
	c := startChild(t, s.Path())
	c.finish(t)
	want := fmt.Sprintf("permission denied: peer uid %d gid %d", os.Getuid(), os.Getgid())
	if !strings.HasPrefix(c.line, "error: ") || !strings.Contains(c.line, want) || !strings.Contains(c.line, "allowed_uids [4242]") {
		t.Fatalf("client error %q does not say %q", c.line, want)
	}
	if st := s.Stats(); st.Rejected != 1 || st.Accepted != 0 {
		t.Fatalf("stats %+v", st)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.peers) != 0 {
		t.Fatal("Connect was called for a rejected peer")
	}
	entries := logs.FilterMessage("agent: connection rejected").All()
	if len(entries) != 1 || !strings.Contains(entries[0].ContextMap()["reason"].(string), want[len("permission denied: "):]) {
		t.Fatalf("server log %+v", logs.All())
	}
}

func TestDefaultPolicyAdmitsOwnUID(t *testing.T) {
	tests := []struct {
		name     string
		uids     []uint32
		gids     []uint32
		uid, gid uint32
		groups   []uint32
		self     uint32
		want     bool
	}{
		{"root by default", nil, nil, 0, 0, nil, 1000, true},
		{"own uid by default", nil, nil, 1000, 5, nil, 1000, true},
		{"other uid by default", nil, nil, 1001, 5, []uint32{0}, 1000, false},
		{"listed uid", []uint32{7}, nil, 7, 5, nil, 0, true},
		{"root not implied by a list", []uint32{7}, nil, 0, 0, nil, 0, false},
		{"listed gid", nil, []uint32{9}, 100, 9, nil, 0, true},
		{"listed supplementary gid", nil, []uint32{9}, 100, 8, []uint32{3, 9}, 0, true},
		{"neither listed", []uint32{7}, []uint32{9}, 8, 10, []uint32{11}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{AllowedUIDs: tc.uids, AllowedGIDs: tc.gids}, selfUID: tc.self}
			if got := s.allowed(tc.uid, tc.gid, tc.groups); got != tc.want {
				t.Fatalf("allowed(%d, %d) = %v", tc.uid, tc.gid, got)
			}
		})
	}
}

// rawHandshake sends bytes on a raw connection and returns the server's
// ERROR (or nil and the frame type for anything else).
func rawHandshake(t *testing.T, path string, send []byte) (agentwire.FrameType, error) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(send); err != nil {
		t.Fatal(err)
	}
	ft, p, err := agentwire.ReadFrame(c)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if ft == agentwire.FrameError {
		return ft, agentwire.UnmarshalError(p)
	}
	return ft, nil
}

func TestBadClients(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{HandshakeTimeout: 2 * time.Second})
	hello, _ := agentwire.MarshalHello(agentwire.Hello{PID: 1, Name: "x"})
	withHeader := func(f func(b []byte)) []byte {
		b := append([]byte(nil), hello...)
		f(b)
		return b
	}
	welcome, _ := agentwire.MarshalWelcome(agentwire.Welcome{Session: 1})
	tests := []struct {
		name string
		send []byte
		code agentwire.ErrorCode
		want string
	}{
		{"bad magic", withHeader(func(b []byte) { b[0] = 'X' }), agentwire.CodeProtocol, "magic"},
		{"version 2", withHeader(func(b []byte) { b[4] = 2 }), agentwire.CodeVersion, "protocol version 2"},
		{"version 3", withHeader(func(b []byte) { b[4] = 3 }), agentwire.CodeVersion, "protocol version 3"},
		{"version 4", withHeader(func(b []byte) { b[4] = 4 }), agentwire.CodeVersion, "protocol version 4"},
		{"version 6", withHeader(func(b []byte) { b[4] = 6 }), agentwire.CodeVersion, "protocol version 6"},
		{"huge length", withHeader(func(b []byte) { b[10] = 0xff }), agentwire.CodeProtocol, "exceeds"},
		{"unknown type", withHeader(func(b []byte) { b[6] = 9 }), agentwire.CodeProtocol, "unknown frame type 9"},
		{"welcome first", welcome, agentwire.CodeProtocol, "want HELLO"},
		{"name length lies", withHeader(func(b []byte) { b[agentwire.FrameHeader+8] = 5 }), agentwire.CodeProtocol, "name_len 5"},
		{"short hello", agentwire.AppendFrame(nil, agentwire.FrameHello, []byte{1, 2, 3}), agentwire.CodeProtocol, "at least 12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rawHandshake(t, s.Path(), tc.send)
			var pe *agentwire.ProtocolError
			if !errors.As(err, &pe) || pe.Code != tc.code || !strings.Contains(pe.Message, tc.want) {
				t.Fatalf("got %v, want code %v mentioning %q", err, tc.code, tc.want)
			}
		})
	}
	if st := s.Stats(); st.Failed != uint64(len(tests)) || st.Accepted != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSilentClientDoesNotBlockOthers(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{HandshakeTimeout: 300 * time.Millisecond})
	silent, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A well-behaved client is served while the silent one hangs around.
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "good"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Regions) != 2 || sess.Region(agentwire.RoleMap, "counts") == nil || sess.Region(agentwire.RoleMailbox, "") != nil {
		t.Fatalf("regions %+v", sess.Regions)
	}
	sess.Close()
	waitGone(t, o)
	// The silent client is cut off at the handshake deadline.
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if n, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent client read %d, %v; want EOF", n, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("silent client held for %v", d)
	}
}

func TestConnectErrorAndDataAfterHandshake(t *testing.T) {
	o := newOwner(t)
	s := listen(t, o, Options{})
	o.setFail(errors.New("no GPU maps configured"))
	_, err := Dial(s.Path(), agentwire.Hello{Name: "x"})
	var pe *agentwire.ProtocolError
	if !errors.As(err, &pe) || pe.Code != agentwire.CodeServer || pe.Message != "no GPU maps configured" {
		t.Fatalf("Dial: %v", err)
	}
	o.setFail(nil)
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	sess.conn.Write([]byte("junkjunkjunk"))
	waitGone(t, o)
	sess.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	ft, p, err := agentwire.ReadFrame(sess.conn)
	if err != nil || ft != agentwire.FrameError || !strings.Contains(agentwire.UnmarshalError(p).Error(), "after WELCOME") {
		t.Fatalf("answer to junk: %v %v", ft, err)
	}
}

func TestCloseEndsSessionsAndRemovesSocket(t *testing.T) {
	o := newOwner(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	s, err := Listen(Options{Path: path}, o.callbacks())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Options{Path: path}, o.callbacks()); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	sess, err := Dial(path, agentwire.Hello{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, o)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if _, err := Dial(path, agentwire.Hello{}); err == nil {
		t.Fatal("Dial after Close succeeded")
	}
	// A stale socket file (nobody listening) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	s2, err := Listen(Options{Path: path}, o.callbacks())
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	s2.Close()
	// A regular file in the way is not removed.
	os.WriteFile(path, []byte("x"), 0o600)
	if _, err := Listen(Options{Path: path}, o.callbacks()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
}
