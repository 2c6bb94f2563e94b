package ptx

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/conformance"
)

// conformanceDir is where the bpf_conformance data lives
// ($GPUPROBE_CONFORMANCE, default testdata/conformance).
func conformanceDir(t testing.TB) string {
	dir := os.Getenv("GPUPROBE_CONFORMANCE")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "tests")); err != nil {
		t.Fatalf("conformance data not found (set GPUPROBE_CONFORMANCE to the directory holding tests/): %v", err)
	}
	return dir
}

// needPtxas returns false (and skips) only when GPUPROBE_SKIP_PTXAS=1;
// a missing ptxas otherwise fails the test.
func needPtxas(t testing.TB) bool {
	t.Helper()
	if os.Getenv("GPUPROBE_SKIP_PTXAS") == "1" {
		t.Skip("GPUPROBE_SKIP_PTXAS=1: not running ptxas")
		return false
	}
	if _, err := PtxasPath(); err != nil {
		t.Fatalf("%v; set GPUPROBE_SKIP_PTXAS=1 to skip the ptxas checks explicitly", err)
	}
	return true
}

// conformanceFiles lists tests/*.data, sorted.
func conformanceFiles(t testing.TB) []string {
	dir := conformanceDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "tests", "*.data"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .data files in %s/tests: %v", dir, err)
	}
	sort.Strings(files)
	return files
}

// conformancePrograms parses and assembles every tests/*.data file.
func conformancePrograms(t testing.TB) (names []string, progs []*jit.Program) {
	for _, f := range conformanceFiles(t) {
		c, err := conformance.ParseFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		p, err := c.Program()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		names = append(names, filepath.Base(f))
		progs = append(progs, p)
	}
	return names, progs
}

var ptxasLine = regexp.MustCompile(`line (\d+)`)

// assembleBatches runs ptxas over the modules in parallel and reports, for
// each failure, the program whose code the failing line is in.
func assembleBatches(t *testing.T, arch string, names []string, funcs []*Func) {
	t.Helper()
	const batch = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, 2)
	for lo := 0; lo < len(funcs); lo += batch {
		hi := min(lo+batch, len(funcs))
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			mod := TestModule(funcs[lo:hi]...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := Assemble(ctx, mod, arch); err != nil {
				mu.Lock()
				defer mu.Unlock()
				t.Errorf("ptxas rejected the batch %s..%s: %v", names[lo], names[hi-1], err)
				lines := strings.Split(mod, "\n")
				for _, m := range ptxasLine.FindAllStringSubmatch(err.Error(), 5) {
					n, _ := strconv.Atoi(m[1])
					if n >= 1 && n <= len(lines) {
						t.Logf("line %d: %s (in %s)", n, lines[n-1], owner(lines, n-1))
					}
				}
			}
		}(lo, hi)
	}
	wg.Wait()
}

// owner is the .func or .entry that line i of a module belongs to.
func owner(lines []string, i int) string {
	for ; i >= 0; i-- {
		if strings.HasPrefix(lines[i], ".func") || strings.HasPrefix(lines[i], ".visible .entry") {
			return lines[i]
		}
	}
	return "module scope"
}

func TestConformancePTXAS(t *testing.T) {
	names, progs := conformancePrograms(t)
	funcs := make([]*Func, len(progs))
	for k, p := range progs {
		f, err := Compile(p, Options{Conformance: true})
		if err != nil {
			t.Fatalf("%s: %v", names[k], err)
		}
		funcs[k] = f
	}
	if !needPtxas(t) {
		return
	}
	assembleBatches(t, DefaultArch, names, funcs)
}
