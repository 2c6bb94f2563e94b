package jit_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// bpfDir holds the C sources of the test programs, relative to this package.
const bpfDir = "../testdata/bpf"

// bpfCFlags are testdata/bpf/bpf.mk's flags; keep the two in step.
var bpfCFlags = []string{"-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", includeDir}

// includeDir holds gpuprobe.h, relative to this package.
const includeDir = "include"

var (
	buildOnce sync.Once
	buildErr  error
)

// bpfObject returns the path of testdata/bpf/<name>.o, building every
// testdata object with clang first if one is missing or older than its
// source. A missing clang fails the test: the objects are part of the build.
func bpfObject(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() { buildErr = buildObjects(bpfDir) })
	if buildErr != nil {
		t.Fatalf("building testdata/bpf objects: %v", buildErr)
	}
	path := filepath.Join(bpfDir, name+".o")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("test object %s: %v", path, err)
	}
	return path
}

// compileBPF compiles one C file with clang into dst (via a temporary file
// and a rename, so concurrent test binaries never see half an object).
func compileBPF(src, dst string) error {
	return compileBPFCPU(src, dst, "")
}

// compileBPFCPU is compileBPF for one BPF CPU version (-mcpu); "" keeps
// bpf.mk's.
func compileBPFCPU(src, dst, cpu string) error {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return fmt.Errorf("clang is needed to build %s (apt-get install clang): %w", src, err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", dst, os.Getpid())
	args := append([]string{}, bpfCFlags...)
	for i, a := range args {
		if cpu != "" && strings.HasPrefix(a, "-mcpu=") {
			args[i] = "-mcpu=" + cpu
		}
	}
	args = append(args, "-c", src, "-o", tmp)
	out, err := exec.Command(clang, args...).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("clang %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return os.Rename(tmp, dst)
}

// buildObjects compiles dir/*.c into dir/*.o where the object is stale.
func buildObjects(dir string) error {
	srcs, err := filepath.Glob(filepath.Join(dir, "*.c"))
	if err != nil {
		return err
	}
	if len(srcs) == 0 {
		return fmt.Errorf("no C sources in %s", dir)
	}
	hdr, err := os.Stat(filepath.Join(includeDir, "gpuprobe.h"))
	if err != nil {
		return err
	}
	var errs []error
	for _, src := range srcs {
		dst := strings.TrimSuffix(src, ".c") + ".o"
		if fresh(dst, src, hdr.ModTime().UnixNano()) {
			continue
		}
		errs = append(errs, compileBPF(src, dst))
	}
	return errors.Join(errs...)
}

// fresh reports whether obj exists and is newer than src and the header.
func fresh(obj, src string, hdrTime int64) bool {
	o, err := os.Stat(obj)
	if err != nil {
		return false
	}
	s, err := os.Stat(src)
	if err != nil {
		return false
	}
	return o.ModTime().UnixNano() >= s.ModTime().UnixNano() && o.ModTime().UnixNano() >= hdrTime
}

// badObject compiles testdata/bpf/bad/<name>.c into a temporary directory.
func badObject(t testing.TB, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name+".o")
	if err := compileBPF(filepath.Join(bpfDir, "bad", name+".c"), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}
