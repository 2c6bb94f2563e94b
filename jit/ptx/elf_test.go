package ptx

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

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

// testPrefix names testdata program k apart from the others: two objects
// may hold programs of one name, and the injector prefixes by index too.
func testPrefix(k int, p *jit.Program) string {
	return "gpuprobe_" + strconv.Itoa(k) + "_" + Sanitize(p.Name)
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
		f, err := Compile(p, Options{Prefix: testPrefix(k, p)})
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

// TestSplicedTogether compiles every testdata program twice under two
// prefixes and assembles all of them as one module: no name may clash,
// and every module-scope name starts with its program's prefix.
func TestSplicedTogether(t *testing.T) {
	names, progs := testdataPrograms(t)
	var funcs []*Func
	var fnames []string
	for k, p := range progs {
		for _, prefix := range []string{"app_a_" + testPrefix(k, p), "app_b_" + testPrefix(k, p)} {
			f, err := Compile(p, Options{Prefix: prefix})
			if err != nil {
				t.Fatalf("%s: %v", names[k], err)
			}
			for _, g := range f.Globals {
				if !strings.HasPrefix(g.Name, prefix+"_") {
					t.Errorf("%s: global %s lacks the prefix %s", names[k], g.Name, prefix)
				}
			}
			for _, line := range strings.Split(f.Decls, "\n") {
				if strings.HasPrefix(line, ".func") && !strings.Contains(line, " "+prefix) {
					t.Errorf("%s: declaration %q lacks the prefix %s", names[k], line, prefix)
				}
			}
			funcs = append(funcs, f)
			fnames = append(fnames, names[k]+"@"+prefix)
		}
	}
	if !needPtxas(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Assemble(ctx, TestModule(funcs...), DefaultArch); err != nil {
		t.Fatalf("ptxas rejects %d programs spliced into one module: %v", len(funcs), err)
	}
}

// TestOtherArchs assembles the testdata programs for older targets, where
// the warp reductions take the shfl.sync loop (before sm_80).
func TestOtherArchs(t *testing.T) {
	names, progs := testdataPrograms(t)
	for _, arch := range []string{"sm_70", "sm_75", "sm_80"} {
		var funcs []*Func
		for k, p := range progs {
			f, err := Compile(p, Options{Arch: arch, Prefix: testPrefix(k, p)})
			if err != nil {
				t.Fatalf("%s for %s: %v", names[k], arch, err)
			}
			if f.Arch != arch || !strings.Contains(TestModule(f), ".target "+arch+"\n") {
				t.Fatalf("%s: module not targeted at %s", names[k], arch)
			}
			funcs = append(funcs, f)
		}
		if !needPtxas(t) {
			return
		}
		assembleBatches(t, arch, names, funcs)
	}
}
