package hostprobe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// standins are the STAND-IN libraries and applications of
// testdata/standin, built with gcc for one test.
type standins struct {
	dir       string
	libcuda   string // libcuda.so.1
	libcudart string // libcudart.so.13, linked against libcuda.so.1
	app       string // standin_app, dynamically linked to both
	appStatic string // standin_app with the runtime stand-in linked in (.symtab only)
}

const standinSrc = "testdata/standin"

// standinCFlags: -fno-ipa-icf so that gcc never folds one stand-in function
// into a jump to another (that would add a nested probed call).
var standinCFlags = []string{"-O2", "-Wall", "-Werror", "-fno-ipa-icf", "-I", standinSrc}

func gcc(tb testing.TB, args ...string) {
	tb.Helper()
	cmd := exec.Command("gcc", append(append([]string{}, standinCFlags...), args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func buildStandins(tb testing.TB) standins {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Fatalf("the stand-in libraries are built with gcc, which is not installed: %v", err)
	}
	d := tb.TempDir()
	s := standins{
		dir:       d,
		libcuda:   filepath.Join(d, "libcuda.so.1"),
		libcudart: filepath.Join(d, "libcudart.so.13"),
		app:       filepath.Join(d, "standin_app"),
		appStatic: filepath.Join(d, "standin_app_static"),
	}
	src := func(n string) string { return filepath.Join(standinSrc, n) }
	gcc(tb, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", s.libcuda, src("standin_libcuda.c"))
	gcc(tb, "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", s.libcudart, src("standin_libcudart.c"), s.libcuda)
	gcc(tb, "-o", s.app, src("standin_app.c"), s.libcudart, s.libcuda, "-Wl,-rpath,"+d, "-lpthread")
	gcc(tb, "-o", s.appStatic, src("standin_app.c"), src("standin_libcudart.c"), s.libcuda, "-Wl,-rpath,"+d, "-lpthread")
	return s
}

// variant builds libcuda with extra flags (e.g. -DSTANDIN_OMIT_SOME) under name.
func (s standins) variant(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	out := filepath.Join(s.dir, name)
	args := append([]string{"-shared", "-fPIC", "-o", out}, flags...)
	gcc(tb, append(args, filepath.Join(standinSrc, "standin_libcuda.c"))...)
	return out
}

// stripped copies file to name and strips it with strip --strip-all.
func (s standins) stripped(tb testing.TB, file, name string) string {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(s.dir, name)
	if err := os.WriteFile(out, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	if o, err := exec.Command("strip", "--strip-all", out).CombinedOutput(); err != nil {
		tb.Fatalf("strip --strip-all %s: %v\n%s", out, err, o)
	}
	return out
}
