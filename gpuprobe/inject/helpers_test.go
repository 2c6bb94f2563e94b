package inject

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// samplePTX builds testdata/cuda/inject/NAME.cu into PTX for arch.
func samplePTX(t testing.TB, name, arch string) []byte {
	t.Helper()
	src := fatbintest.Source(t, filepath.Join("inject", name+".cu"))
	out := fatbintest.Build(t, src, name+"."+arch+".ptx", "-ptx", "-O3", "-arch", arch)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readTestdata reads a file of testdata/cuda/inject.
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(fatbintest.Source(t, filepath.Join("inject", name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kernelPhases loads the built-in probe set.
func kernelPhases(t testing.TB) []*jit.Program {
	t.Helper()
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	return progs
}

// bpfObject loads testdata/bpf/NAME.o.
func bpfObject(t testing.TB, name string) []*jit.Program {
	t.Helper()
	progs, err := jit.LoadELF(filepath.Join("..", "..", "testdata", "bpf", name+".o"))
	if err != nil {
		t.Fatal(err)
	}
	return progs
}

// emptyProbe is a program that returns 0 at once, of the given kind.
func emptyProbe(kind jit.ProbeKind, target string) *jit.Program {
	sec := map[jit.ProbeKind]string{jit.ProbeEntry: "kprobe/", jit.ProbeExit: "kretprobe/", jit.ProbeMemCapture: "kprobe/__memcapture/"}[kind]
	return &jit.Program{
		Name:    "empty_" + kind.String(),
		Section: sec + target,
		Kind:    kind,
		Target:  target,
		Insns:   asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	}
}

// retarget returns copies of progs aimed at target.
func retarget(progs []*jit.Program, target string) []*jit.Program {
	out := make([]*jit.Program, len(progs))
	for i, p := range progs {
		c := *p
		c.Target = target
		out[i] = &c
	}
	return out
}

// ptxas assembles module for arch, failing the test with ptxas's output.
func ptxas(t *testing.T, module []byte, arch string) {
	t.Helper()
	if _, err := ptx.Assemble(context.Background(), string(module), arch); err != nil {
		t.Fatalf("ptxas -arch=%s: %v\n%s", arch, err, numbered(module))
	}
}

// numbered prefixes each line with its number, for failure messages.
func numbered(b []byte) string {
	var sb strings.Builder
	for i, l := range strings.Split(string(b), "\n") {
		fmt.Fprintf(&sb, "%5d  %s\n", i+1, l)
	}
	return sb.String()
}

// parse parses a module or fails the test.
func parse(t *testing.T, b []byte) *ptxmod.Module {
	t.Helper()
	m, err := ptxmod.Parse(b)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, numbered(b))
	}
	return m
}

// funcText returns the source text of the named function.
func funcText(t *testing.T, m *ptxmod.Module, name string) string {
	t.Helper()
	f := m.Func(name)
	if f == nil {
		t.Fatalf("no function %s", name)
	}
	return m.Text(f.Span)
}
