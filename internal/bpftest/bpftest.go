// Package bpftest builds the repository's GPU programs for tests, with the
// clang flags of testdata/bpf/bpf.mk.
package bpftest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository root (found from this file's path).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Object compiles testdata/bpf/<rel>.c with clang into a temporary object
// and returns its path. A missing clang fails the test.
func Object(t testing.TB, rel string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build the test objects: %v", err)
	}
	src := filepath.Join(Root(), "testdata", "bpf", rel+".c")
	obj := filepath.Join(t.TempDir(), filepath.Base(rel)+".o")
	out, err := exec.Command(clang, append(append([]string{}, CFlags...), "-I", filepath.Join(Root(), "jit", "include"), "-c", src, "-o", obj)...).CombinedOutput()
	if err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, out)
	}
	return obj
}
