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

// TestPipelineObjects runs every GPU program of testdata/bpf, built for
// each BPF CPU version clang offers (v3 is bpf.mk's; v1 has no JMP32 and no
// ALU32, as bpftime's examples are built), through the whole pipeline: ELF
// loader, verifier, PTX compiler, and ptxas for sm_90.
func TestPipelineObjects(t *testing.T) {
	bpfObject(t, "threadhist") // builds every object
	srcs, err := filepath.Glob(filepath.Join(bpfDir, "*.c"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no sources in %s: %v", bpfDir, err)
	}
	for _, cpu := range []string{"v1", "v2", "v3"} {
		t.Run(cpu, func(t *testing.T) {
			var objs []string
			for _, src := range srcs {
				obj := strings.TrimSuffix(src, ".c") + ".o"
				if cpu != "v3" {
					obj = filepath.Join(t.TempDir(), filepath.Base(obj))
					if err := compileBPFCPU(src, obj, cpu); err != nil {
						t.Fatal(err)
					}
				}
				objs = append(objs, obj)
			}
			pipeline(t, objs)
		})
	}
}

// pipeline verifies and compiles every GPU program of objs, then assembles
// them all in one module with ptxas.
func pipeline(t *testing.T, objs []string) {
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
