package stacksym

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
)

// pythons are the CPython versions the resolver reads, by record version.
var pythons = []struct {
	name string
	ver  uint16
}{{"python3.10", 0x030a}, {"python3.11", 0x030b}, {"python3.12", 0x030c}, {"python3.13", 0x030d}}

// findPython returns an interpreter of that name that runs: pyenv's
// versions first (its shim on PATH runs only the selected version).
func findPython(name string) string {
	home, _ := os.UserHomeDir()
	cands, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", strings.TrimPrefix(name, "python")+".*", "bin", name))
	if p, err := exec.LookPath(name); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if exec.Command(c, "-c", "pass").Run() == nil {
			return c
		}
	}
	return ""
}

// TestPythonFrame runs testdata/frame.py under each CPython found and
// resolves its function's code object and instruction from its memory:
// the name, file and line the interpreter itself reports.
func TestPythonFrame(t *testing.T) {
	found := 0
	for _, py := range pythons {
		t.Run(py.name, func(t *testing.T) {
			bin := findPython(py.name)
			if bin == "" {
				t.Skipf("%s not installed (PATH, ~/.pyenv/versions)", py.name)
			}
			found++
			script, _ := filepath.Abs("testdata/frame.py")
			cmd := exec.Command(bin, script)
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { in.Close(); _ = cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("reading the script's line: %v", err)
			}
			var code, lasti uint64
			var lineno int
			if _, err := fmt.Sscan(line, &code, &lasti, &lineno); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			instr := lasti / 2 // 3.10: f_lasti in code units
			if L := codeLayouts[py.ver]; L.adaptive >= 0 {
				instr = code + uint64(L.adaptive) + lasti
			}
			var r Resolver
			fs := r.Python(uint32(cmd.Process.Pid), py.ver, []record.PyFrame{{Code: code, Instr: instr}}, nil)
			if len(fs) != 1 || fs[0].Function != "step" || fs[0].Line != lineno || !strings.HasSuffix(fs[0].File, "frame.py") {
				t.Fatalf("resolved %+v, want step at frame.py:%d", fs, lineno)
			}
			// A pointer that is no code object resolves to its address only.
			fs = r.Python(uint32(cmd.Process.Pid), py.ver, []record.PyFrame{{Code: code + 8, Instr: instr}}, nil)
			if fs[0].Function != "" || fs[0].Line != 0 {
				t.Fatalf("a non-code pointer resolved to %+v", fs[0])
			}
		})
	}
	if found == 0 {
		t.Skip("no CPython 3.10-3.13 installed")
	}
}
