package verifier_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

const bpfDir = "../../testdata/bpf"

func ctxSize(k jit.ProbeKind) int {
	if k == jit.ProbeMemCapture {
		return jit.MemCtxSize
	}
	return 0
}

// TestTestdataObjects verifies every GPU program of the project's own C
// programs (built by `make bpf-objects`).
func TestTestdataObjects(t *testing.T) {
	objs, _ := filepath.Glob(filepath.Join(bpfDir, "*.o"))
	if len(objs) == 0 {
		t.Fatal("no objects in testdata/bpf: run make bpf-objects")
	}
	for _, obj := range objs {
		progs, err := jit.LoadELF(obj)
		if err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
		for _, p := range progs {
			if !p.IsGPU() {
				continue
			}
			t.Run(filepath.Base(obj)+"/"+p.Name, func(t *testing.T) {
				res, err := verifier.Verify(p, verifier.Options{CtxSize: ctxSize(p.Kind)})
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				t.Logf("%d insns: %d steps, %d states, %d back edges, %d funcs, unaligned %v",
					len(p.Insns), res.Steps, res.States, len(res.BackEdges), len(res.Funcs), res.Unaligned)
			})
		}
	}
}

// TestSourceLineFromBTF compiles a C program that forgets a NULL check and
// checks that the rejection names the C line from BTF.
func TestSourceLineFromBTF(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatal("clang not installed: the BTF line test needs clang -target bpf")
	}
	obj := filepath.Join(t.TempDir(), "unchecked.o")
	src := filepath.Join(bpfDir, "bad", "unchecked.c")
	if out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-mcpu=v3", "-I", "../include", "-c", src, "-o", obj).CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	progs, err := jit.LoadELF(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if p.Name != "unchecked" {
			continue
		}
		_, err := verifier.Verify(p, verifier.Options{})
		var ve *verifier.Error
		if !errors.As(err, &ve) {
			t.Fatalf("accepted, want a NULL-check rejection (err %v)", err)
		}
		if !strings.Contains(ve.Reason, "may be NULL") || !strings.Contains(ve.Line, "unchecked.c:17") || !strings.Contains(ve.Line, "*v += 1") {
			t.Fatalf("error %q: want the NULL reason and line unchecked.c:17 \"*v += 1\"", err)
		}
		t.Log(err)
		return
	}
	t.Fatal("program unchecked not found")
}
