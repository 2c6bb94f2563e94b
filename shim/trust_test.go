package shim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/shm"
)

// traced runs a test program with GPUPROBE_TRACE going to a file and
// returns stdout and the trace.
func traced(t *testing.T, b *built, env []string, args ...string) (string, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "trace.log")
	out, errOut, err := run(t, b, append(env, "GPUPROBE_TRACE="+log), b.app, args...)
	if err != nil {
		t.Fatalf("app %v: %v\n%s", args, err, errOut)
	}
	tr, _ := os.ReadFile(log)
	return out, string(tr)
}

// wantTrace checks that the trace has every want and none of the nots.
func wantTrace(t *testing.T, tr string, want []string, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(tr, w) {
			t.Errorf("trace lacks %q:\n%s", w, tr)
		}
	}
	for _, n := range not {
		if strings.Contains(tr, n) {
			t.Errorf("trace has %q:\n%s", n, tr)
		}
	}
}

// memfdWith returns a memfd holding b with the given seals, closed when
// the test ends. Call it from the test's goroutine.
func memfdWith(t *testing.T, b []byte, seals int) *os.File {
	t.Helper()
	f, err := memfd(b, seals)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// memfd returns a memfd holding b with the given seals; the caller closes
// it (the liar's server goroutine, after sending it).
func memfd(b []byte, seals int) (*os.File, error) {
	fd, err := unix.MemfdCreate("liar", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "liar")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// liar is an agent server that says what a test wants: the launch ring's
// descriptor and fd, and the PATCHED answer with its image memfd.
type liar struct {
	ring    *os.File
	size    uint64
	patched func(id uint32) ([]byte, *os.File)
}

func readFrame(r io.Reader) (uint16, []byte, error) {
	var h [agentwire.FrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, binary.LittleEndian.Uint32(h[8:]))
	_, err := io.ReadFull(r, p)
	return binary.LittleEndian.Uint16(h[6:]), p, err
}

func (l *liar) serve(t *testing.T, c *net.UnixConn) {
	defer c.Close()
	if typ, _, err := readFrame(c); err != nil || typ != uint16(agentwire.FrameHello) {
		return
	}
	w, err := agentwire.MarshalWelcome(agentwire.Welcome{Session: 1, Regions: []agentwire.RegionInfo{
		{Role: agentwire.RoleLaunchRing, Kind: shm.KindRing, RegionSize: l.size, Name: "launches"}}})
	if err != nil {
		t.Error(err)
		return
	}
	if _, _, err := c.WriteMsgUnix(w, unix.UnixRights(int(l.ring.Fd())), nil); err != nil {
		return
	}
	for {
		typ, p, err := readFrame(c)
		if err != nil {
			return
		}
		req, _, _, err := agentwire.UnmarshalPatch(p)
		if typ != uint16(agentwire.FramePatch) || err != nil || l.patched == nil {
			return
		}
		frame, f := l.patched(req.ID)
		if f == nil {
			return
		}
		_, _, err = c.WriteMsgUnix(frame, unix.UnixRights(int(f.Fd())), nil)
		f.Close() // sent: the shim holds its own descriptor
		if err != nil {
			return
		}
	}
}

func startLiar(t *testing.T, l *liar) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "liar.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); l.serve(t, c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return path
}

// ringBytes returns a fresh launch ring's bytes and its region size.
func ringBytes(t *testing.T) ([]byte, uint64) {
	t.Helper()
	r, err := newRing()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	size := r.Region().Header().RegionSize
	b := make([]byte, size)
	if _, err := r.Region().File().ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b, size
}

// TestRegionChecks: a launch ring memfd shorter than its descriptor says
// (which SIGBUSed the application at the record that crossed its end) or
// one that could be shrunk later is refused; the app runs as without the
// shim.
func TestRegionChecks(t *testing.T) {
	b := binaries(t)
	plain, _, err := run(t, b, nil, b.app, "cudart", "basic", "20")
	if err != nil {
		t.Fatal(err)
	}
	ring, size := ringBytes(t)
	cases := []struct {
		name string
		data []byte
		seal int
		want string
	}{
		{"short", ring[:4096], unix.F_SEAL_SHRINK | unix.F_SEAL_GROW, "memfd smaller than announced"},
		{"unsealed", ring, 0, "memfd not sealed"},
		{"sealed", ring, unix.F_SEAL_SHRINK | unix.F_SEAL_GROW, "connected to"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := startLiar(t, &liar{ring: memfdWith(t, c.data, c.seal), size: size})
			out, tr := traced(t, b, preload(b, path), "cudart", "basic", "20")
			if out != plain {
				t.Errorf("output:\n%s\nwant:\n%s", out, plain)
			}
			wantTrace(t, tr, []string{c.want}, nil)
			if c.name != "sealed" {
				wantTrace(t, tr, []string{"no usable launch ring"}, []string{"connected to"})
			}
		})
	}
}

