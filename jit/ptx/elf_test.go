package ptx

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// testdataPrograms loads the GPU programs of the clang-built objects in
// testdata/bpf.
func testdataPrograms(t testing.TB) (names []string, progs []*jit.Program) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "bpf", "*.o"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/bpf/*.o (build them with make): %v", err)
	}
	sort.Strings(files)
	for _, f := range files {
		ps, err := jit.LoadELF(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range ps {
			if !p.IsGPU() {
				continue
			}
			names = append(names, filepath.Base(f)+":"+p.Name)
			progs = append(progs, p)
		}
	}
	return names, progs
}

// TestTestdataPTXAS compiles every GPU program of testdata/bpf that the
// verifier accepts, and checks the PTX with ptxas.
func TestTestdataPTXAS(t *testing.T) {
	names, progs := testdataPrograms(t)
	var funcs []*Func
	var fnames []string
	for k, p := range progs {
		ctx := 0
		if p.Kind == jit.ProbeMemCapture {
			ctx = jit.MemCtxSize
		}
		if _, err := verifier.Verify(p, verifier.Options{CtxSize: ctx}); err != nil {
			t.Logf("%s: rejected by the verifier, not compiled: %v", names[k], err)
			continue
		}
		f, err := Compile(p, Options{})
		if err != nil {
			t.Errorf("%s: %v", names[k], err)
			continue
		}
		funcs = append(funcs, f)
		fnames = append(fnames, names[k])
	}
	if len(funcs) < 6 {
		t.Fatalf("only %d testdata programs compiled (%v), want at least 6", len(funcs), fnames)
	}
	if !needPtxas(t) {
		return
	}
	assembleBatches(t, DefaultArch, fnames, funcs)
}
