package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
)

func envValue(env []string, key string) (string, int) {
	v, n := "", 0
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v, n = val, n+1
		}
	}
	return v, n
}

func TestRunEnv(t *testing.T) {
	const shim = "/opt/gp/libgpuprobe.so"
	cases := []struct {
		name        string
		environ     []string
		trace       string
		wantPreload string
		wantTrace   string
	}{
		{"fresh", []string{"PATH=/bin"}, "", shim, ""},
		{"appends to LD_PRELOAD", []string{"LD_PRELOAD=/a.so", "PATH=/bin"}, "", "/a.so:" + shim, ""},
		{"space-separated LD_PRELOAD", []string{"LD_PRELOAD=/a.so /b.so"}, "", "/a.so /b.so:" + shim, ""},
		{"already preloaded", []string{"LD_PRELOAD=/a.so:" + shim}, "", "/a.so:" + shim, ""},
		{"replaces the socket", []string{"GPUPROBE_SOCKET=/old.sock"}, "", shim, ""},
		{"keeps an existing trace", []string{"GPUPROBE_TRACE=/t.log"}, "", shim, "/t.log"},
		{"--trace wins", []string{"GPUPROBE_TRACE=/t.log"}, "1", shim, "1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := runEnv(c.environ, shim, "/run/x.sock", c.trace)
			if v, n := envValue(env, "LD_PRELOAD"); v != c.wantPreload || n != 1 {
				t.Errorf("LD_PRELOAD=%q (%d times), want %q once", v, n, c.wantPreload)
			}
			if v, n := envValue(env, "GPUPROBE_SOCKET"); v != "/run/x.sock" || n != 1 {
				t.Errorf("GPUPROBE_SOCKET=%q (%d times)", v, n)
			}
			if v, n := envValue(env, "GPUPROBE_TRACE"); v != c.wantTrace || n > 1 {
				t.Errorf("GPUPROBE_TRACE=%q (%d times), want %q", v, n, c.wantTrace)
			}
			if v, _ := envValue(env, "PATH"); slices.Contains(c.environ, "PATH=/bin") && v != "/bin" {
				t.Errorf("PATH lost: %v", env)
			}
		})
	}
}

// TestRunEnvServerUID: a user other than root trusts a collector of their
// own uid (the shim's GPUPROBE_SERVER_UID), root adds nothing, and a uid
// the environment names is kept.
func TestRunEnvServerUID(t *testing.T) {
	want, n := "", 0
	if uid := os.Getuid(); uid != 0 {
		want, n = strconv.Itoa(uid), 1
	}
	if v, c := envValue(runEnv([]string{"PATH=/bin"}, "/s.so", "/x.sock", ""), "GPUPROBE_SERVER_UID"); v != want || c != n {
		t.Errorf("GPUPROBE_SERVER_UID=%q (%d times), want %q %d times", v, c, want, n)
	}
	if v, c := envValue(runEnv([]string{"GPUPROBE_SERVER_UID=7"}, "/s.so", "/x.sock", ""), "GPUPROBE_SERVER_UID"); v != "7" || c != 1 {
		t.Errorf("named uid: GPUPROBE_SERVER_UID=%q (%d times), want 7 once", v, c)
	}
}