// TestPatchedImageChecks: a patched image whose memfd is shorter than
// image_size, or not sealed against writes and shrinking, is not loaded:
// the original image is.
func TestPatchedImageChecks(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptx := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	plain, _, err := run(t, b, nil, b.app, "dlsym", "ptx", ptx)
	if err != nil {
		t.Fatal(err)
	}
	ring, size := ringBytes(t)
	img := append(bytes.Repeat([]byte{' '}, 65535), 0)
	all := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	cases := []struct {
		name string
		data []byte
		seal int
		want string
	}{
		{"short", img[:100], all, "memfd smaller than announced"},
		{"unsealed", img, 0, "memfd not sealed"},
		{"writable", img, unix.F_SEAL_SHRINK | unix.F_SEAL_GROW, "memfd not sealed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &liar{ring: memfdWith(t, ring, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW), size: size}
			l.patched = func(id uint32) ([]byte, *os.File) {
				frame, err := agentwire.MarshalPatched(&agentwire.Patched{ID: id, Image: img,
					Kernels: []agentwire.PatchedKernel{{Name: "_Z9vectorAddPKfS1_Pfi", ParamIndex: 4}}})
				if err != nil {
					t.Error(err)
				}
				f, err := memfd(c.data, c.seal)
				if err != nil {
					t.Error(err)
				}
				return frame, f
			}
			out, tr := traced(t, b, preload(b, startLiar(t, l)), "dlsym", "ptx", ptx)
			if out != plain {
				t.Errorf("output:\n%s\nwant:\n%s", out, plain)
			}
			wantTrace(t, tr, []string{"connected to", c.want, "loading the original image"},
				[]string{"loaded the patched image"})
		})
	}
}

// TestSocketDir: a socket in a world-writable directory is refused unless
// the directory is sticky and root's (/tmp); the path is checked before
// connecting.
func TestSocketDir(t *testing.T) {
	b := binaries(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to chown the directory")
	}
	cases := []struct {
		name  string
		mode  os.FileMode
		owner int
		want  string
	}{
		{"world-writable", 0o777, 0, "socket directory is world-writable"},
		{"sticky, not root's", 0o777 | os.ModeSticky, 65534, "socket directory is world-writable"},
		{"sticky and root's", 0o777 | os.ModeSticky, 0, "connected to"},
		{"private", 0o755, 0, "connected to"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			a := startAgentAt(t, filepath.Join(dir, "agent.sock"), 256, 1024, agent.Options{})
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, c.owner, c.owner); err != nil {
				t.Fatal(err)
			}
			_, tr := traced(t, b, preload(b, a.path), "cudart", "basic", "2")
			if c.want == "connected to" {
				wantTrace(t, tr, []string{c.want}, []string{"forwarding only"})
			} else {
				wantTrace(t, tr, []string{c.want, "forwarding only"}, []string{"connected to"})
			}
		})
	}
}

// TestServerUID: a collector running as another uid (here nobody, the test
// binary run as its helper agent) is refused: by the socket's owner, and,
// when the socket is root's, by SO_PEERCRED; GPUPROBE_SERVER_UID names a
// uid that is accepted.
func TestServerUID(t *testing.T) {
	b := binaries(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run a collector as another uid")
	}
	const uid = 65534
	dir, err := os.MkdirTemp("", "gpuprobe-uid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, sockDir := filepath.Join(dir, "helper"), filepath.Join(dir, "run")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{os.Chmod(dir, 0o755), os.WriteFile(bin, self, 0o755), os.Mkdir(sockDir, 0o755),
		os.Chown(sockDir, uid, uid)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(sockDir, "agent.sock")
	col := exec.Command(bin, "-test.run=^$")
	col.Env = append(os.Environ(), helperEnv+"="+path)
	col.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	colOut, err := col.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Process.Kill(); col.Wait() })
	lines := bufio.NewScanner(colOut)
	if !lines.Scan() || lines.Text() != "listening" {
		t.Fatalf("collector: %q", lines.Text())
	}
	go func() { // keep its pipe drained
		for lines.Scan() {
		}
	}()
	refused := []string{"forwarding only"}
	_, tr := traced(t, b, preload(b, path), "cudart", "basic", "2")
	wantTrace(t, tr, append(refused, "socket owned by a uid not accepted"), []string{"connected to"})
	_, tr = traced(t, b, append(preload(b, path), "GPUPROBE_SERVER_UID=65534"), "cudart", "basic", "2")
	wantTrace(t, tr, []string{"connected to"}, refused)
	// A socket file root's, the server still nobody's: the peer's
	// credentials decide.
	if err := os.Lchown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	_, tr = traced(t, b, preload(b, path), "cudart", "basic", "2")
	wantTrace(t, tr, append(refused, "server runs as a uid not accepted"), []string{"connected to"})
}

