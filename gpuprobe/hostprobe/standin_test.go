package hostprobe

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/hostprobetest"
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

func gcc(tb testing.TB, args ...string) { tb.Helper(); hostprobetest.GCC(tb, args...) }

func buildStandins(tb testing.TB) standins {
	tb.Helper()
	b := hostprobetest.Build(tb)
	return standins{dir: b.Dir, libcuda: b.Libcuda, libcudart: b.Libcudart, app: b.App, appStatic: b.AppStatic}
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
