// Package hostprobetest builds, for tests, the STAND-IN libcuda and
// libcudart of gpuprobe/hostprobe/testdata/standin (the same symbols and
// signatures as NVIDIA's libraries, no GPU work) and the application that
// calls them.
package hostprobetest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Standins are the built stand-ins, in one temporary directory.
type Standins struct {
	Dir       string // the directory (RUNPATH of the apps)
	Libcuda   string // libcuda.so.1
	Libcudart string // libcudart.so.13, linked against libcuda.so.1
	App       string // standin_app, dynamically linked to both
	AppStatic string // standin_app with the runtime stand-in linked in (.symtab only)
}

// SourceDir is the directory of the stand-in sources.
func SourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "standin")
}

// GCC runs gcc with the stand-ins' flags: -fno-ipa-icf so that gcc never
// folds one stand-in function into a jump to another (that would add a
// nested probed call).
func GCC(tb testing.TB, args ...string) {
	tb.Helper()
	flags := []string{"-O2", "-Wall", "-Werror", "-fno-ipa-icf", "-I", SourceDir()}
	cmd := exec.Command("gcc", append(flags, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Build builds the stand-in libraries and applications into a new
// temporary directory of tb.
func Build(tb testing.TB) Standins {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Fatalf("the stand-in libraries are built with gcc, which is not installed: %v", err)
	}
	d := tb.TempDir()
	s := Standins{
		Dir:       d,
		Libcuda:   filepath.Join(d, "libcuda.so.1"),
		Libcudart: filepath.Join(d, "libcudart.so.13"),
		App:       filepath.Join(d, "standin_app"),
		AppStatic: filepath.Join(d, "standin_app_static"),
	}
	src := func(n string) string { return filepath.Join(SourceDir(), n) }
	GCC(tb, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", s.Libcuda, src("standin_libcuda.c"))
	GCC(tb, "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", s.Libcudart, src("standin_libcudart.c"), s.Libcuda)
	GCC(tb, "-o", s.App, src("standin_app.c"), s.Libcudart, s.Libcuda, "-Wl,-rpath,"+d, "-lpthread")
	GCC(tb, "-o", s.AppStatic, src("standin_app.c"), src("standin_libcudart.c"), s.Libcuda, "-Wl,-rpath,"+d, "-lpthread")
	return s
}
