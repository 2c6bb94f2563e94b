//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoFile is a repository file's path from this package.
func repoFile(rel string) string { return filepath.Join("..", "..", filepath.FromSlash(rel)) }

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(repoFile(rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// benchObjectList is every object of benchObjects once, sorted.
func benchObjectList() []string {
	var out []string
	for _, o := range benchObjects {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// TestBenchObjectsNameConfigs: every config with an object is one -configs
// accepts, and every config but the built-in ones has an object.
func TestBenchObjectsNameConfigs(t *testing.T) {
	builtin := []string{"uninstrumented", "empty", "kernel_phases", "kernel_phases_call", "kernel_phases_1in8"}
	for c := range benchObjects {
		if !slices.Contains(benchConfigNames, c) {
			t.Errorf("benchObjects names %q, which is not in benchConfigNames", c)
		}
	}
	for _, c := range benchConfigNames {
		if _, ok := benchObjects[c]; !ok && !slices.Contains(builtin, c) {
			t.Errorf("config %q has no object in benchObjects", c)
		}
	}
}

// TestBenchScriptConfigs: bench.sh's default BENCH_CONFIGS is every config
// gpucheck has, in benchConfigNames' order, so that a config added to one
// and not the other, or misspelt, fails here rather than on the GPU.
func TestBenchScriptConfigs(t *testing.T) {
	src := readRepoFile(t, "scripts/gpu/bench.sh")
	m := regexp.MustCompile(`\$\{BENCH_CONFIGS:-([^}]*)\}`).FindAllStringSubmatch(src, -1)
	if len(m) != 1 {
		t.Fatalf("bench.sh: %d ${BENCH_CONFIGS:-...} defaults, want 1", len(m))
	}
	got, err := parseBenchConfigs(m[0][1])
	if err != nil {
		t.Fatalf("bench.sh's default BENCH_CONFIGS: %v", err)
	}
	if !slices.Equal(got, benchConfigNames) {
		t.Errorf("bench.sh's default BENCH_CONFIGS is\n  %s\nwant every config of gpucheck:\n  %s",
			strings.Join(got, ","), strings.Join(benchConfigNames, ","))
	}
}

// TestBenchScriptModelPairs: each config=shape+shape pair of bench.sh's
// report names a gpucheck config and shapes that maps_model.cu measures.
func TestBenchScriptModelPairs(t *testing.T) {
	m := regexp.MustCompile(`(?m)^\s*model_pairs="([^"]*)"$`).FindStringSubmatch(readRepoFile(t, "scripts/gpu/bench.sh"))
	if m == nil {
		t.Fatal(`bench.sh has no model_pairs="..." line`)
	}
	shapes := modelShapes(t)
	pairs := strings.Fields(m[1])
	if !slices.Contains(pairs, "gpuhash=gpuhash+gpuhash_warpagg") {
		t.Errorf("model_pairs %q does not put gpuhash beside its model shapes", m[1])
	}
	for _, p := range pairs {
		config, shape, ok := strings.Cut(p, "=")
		if !ok || !slices.Contains(benchConfigNames, config) {
			t.Errorf("model_pairs: %q does not start with a gpucheck config and =", p)
		}
		for _, s := range strings.Split(shape, "+") {
			if !slices.Contains(shapes, s) {
				t.Errorf("model_pairs: %q: shape %q is not one of maps_model.cu's %v", p, s, shapes)
			}
		}
	}
}

// modelShapes are the shape names of maps_model.cu (shapeNames).
func modelShapes(t *testing.T) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)shapeNames\[NSHAPES\] = \{(.*?)\};`).FindStringSubmatch(readRepoFile(t, "testdata/cuda/model/maps_model.cu"))
	if m == nil {
		t.Fatal("maps_model.cu has no shapeNames[NSHAPES] = {...};")
	}
	var out []string
	for _, q := range regexp.MustCompile(`"(\w+)"`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, q[1])
	}
	return out
}

// TestBenchPartNeeds: gpu-test.sh's bench part lists every object the
// bench configs load and every file maps_model.cu includes, so that the
// dry run (and the bundle test) misses none.
func TestBenchPartNeeds(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed: %v", err)
	}
	m := regexp.MustCompile(`(?s)\n\tbench\) need=\((.*?)\) ;;`).FindStringSubmatch(readRepoFile(t, "scripts/gpu-test.sh"))
	if m == nil {
		t.Fatal("gpu-test.sh has no bench) need=(...) ;; case")
	}
	script := `bpf=testdata/bpf cuda=testdata/cuda g=scripts/gpu run=(RUN); need=(` + m[1] + `); printf '%s\n' "${need[@]}"`
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = repoFile(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("expanding the bench part's need list: %v", err)
	}
	need := strings.Split(strings.TrimSpace(string(out)), "\n")
	var want []string
	for _, o := range benchObjectList() {
		want = append(want, "testdata/bpf/"+o+".o")
	}
	model := readRepoFile(t, "testdata/cuda/model/maps_model.cu")
	for _, inc := range regexp.MustCompile(`(?m)^#include "([^"]+)"`).FindAllStringSubmatch(model, -1) {
		want = append(want, "testdata/cuda/model/"+inc[1])
	}
	if !slices.Contains(want, "testdata/cuda/model/gpuhash_model.cuh") {
		t.Errorf("maps_model.cu does not include gpuhash_model.cuh")
	}
	for _, w := range want {
		if !slices.Contains(need, w) {
			t.Errorf("gpu-test.sh's bench part does not list %s (it lists %v)", w, need)
		}
		if _, err := os.Stat(repoFile(strings.TrimSuffix(w, ".o") + ".c")); strings.HasSuffix(w, ".o") && err != nil {
			t.Errorf("%s: no source: %v", w, err)
		}
	}
}
