package ptxmod_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

// TestCompiledProbes parses the PTX that `gpuprobe compile` (the eBPF to
// PTX compiler) writes for every object in testdata/bpf, with and without
// -entry: it must round-trip, and with -entry the parser must find the
// test kernels ptxas compiles.
func TestCompiledProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: builds cmd/gpuprobe")
	}
	root := filepath.Join(filepath.Dir(fatbintest.Source(t, "vectoradd.cu")), "..", "..")
	objs, err := filepath.Glob(filepath.Join(root, "testdata", "bpf", "*.o"))
	if err != nil || len(objs) == 0 {
		t.Fatalf("no objects in testdata/bpf (make -f testdata/bpf/bpf.mk bpf-objects): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "gpuprobe")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/gpuprobe")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gpuprobe: %v\n%s", err, out)
	}
	for _, obj := range objs {
		for _, entry := range []bool{false, true} {
			name := filepath.Base(obj)
			args := []string{"compile", obj}
			if entry {
				name += "-entry"
				args = []string{"compile", "-entry", obj}
			}
			t.Run(name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(bin, args...)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				var ee *exec.ExitError
				if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
					t.Fatalf("gpuprobe %v: %v\n%s", args, err, stderr.String())
				}
				src := stdout.Bytes()
				m, err := ptxmod.Parse(src)
				if err != nil {
					t.Fatalf("%v\n%s", err, src)
				}
				if out, _ := m.Bytes(); !bytes.Equal(out, src) {
					t.Fatal("round trip differs")
				}
				if len(m.Target) == 0 {
					t.Logf("no GPU program compiled (header-less output): %s", stderr.String())
					return
				}
				funcs := 0
				for _, f := range m.Funcs {
					if !f.Entry && f.HasBody {
						funcs++
					}
				}
				if funcs == 0 {
					t.Errorf("no .func definitions found")
				}
				file := filepath.Join(t.TempDir(), "probe.ptx")
				if err := os.WriteFile(file, src, 0o644); err != nil {
					t.Fatal(err)
				}
				compiled := fatbintest.Ptxas(t, m.Target[0], file)
				var kernels []string
				for _, k := range m.Kernels() {
					kernels = append(kernels, k.Name)
				}
				slices.Sort(compiled)
				slices.Sort(kernels)
				if !slices.Equal(kernels, compiled) {
					t.Errorf("parser finds kernels %q, ptxas compiles %q", kernels, compiled)
				}
				if entry && len(kernels) == 0 {
					t.Error("-entry module without kernels")
				}
			})
		}
	}
}