// TestReconnect: the collector restarts while the application launches;
// the shim handshakes again, later launches reach the new collector (after
// their kernel's name record), and the new HELLO reports what was lost:
// everything the old collector left unread plus what was launched while
// there was none.
func TestReconnect(t *testing.T) {
	b := binaries(t)
	const n = 100
	plain, _, err := run(t, b, nil, b.app, "cudart", "slow", "100")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.sock")
	a1 := startAgentAt(t, path, 256, 1024, agent.Options{})
	log := filepath.Join(t.TempDir(), "trace.log")
	app := exec.Command(b.app, "cudart", "slow", "100")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE="+log)
	app.Env = append(app.Env, preload(b, path)...)
	a2, got := restartAfterFirstLine(t, app, a1, path, 256, agent.Options{})
	if got != plain {
		t.Errorf("output:\n%s\nwant:\n%s", got, plain)
	}
	s1, s2 := a1.waitGone(t, 1), a2.waitGone(t, 1)
	tr, _ := os.ReadFile(log)
	if len(s1) != 1 || len(s2) != 1 {
		t.Fatalf("sessions: %d then %d, want 1 and 1\n%s", len(s1), len(s2), tr)
	}
	st1, st2 := s1[0].read(t), s2[0].read(t)
	unread := st1.launchRing // names are announced again, not counted lost
	l1, l2 := len(st1.launches), len(st2.launches)
	if l2 < n/4 {
		t.Errorf("the new collector got %d of %d launches\n%s", l2, n, tr)
	}
	if len(st1.devices) != 1 || len(st2.devices) != 1 {
		t.Errorf("device records: %d then %d, want one per session", len(st1.devices), len(st2.devices))
	}
	for _, l := range st2.launches {
		if l.PID != uint32(app.Process.Pid) {
			t.Errorf("launch %d: pid %d, want %d", l.LaunchID, l.PID, app.Process.Pid)
		}
	}
	h := s2[0].peer.Hello
	// Unread by the first collector (it read nothing), plus the launches
	// in neither ring. A launch while the new HELLO is on its way is lost
	// but not counted: at most one here (10 ms between launches).
	want := uint64(unread + n - l1 - l2)
	if h.Flags&agentwire.HelloReconnect == 0 || h.Sessions != 1 || h.Lost > want || h.Lost+1 < want {
		t.Errorf("new HELLO: flags %#x sessions %d lost %d, want bit 0, 1, %d (%d and %d launches recorded)\n%s",
			h.Flags, h.Sessions, h.Lost, want, l1, l2, tr)
	}
	if !strings.Contains(string(tr), "reconnected to") {
		t.Errorf("trace:\n%s", tr)
	}
}

// TestReconnectPatch: a module loaded after a collector restart is patched
// by the new collector and bound to its regions; the one loaded before
// keeps what it was given.
func TestReconnectPatch(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptx := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	patch := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		return p.Patch(r, bind)
	}
	path := filepath.Join(t.TempDir(), "agent.sock")
	a1 := startPatchAgentAt(t, path, patch)
	log := filepath.Join(t.TempDir(), "trace.log")
	app := exec.Command(b.app, "dlsym", "ptxagain", ptx)
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE="+log)
	app.Env = append(app.Env, preload(b, path)...)
	in, err := app.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	appOut, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	app.Stderr = &errb
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer app.Process.Kill()
	r := bufio.NewReader(appOut)
	var out strings.Builder
	for !strings.Contains(out.String(), "app: first load done") {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("app: %v\n%s%s", err, out.String(), errb.String())
		}
		out.WriteString(line)
	}
	a1.srv.Close()
	a2 := startPatchAgentAt(t, path, patch)
	// The shim's own word, not the agent's session count: the agent counts
	// a session at its HELLO, before the shim has installed the WELCOME,
	// and a load in between is not patched (it fails open).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tr, _ := os.ReadFile(log); strings.Contains(string(tr), "reconnected to ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the app did not reconnect within 10 s")
		}
	}
	in.Write([]byte("\n"))
	rest, _ := io.ReadAll(r)
	out.Write(rest)
	if err := app.Wait(); err != nil {
		t.Fatalf("app: %v\n%s", err, errb.String())
	}
	tr, _ := os.ReadFile(log)
	a1.mu.Lock()
	n1 := len(a1.answers)
	a1.mu.Unlock()
	a2.mu.Lock()
	n2 := len(a2.answers)
	a2.mu.Unlock()
	if n1 != 1 || n2 != 1 {
		t.Errorf("PATCHED answers: %d before and %d after the restart, want 1 and 1", n1, n2)
	}
	// The region global of each module: the second is the new session's.
	regs := regexp.MustCompile(`global \S+ \(kind 1\) = (0x[0-9a-f]+)`).FindAllStringSubmatch(string(tr), -1)
	if len(regs) != 2 || regs[0][1] == regs[1][1] {
		t.Errorf("region globals %v, want two different addresses", regs)
	}
	if c := strings.Count(string(tr), "loaded the patched image"); c != 2 {
		t.Errorf("%d patched loads, want 2\n%s", c, tr)
	}
	// Both modules' launches carry the hidden launch id.
	if c := len(extraRe.FindAllString(out.String(), -1)); c < 2 {
		t.Errorf("launch ids in %d launches:\n%s", c, out.String())
	}
}
