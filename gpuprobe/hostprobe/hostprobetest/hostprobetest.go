// Package hostprobetest builds, for tests, the STAND-IN libcuda and
// libcudart of gpuprobe/hostprobe/testdata/standin (the same symbols and
// signatures as NVIDIA's libraries, no GPU work) and the application that
// calls them, and tells whether a process runs a function with a uprobe
// breakpoint (Trapped).
package hostprobetest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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

// RequireRoot skips tb for an unprivileged user: loading eBPF uprobes and
// kernel maps needs root (CI runs as root).
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("skipped: loads eBPF programs into Linux, which needs root (CI runs as root); euid is %d", os.Geteuid())
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

// symbolOffset is the file offset of sym's first instruction in the ELF
// file at path, and its first 4 bytes there.
func symbolOffset(tb testing.TB, path, sym string) (uint64, []byte) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if s.Name != sym || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				b := make([]byte, 4)
				if _, err := p.ReadAt(b, int64(s.Value-p.Vaddr)); err != nil {
					tb.Fatal(err)
				}
				return s.Value - p.Vaddr + p.Off, b
			}
		}
	}
	tb.Fatalf("%s defines no function %s", path, sym)
	return 0, nil
}

// Trapped reports whether process pid runs sym of the file at path with
// a breakpoint: the bytes at the function's address in the process's
// memory differ from the file's (a uprobe writes its breakpoint
// instruction there: int3 on x86-64, brk on arm64).
func Trapped(tb testing.TB, pid int, path, sym string) bool {
	tb.Helper()
	off, orig := symbolOffset(tb, path, sym)
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[4] != strconv.FormatUint(st.Ino, 10) || !strings.Contains(f[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		mapOff, _ := strconv.ParseUint(f[2], 16, 64)
		if off < mapOff || off >= mapOff+end-start {
			continue
		}
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			tb.Fatal(err)
		}
		defer mem.Close()
		b := make([]byte, len(orig))
		if _, err := mem.ReadAt(b, int64(start+off-mapOff)); err != nil {
			tb.Fatal(err)
		}
		return !bytes.Equal(b, orig)
	}
	tb.Fatalf("pid %d does not map %s's %s executable", pid, path, sym)
	return false
}
