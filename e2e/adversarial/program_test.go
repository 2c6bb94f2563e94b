package adversarial

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/e2e"
	"github.com/gpuprobe/gpuprobe/jit"
)

// leakSource is a GPU program that passes ebpf_puts an 8-byte stack
// buffer with no NUL: compiled, it would copy the 160 bytes of the
// kernel's local memory past the buffer into a host-call payload.
const leakSource = "testdata/bpf/bad/strleak.c"

// testProgramRefused: a collector whose programs[] names that object
// must refuse to start, with an error naming the program and the
// instruction of the call, before any client could get the program
// patched into its kernels. Running the program needs a GPU; refusing
// it is the verifier's work, which this checks on the real binary.
func (s *suite) testProgramRefused(t *testing.T) {
	obj, call := leakObject(t)
	dir := t.TempDir()
	ports, err := e2e.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "agent.sock")
	cfg := Config(socket, ports[0], ports[1], []int{0})
	anchor := "    poll_interval: "
	if !strings.Contains(cfg, anchor) {
		t.Fatalf("the suite's Config has no %q line to put programs before", anchor)
	}
	cfg = strings.Replace(cfg, anchor, "    programs:\n      - path: "+obj+"\n"+anchor, 1)
	col, err := e2e.StartCollector(t.Context(), s.otelcol, dir, cfg, func(context.Context) error {
		_, err := os.Stat(socket)
		return err
	})
	if err == nil {
		_ = col.Stop(MaxShutdown)
		t.Fatalf("the collector started (agent socket up) with %s, whose insn %d lets puts read past an 8-byte stack buffer; logs:\n%s",
			obj, call, tail(col.Logs(), 3000))
	}
	msg := err.Error()
	if !strings.Contains(msg, "exited before it was ready") {
		t.Fatalf("the collector did not exit on its own: %v", err)
	}
	for _, want := range []string{"programs[0]", "strleak", fmt.Sprintf("insn %d", call), "puts: string argument r1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the collector's refusal lacks %q:\n%s", want, tail(msg, 3000))
		}
	}
}

// leakObject builds leakSource with clang as bpf.mk does and returns the
// object's path and the index of its puts call.
func leakObject(t *testing.T) (string, int) {
	t.Helper()
	root, err := e2e.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(t.TempDir(), "strleak.o")
	cmd := exec.CommandContext(t.Context(), "clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
		"-I", filepath.Join(root, "jit", "include"), "-c", filepath.Join(root, leakSource), "-o", obj)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s: %v\n%s", leakSource, err, out)
	}
	progs, err := jit.LoadELF(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		for i, ins := range p.Insns {
			if ins.IsBuiltinCall() && ins.Constant == int64(jit.HelperPuts) {
				return obj, i
			}
		}
	}
	t.Fatalf("%s: no call of puts (helper %d)", obj, jit.HelperPuts)
	return "", 0
}
