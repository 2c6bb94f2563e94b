package shim

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/stacksym"
)

// liveRun starts prog under the shim with an agent that asks for stacks,
// waits for its "launched" line, and returns the line, the session's
// records read while it still runs (so that its maps and memory can be
// read), and a function that lets it exit.
func liveRun(t *testing.T, b *built, prog string, args ...string) (string, *stream, int, func()) {
	t.Helper()
	a := startAgent(t, 256, 1024, agent.Options{Settings: agentwire.Settings{StacksPerSecond: 1000}})
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=1", "GPUPROBE_DISABLE=", "GPUPROBE_PATCH=", "TRACEPARENT=")
	cmd.Env = append(cmd.Env, preload(b, a.path)...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := func() { in.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "launched") {
		done()
		t.Fatalf("%s: %q, %v\n%s", prog, line, err, errb.String())
	}
	a.mu.Lock()
	s := a.sessions[0]
	a.mu.Unlock()
	st := readRing(t, s.names, s.ring)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return line, st, cmd.Process.Pid, done
}

// joined is the stack of launch id, its parts put together.
func joined(t *testing.T, st *stream, id uint64) record.Stack {
	t.Helper()
	var s record.Stack
	for _, p := range st.stacks {
		if p.LaunchID != id {
			continue
		}
		if int(p.Part) != 0 && s.Flags&record.StackLast != 0 || len(s.Native)+len(s.Python) > 0 && int(p.Part) == 0 {
			t.Fatalf("stack parts of launch %d out of order", id)
		}
		s.PID, s.TID, s.Flags, s.PyVersion = p.PID, p.TID, p.Flags, p.PyVersion
		s.Native = append(s.Native, p.Native...)
		s.Python = append(s.Python, p.Python...)
	}
	if s.Flags&record.StackLast == 0 {
		t.Fatalf("launch %d has no complete stack (%d stack records)", id, len(st.stacks))
	}
	return s
}

// TestStackNative: a C program built with frame pointers launches from
// stack_inner, called by stack_outer, called by main; its sampled
// launch's stack, symbolised from the live process's maps, names them in
// that order, the shim's own frames left out.
func TestStackNative(t *testing.T) {
	b := binaries(t)
	app := filepath.Join(b.dir, "stack-app")
	if err := gcc("-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-Wall", "-Werror", "-o", app, "testdata/stack_app.c", "-ldl"); err != nil {
		t.Fatal(err)
	}
	_, st, pid, done := liveRun(t, b, app)
	defer done()
	if len(st.launches) != 1 {
		t.Fatalf("%d launches, want 1", len(st.launches))
	}
	s := joined(t, st, st.launches[0].LaunchID)
	var r stacksym.Resolver
	fs := r.Native(uint32(pid), s.Native, nil)
	var names []string
	for _, f := range fs {
		names = append(names, f.Function)
	}
	if len(names) < 3 || names[0] != "stack_inner" || names[1] != "stack_outer" || names[2] != "main" {
		t.Fatalf("native frames %q, want stack_inner, stack_outer, main first", names)
	}
	if s.PyVersion != 0 || len(s.Python) != 0 {
		t.Errorf("a C program's stack has Python frames (version %#x, %d)", s.PyVersion, len(s.Python))
	}
}

// findPython returns an interpreter of that name that runs: pyenv's
// versions first (its shim on PATH runs only the selected version).
func findPython(name string) string {
	home, _ := os.UserHomeDir()
	cands, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", strings.TrimPrefix(name, "python")+".*", "bin", name))
	if p, err := exec.LookPath(name); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if exec.Command(c, "-c", "import ctypes").Run() == nil {
			return c
		}
	}
	return ""
}

// launchLine is the line of testdata/stack_app.py marked "launch here".
func launchLine(t *testing.T) int {
	b, err := os.ReadFile("testdata/stack_app.py")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "# launch here") {
			return i + 1
		}
	}
	t.Fatal("no launch line in stack_app.py")
	return 0
}

// TestStackPython: a CPython program launching by ctypes from step()
// gets a stack whose top Python frame is step's code object at the
// launch line, read without the GIL (ctypes releases it); under a CPython
// whose layout the shim does not know, the stack has no Python frames and
// says so.
func TestStackPython(t *testing.T) {
	b := binaries(t)
	for _, tc := range []struct {
		py      string
		ver     uint16
		unknown bool
	}{{"python3.10", 0x030a, false}, {"python3.11", 0x030b, false}, {"python3.12", 0x030c, false},
		{"python3.13", 0x030d, false}, {"python3.9", 0x0309, true}} {
		t.Run(tc.py, func(t *testing.T) {
			bin := findPython(tc.py)
			if bin == "" {
				if tc.py == "python3.11" {
					t.Fatal("python3.11 (with ctypes) is needed: the CI image has it")
				}
				t.Skipf("%s not installed", tc.py)
			}
			line, st, pid, done := liveRun(t, b, bin, "testdata/stack_app.py")
			defer done()
			code, err := strconv.ParseUint(strings.Fields(line)[1], 10, 64)
			if err != nil || len(st.launches) != 1 {
				t.Fatalf("line %q (%v), %d launches", line, err, len(st.launches))
			}
			s := joined(t, st, st.launches[0].LaunchID)
			if s.PyVersion != tc.ver {
				t.Fatalf("py_version %#x, want %#x", s.PyVersion, tc.ver)
			}
			if tc.unknown {
				if len(s.Python) != 0 || s.Flags&record.StackPythonUnknown == 0 {
					t.Fatalf("unknown layout: %d Python frames, flags %#x", len(s.Python), s.Flags)
				}
				return
			}
			if len(s.Python) < 2 || s.Python[0].Code != code {
				t.Fatalf("Python frames %+v, want step's code %#x on top", s.Python, code)
			}
			var r stacksym.Resolver
			fs := r.Python(uint32(pid), s.PyVersion, s.Python[:1], nil)
			if want := launchLine(t); fs[0].Function != "step" || fs[0].Line != want {
				t.Fatalf("top Python frame %+v, want step at line %d", fs[0], want)
			}
		})
	}
}
