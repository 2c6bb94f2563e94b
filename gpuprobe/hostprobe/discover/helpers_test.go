package discover

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// built are the test programs and stand-in libraries, compiled once per
// test binary from testdata/c.
type built struct {
	dir         string
	driver      string // lib/libcuda.so.1: stand-in for the driver
	driverLink  string // lib/libcuda.so -> libcuda.so.1
	runtime     string // lib/libcudart.so.13: stand-in for the runtime
	renamedDrv  string // other/libnvdrv.so: the driver stand-in under another name
	plainLib    string // other/libplain.so: a shared library with no CUDA symbol
	holder      string // dlopens what it reads on stdin
	staticApp   string // defines cudaLaunchKernel
	strippedApp string // static_app stripped: no .symtab
	exportedApp string // static_app -rdynamic, stripped: only .dynsym
	dynamicApp  string // imports cudaLaunchKernel from the runtime stand-in
}

var (
	buildOnce sync.Once
	buildDir  string
	buildRes  built
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// artifacts builds the test programs (once) or fails the test.
func artifacts(t testing.TB) built {
	t.Helper()
	buildOnce.Do(func() { buildRes, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("building the test programs with gcc: %v", buildErr)
	}
	return buildRes
}

func build() (built, error) {
	dir, err := os.MkdirTemp("", "discover-test-")
	if err != nil {
		return built{}, err
	}
	buildDir = dir
	src := func(name string) string {
		p, _ := filepath.Abs(filepath.Join("testdata", "c", name))
		return p
	}
	for _, sub := range []string{"lib", "other", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return built{}, err
		}
	}
	b := built{
		dir:         dir,
		driver:      filepath.Join(dir, "lib", "libcuda.so.1"),
		driverLink:  filepath.Join(dir, "lib", "libcuda.so"),
		runtime:     filepath.Join(dir, "lib", "libcudart.so.13"),
		renamedDrv:  filepath.Join(dir, "other", "libnvdrv.so"),
		plainLib:    filepath.Join(dir, "other", "libplain.so"),
		holder:      filepath.Join(dir, "bin", "holder"),
		staticApp:   filepath.Join(dir, "bin", "static_app"),
		strippedApp: filepath.Join(dir, "bin", "static_app_stripped"),
		exportedApp: filepath.Join(dir, "bin", "static_app_exported"),
		dynamicApp:  filepath.Join(dir, "bin", "dynamic_app"),
	}
	plain := filepath.Join(dir, "plain.c")
	if err := os.WriteFile(plain, []byte("int plain(void) { return 1; }\n"), 0o644); err != nil {
		return built{}, err
	}
	cmds := [][]string{
		{"-shared", "-fPIC", "-o", b.driver, src("standin_driver.c")},
		{"-shared", "-fPIC", "-o", b.runtime, src("standin_runtime.c")},
		{"-shared", "-fPIC", "-o", b.renamedDrv, src("standin_driver.c")},
		{"-shared", "-fPIC", "-o", b.plainLib, plain},
		{"-o", b.holder, src("holder.c"), "-ldl"},
		{"-o", b.staticApp, src("static_app.c")},
		{"-s", "-o", b.strippedApp, src("static_app.c")},
		{"-rdynamic", "-s", "-o", b.exportedApp, src("static_app.c")},
		{"-o", b.dynamicApp, src("dynamic_app.c"), b.runtime, "-Wl,-rpath," + filepath.Dir(b.runtime)},
	}
	for _, args := range cmds {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			return built{}, fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.Symlink("libcuda.so.1", b.driverLink); err != nil {
		return built{}, err
	}
	return b, nil
}

// proc is a running test program that speaks the holder's protocol.
type proc struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// start runs argv with extra environment and waits for its "ready" line.
func start(t testing.TB, env []string, argv ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", argv, err)
	}
	p := &proc{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if l := p.line(); l != "ready" {
		t.Fatalf("%v: first line %q, want ready", argv, l)
	}
	return p
}

// line waits for the next output line. The deadline only guards against a
// hung test program; nothing is timed.
func (p *proc) line() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("pid %d: output closed", p.pid())
		}
		return l
	case <-time.After(30 * time.Second):
		p.t.Fatalf("pid %d: no output in 30 s", p.pid())
	}
	return ""
}

// dlopen makes the holder load path.
func (p *proc) dlopen(path string) {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.stdin, path); err != nil {
		p.t.Fatal(err)
	}
	if l := p.line(); l != "ok" {
		p.t.Fatalf("dlopen %s: %s", path, l)
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// mustID stats path or fails the test.
func mustID(t testing.TB, path string) Key {
	t.Helper()
	id, err := statID(path)
	if err != nil {
		t.Fatal(err)
	}
	return id.key()
}

// byKey finds the library with key k.
func byKey(libs []Library, k Key) (Library, bool) {
	for _, l := range libs {
		if l.Key() == k {
			return l, true
		}
	}
	return Library{}, false
}

// requireRoot skips the test when not run as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: this test needs root (mount namespaces, /proc/<pid>/root of other processes); CI runs as root")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