func TestFindShim(t *testing.T) {
	dir := t.TempDir()
	shim := filepath.Join(dir, ShimName)
	if err := os.WriteFile(shim, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := func() (string, error) { return filepath.Join(dir, "gpuprobe"), nil }
	noExe := func() (string, error) { return filepath.Join(t.TempDir(), "gpuprobe"), nil }
	cases := []struct {
		name, flag, env string
		exe             func() (string, error)
		want, wantErr   string
	}{
		{"next to the binary", "", "", exe, shim, ""},
		{"--shim", shim, "", noExe, shim, ""},
		{"GPUPROBE_SHIM", "", shim, noExe, shim, ""},
		{"missing next to the binary", "", "", noExe, "", "make bin/libgpuprobe.so"},
		{"--shim is a directory", dir, "", exe, "", "not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GPUPROBE_SHIM", c.env)
			got, err := findShim(c.flag, c.exe)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestRunCommand(t *testing.T) {
	dir := t.TempDir()
	shim := filepath.Join(dir, ShimName)
	os.WriteFile(shim, []byte("ELF"), 0o644)
	var gotPath string
	var gotArgv, gotEnv []string
	old := execApp
	execApp = func(path string, argv, env []string) error { gotPath, gotArgv, gotEnv = path, argv, env; return nil }
	defer func() { execApp = old }()
	t.Setenv("GPUPROBE_SOCKET", "")

	cases := []struct {
		name     string
		args     []string
		code     int
		stderr   string
		socket   string
		wantArgv []string
	}{
		{"runs the app", []string{"--shim", shim, "--socket", "/tmp/a.sock", "--", "sh", "-c", "exit 3"}, 0, "", "/tmp/a.sock", []string{"sh", "-c", "exit 3"}},
		{"default socket", []string{"--shim", shim, "--", "true"}, 0, "", config.DefaultSocket, []string{"true"}},
		{"no app", []string{"--shim", shim}, 2, "no application given", "", nil},
		{"unknown app", []string{"--shim", shim, "--", "no-such-program-gpuprobe"}, 127, `application "no-such-program-gpuprobe"`, "", nil},
		{"missing shim", []string{"--shim", filepath.Join(dir, "nope.so"), "--", "true"}, 1, "nope.so", "", nil},
		{"bad flag", []string{"--bogus", "--", "true"}, 2, "flag provided but not defined", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gotPath, gotArgv, gotEnv = "", nil, nil
			var stdout, stderr bytes.Buffer
			code := runRun(c.args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.stderr)
			}
			if c.code != 0 {
				return
			}
			if want, _ := exec.LookPath(c.wantArgv[0]); gotPath != want || !slices.Equal(gotArgv, c.wantArgv) {
				t.Errorf("exec %q %q, want %q %q", gotPath, gotArgv, want, c.wantArgv)
			}
			if v, _ := envValue(gotEnv, "GPUPROBE_SOCKET"); v != c.socket {
				t.Errorf("GPUPROBE_SOCKET=%q, want %q", v, c.socket)
			}
			if v, _ := envValue(gotEnv, "LD_PRELOAD"); !strings.HasSuffix(v, shim) {
				t.Errorf("LD_PRELOAD=%q, want it to end with %s", v, shim)
			}
		})
	}
}

// startDump builds cmd/gpuprobe-harness and runs its agent-dump in the
// background; stop() waits for it to exit and returns its output.
func startDump(t *testing.T, args ...string) (socket string, stop func() string) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: builds cmd/gpuprobe-harness")
	}
	dir := t.TempDir()
	harness := filepath.Join(dir, "gpuprobe-harness")
	if out, err := exec.Command("go", "build", "-o", harness, "../gpuprobe-harness").CombinedOutput(); err != nil {
		t.Fatalf("go build gpuprobe-harness: %v\n%s", err, out)
	}
	socket = filepath.Join(dir, "agent.sock")
	var out bytes.Buffer
	cmd := exec.Command(harness, append([]string{"agent-dump", "--socket", socket}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for i := 0; ; i++ {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if i == 500 {
			t.Fatalf("agent-dump did not listen: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return socket, func() string {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent-dump: %v: %s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
			t.Errorf("agent-dump did not exit after its client: %s", out.String())
		}
		return out.String()
	}
}

// TestRunWithShim: `gpuprobe run` (exec replaced by a child process) starts
// the shim's test app against the MOCK libcuda, and agent-dump sees every
// launch. Needs gcc.
func TestRunWithShim(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	srcs, _ := filepath.Glob("../../shim/src/*.c")
	// The test application is every shim/testdata/app*.c, as the shim's
	// own tests build it.
	apps, _ := filepath.Glob("../../shim/testdata/app*.c")
	steps := [][]string{
		append([]string{"-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-I../../shim/src", "-I../../shm/include",
			"-I../../record/include", "-o", filepath.Join(dir, ShimName)}, append(srcs, "-ldl", "-lpthread")...),
		{"-O2", "-fPIC", "-shared", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(dir, "libcuda.so.1"),
			"../../shim/testdata/mock_libcuda.c"},
		append(append([]string{"-O2", "-I../../shm/include", "-o", filepath.Join(dir, "app")}, apps...), "-ldl", "-lpthread"),
	}
	for _, s := range steps {
		if out, err := exec.Command("gcc", s...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", s, err, out)
		}
	}
	old := execApp
	var appOut bytes.Buffer
	execApp = func(path string, argv, env []string) error {
		cmd := exec.Command(path, argv[1:]...)
		cmd.Env = append(env, "LD_LIBRARY_PATH="+dir)
		cmd.Stdout, cmd.Stderr = &appOut, &appOut
		return cmd.Run()
	}
	defer func() { execApp = old }()
	socket, stop := startDump(t, "--exit-after", "1")
	var stderr bytes.Buffer
	if code := runRun([]string{"--shim", filepath.Join(dir, ShimName), "--socket", socket, "--",
		filepath.Join(dir, "app"), "cudart", "basic", "20"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("gpuprobe run: exit %d: %s\n%s", code, stderr.String(), appOut.String())
	}
	out := stop()
	if !strings.Contains(appOut.String(), "mock: launches=23 ") {
		t.Errorf("app output: %s", appOut.String())
	}
	for _, want := range []string{
		"agent-dump: total clients=1 launches=23 names=2 syncs=1 memcpys=1 dropped=0 errors=0",
		"      21  _Z6vecAddPfS_S_i",
		"       2  _Z4gemmPKfS0_Pfi",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent-dump output lacks %q:\n%s", want, out)
		}
	}
}

// TestOptInSASS: --sass leaves exactly one GPUPROBE_SASS, set to 1, even
// over an application's GPUPROBE_SASS=0.
func TestOptInSASS(t *testing.T) {
	for _, env := range [][]string{{"PATH=/bin"}, {"GPUPROBE_SASS=0", "PATH=/bin"}, {"GPUPROBE_SASS=1"}} {
		if v, n := envValue(optInSASS(env), "GPUPROBE_SASS"); v != "1" || n != 1 {
			t.Errorf("optInSASS(%q): GPUPROBE_SASS %q %d times, want 1 once", env, v, n)
		}
	}
	o, err := parseRun([]string{"--sass", "--", "app"}, io.Discard)
	if err != nil || !o.sass {
		t.Fatalf("parseRun --sass: %+v, %v", o, err)
	}
}

// TestRunSocketNotice: a socket path no collector can serve gets one line
// on stderr and the application still runs (with the shim's own notice
// silenced); a socket that is there, or GPUPROBE_QUIET=1, gets none. A
// relative path is passed resolved.
func TestRunSocketNotice(t *testing.T) {
	dir := t.TempDir()
	shim := filepath.Join(dir, ShimName)
	if err := os.WriteFile(shim, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Chdir(dir)
	var ran bool
	var gotEnv []string
	old := execApp
	execApp = func(_ string, _, env []string) error { ran, gotEnv = true, env; return nil }
	defer func() { execApp = old }()
	cases := []struct {
		name, socket, quiet string
		line                string // "" = no line
		passed              string
	}{
		{"no collector", filepath.Join(dir, "absent.sock"), "", "no collector socket at " + filepath.Join(dir, "absent.sock"), filepath.Join(dir, "absent.sock")},
		{"not a socket", shim, "", shim + " is not a socket", shim},
		{"relative and wrong", "absent.sock", "", `relative path "absent.sock"`, filepath.Join(dir, "absent.sock")},
		{"relative and there", "live.sock", "", "", live},
		{"there", live, "", "", live},
		{"quiet", filepath.Join(dir, "absent.sock"), "1", "", filepath.Join(dir, "absent.sock")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GPUPROBE_QUIET", c.quiet)
			ran, gotEnv = false, nil
			var stderr bytes.Buffer
			if code := runRun([]string{"--shim", shim, "--socket", c.socket, "--", "true"}, io.Discard, &stderr); code != 0 || !ran {
				t.Fatalf("exit %d, ran %v: %s", code, ran, stderr.String())
			}
			lines := strings.Count(stderr.String(), "\n")
			if c.line == "" && stderr.Len() != 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			if c.line != "" && (lines != 1 || !strings.Contains(stderr.String(), c.line) || !strings.Contains(stderr.String(), "unprobed")) {
				t.Errorf("stderr %q, want one line with %q", stderr.String(), c.line)
			}
			if v, _ := envValue(gotEnv, "GPUPROBE_SOCKET"); v != c.passed {
				t.Errorf("GPUPROBE_SOCKET=%q, want %q", v, c.passed)
			}
			if v, _ := envValue(gotEnv, "GPUPROBE_QUIET"); c.quiet == "" && (v == "1") != (c.line != "") {
				t.Errorf("GPUPROBE_QUIET=%q after a line %v: the shim would say it again", v, c.line != "")
			}
		})
	}
}
