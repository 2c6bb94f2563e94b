// Package scripts holds no Go code, only the test that `make gpu-bundle`
// packs everything `make gpu-test` uses on the GPU machine.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// optional are files the checks use only when present: they are not
// required in the bundle.
var optional = map[string]string{
	"bin/hostprobe.test": "hostprobes.sh's uprobe benchmark, when carried",
}

// TestBundleCarriesTheChecks builds what `make gpu-bundle` packs (all but
// the ocb-built collector), packs it with scripts/gpu-bundle.sh into a
// temporary archive, unpacks it and, there: runs `gpu-test.sh --dry-run`
// (every part finds its script, libraries, binaries, objects and sources),
// checks that every repository path named in the GPU scripts' code exists
// and every link resolves, and builds the examples against the bundled
// gpuprobe.h.
func TestBundleCarriesTheChecks(t *testing.T) {
	for _, tool := range []string{"make", "gcc", "clang", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	run(t, root, nil, "make", "--no-print-directory", "bin/gpuprobe", "bin/gpuprobe-harness",
		"bin/libgpuprobe.so", "bin/libgpuprobe-selftime.so", "bin/gpuprobe-gpucheck", "bin/ptx-gpu.test", "bpf-objects")
	tmp := t.TempDir()
	archive := filepath.Join(tmp, "gpu-bundle.tar.gz")
	run(t, root, nil, "bash", "scripts/gpu-bundle.sh", archive)
	run(t, tmp, nil, "tar", "-xzf", archive)
	dir := filepath.Join(tmp, "gpuprobe")

	// The collector (ocb, minutes to build) is packed when it was built;
	// without it, a stand-in lets the dry run check the rest.
	col := filepath.Join(dir, "bin", "otelcol-gpuprobe")
	if _, err := os.Stat(col); err != nil {
		t.Log("bin/otelcol-gpuprobe not built: a stand-in takes its place in the unpacked bundle")
		if err := os.WriteFile(col, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("dry-run", func(t *testing.T) {
		out := run(t, dir, []string{"GPU_TEST_OUT=" + filepath.Join(tmp, "gpu-test")}, "bash", "scripts/gpu-test.sh", "--dry-run")
		src, err := os.ReadFile(filepath.Join(dir, "scripts", "gpu-test.sh"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^all_parts=(\S+)$`).FindSubmatch(src)
		if m == nil {
			t.Fatal("gpu-test.sh has no all_parts= line")
		}
		for _, p := range strings.Split(string(m[1]), ",") {
			if !regexp.MustCompile(`(?m)^dry-run ` + regexp.QuoteMeta(p) + ` +PASS `).MatchString(out) {
				t.Errorf("part %s: no PASS row in the dry run:\n%s", p, out)
			}
		}
	})

	t.Run("links resolve", func(t *testing.T) {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeSymlink != 0 {
				if _, serr := os.Stat(p); serr != nil {
					rel, _ := filepath.Rel(dir, p)
					t.Errorf("%s: dangling link in the bundle: %v", rel, serr)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("examples build with the bundled header", func(t *testing.T) {
		srcs, _ := filepath.Glob(filepath.Join(dir, "examples", "*.c"))
		if len(srcs) == 0 {
			t.Fatal("no examples/*.c in the bundle")
		}
		for _, src := range srcs {
			run(t, dir, nil, "clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
				"-I", "jit/include", "-c", src, "-o", filepath.Join(t.TempDir(), "prog.o"))
		}
	})

	// Last, since it removes a file: the dry run must name what is missing.
	defer t.Run("dry-run finds a missing file", func(t *testing.T) {
		lib := filepath.Join(dir, "scripts", "gpu", "lib_traces.py")
		if err := os.Remove(lib); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "scripts/gpu-test.sh", "--dry-run")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PARTS=e2e,sampling", "GPU_TEST_OUT="+filepath.Join(tmp, "gpu-test"))
		out, err := cmd.CombinedOutput()
		if err == nil || !regexp.MustCompile(`(?m)^dry-run sampling +FAIL +missing: scripts/gpu/lib_traces.py`).Match(out) ||
			!regexp.MustCompile(`(?m)^dry-run e2e +PASS `).Match(out) {
			t.Errorf("dry run without lib_traces.py: err %v, want exit 1, sampling FAIL, e2e PASS:\n%s", err, out)
		}
	})

	t.Run("paths", func(t *testing.T) {
		scripts, _ := filepath.Glob(filepath.Join(dir, "scripts", "gpu", "*.sh"))
		scripts = append(scripts, filepath.Join(dir, "scripts", "gpu-test.sh"))
		path := regexp.MustCompile(`(?:^|[^\w./$-])((?:bin|testdata|scripts|gpuprobe|python)/[\w./-]*\w)`)
		for _, s := range scripts {
			b, err := os.ReadFile(s)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				for _, m := range path.FindAllStringSubmatch(line, -1) {
					p := m[1]
					if _, ok := optional[p]; ok {
						continue
					}
					if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
						t.Errorf("%s:%d uses %s, which the bundle lacks", filepath.Base(s), i+1, p)
					}
				}
			}
		}
	})
}

// run runs a command in dir and returns its output; a failure fails the
// test with the output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
