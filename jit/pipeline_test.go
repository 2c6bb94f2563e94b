package jit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// ctxSize is the context a GPU program of this kind gets in r1.
func ctxSize(k jit.ProbeKind) int {
	if k == jit.ProbeMemCapture {
		return jit.MemCtxSize
	}
	return 0
}

// TestPipelineObjects runs every GPU program of testdata/bpf through the
// whole pipeline: ELF loader, verifier, PTX compiler, and ptxas for sm_90.
func TestPipelineObjects(t *testing.T) {
	bpfObject(t, "threadhist") // builds every object
	objs, err := filepath.Glob(filepath.Join(bpfDir, "*.o"))
	if err != nil || len(objs) == 0 {
		t.Fatalf("no objects in %s: %v", bpfDir, err)
	}
	var funcs []*ptx.Func
	gpu := 0
	for _, obj := range objs {
		progs, err := jit.LoadELF(obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range progs {
			if !p.IsGPU() {
				continue
			}
			gpu++
			t.Run(filepath.Base(obj)+"/"+p.Name, func(t *testing.T) {
				if _, err := verifier.Verify(p, verifier.Options{CtxSize: ctxSize(p.Kind)}); err != nil {
					t.Fatalf("verifier: %v", err)
				}
				f, err := ptx.Compile(p, ptx.Options{Prefix: "t_" + ptx.Sanitize(strings.TrimSuffix(filepath.Base(obj), ".o")+"_"+p.Name)})
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				funcs = append(funcs, f)
			})
		}
	}
	if gpu < 9 {
		t.Errorf("only %d GPU programs in testdata/bpf, want at least 9", gpu)
	}
	if len(funcs) == 0 {
		return
	}
	if _, err := ptx.PtxasPath(); err != nil {
		t.Fatalf("ptxas is needed to check the generated PTX: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ptx.Assemble(ctx, ptx.TestModule(funcs...), ptx.DefaultArch); err != nil {
		t.Fatalf("ptxas rejects the PTX of the testdata programs: %v", err)
	}
}
