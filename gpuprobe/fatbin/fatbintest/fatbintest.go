// Package fatbintest builds CUDA samples with nvcc and runs cuobjdump for
// the tests of the fatbin and PTX parsers and of gpuprobe inspect.
//
// A test that calls it fails, with a message that says what to install,
// when nvcc or cuobjdump is missing: it never skips silently. Outputs are
// cached under the system temporary directory, keyed by the toolkit
// version, the arguments and the sources, so that repeated runs are fast.
//
// Environment: NVCC, CUOBJDUMP and PTXAS override the tools' paths; NVCC_CCBIN
// sets nvcc's host compiler (by default clang-14 is used with CUDA 11.x
// when the system gcc is newer than CUDA 11 accepts, as on Debian 12).
package fatbintest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Toolkit describes the CUDA toolkit found on this machine.
type Toolkit struct {
	NVCC      string // path of nvcc
	Cuobjdump string // path of cuobjdump
	Ptxas     string // path of ptxas
	Release   string // "11.8"
	Major     int    // 11
	CCBin     string // host compiler passed as -ccbin, "" for nvcc's default
}

var (
	tkOnce sync.Once
	tk     *Toolkit
	tkErr  error
)

// Find locates the toolkit, or fails the test with what to install.
func Find(tb testing.TB) *Toolkit {
	tb.Helper()
	tkOnce.Do(func() { tk, tkErr = find() })
	if tkErr != nil {
		tb.Fatalf("CUDA toolkit needed by this test: %v (install it: apt-get install nvidia-cuda-toolkit with Debian's non-free component; or set NVCC and CUOBJDUMP)", tkErr)
	}
	return tk
}

func find() (*Toolkit, error) {
	t := &Toolkit{}
	var err error
	if t.NVCC, err = tool("NVCC", "nvcc"); err != nil {
		return nil, err
	}
	if t.Cuobjdump, err = tool("CUOBJDUMP", "cuobjdump"); err != nil {
		return nil, err
	}
	if t.Ptxas, err = tool("PTXAS", "ptxas"); err != nil {
		return nil, err
	}
	out, err := exec.Command(t.NVCC, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w: %s", t.NVCC, err, out)
	}
	// "Cuda compilation tools, release 11.8, V11.8.89"
	s := string(out)
	i := strings.Index(s, "release ")
	if i < 0 {
		return nil, fmt.Errorf("%s --version: no release in %q", t.NVCC, s)
	}
	t.Release, _, _ = strings.Cut(s[i+len("release "):], ",")
	major, _, _ := strings.Cut(t.Release, ".")
	if t.Major, err = strconv.Atoi(major); err != nil {
		return nil, fmt.Errorf("%s --version: release %q: %w", t.NVCC, t.Release, err)
	}
	t.CCBin = os.Getenv("NVCC_CCBIN")
	if t.CCBin == "" && t.Major == 11 && gccMajor() > 11 {
		for _, c := range []string{"clang-14", "clang-13", "g++-11", "clang-12", "g++-10"} {
			if p, err := exec.LookPath(c); err == nil {
				t.CCBin = p
				break
			}
		}
	}
	return t, nil
}

func tool(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH", name)
	}
	return p, nil
}

func gccMajor() int {
	out, err := exec.Command("gcc", "-dumpversion").Output()
	if err != nil {
		return 0
	}
	major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
	n, _ := strconv.Atoi(major)
	return n
}

// Archs returns the SM numbers the tests build for: 52, 80 and 90 with
// CUDA 11 and 12, and 75, 80 and 90 with CUDA 13, which dropped sm_52.
func (t *Toolkit) Archs() []int {
	if t.Major >= 13 {
		return []int{75, 80, 90}
	}
	return []int{52, 80, 90}
}

// Gencode returns -gencode flags that put a cubin and the PTX of each
// arch into the fatbin.
func Gencode(archs ...int) []string {
	var out []string
	for _, a := range archs {
		out = append(out, "-gencode", fmt.Sprintf("arch=compute_%d,code=[sm_%d,compute_%d]", a, a, a))
	}
	return out
}

// Source returns the path of a sample in testdata/cuda of the repository:
// the checkout the test was built from, or, for a test binary carried to
// another machine, GPUPROBE_REPO or the working directory and its parents.
func Source(tb testing.TB, name string) string {
	tb.Helper()
	var roots []string
	if r := os.Getenv("GPUPROBE_REPO"); r != "" {
		roots = append(roots, r)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		roots = append(roots, filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			roots = append(roots, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, r := range roots {
		p := filepath.Join(r, "testdata", "cuda", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	tb.Fatalf("fatbintest: sample testdata/cuda/%s not found (set GPUPROBE_REPO to the repository root)", name)
	return ""
}

// Build runs nvcc on src with args (which must not contain -o) and
// returns the path of the output, named out. Identical builds are served
// from the cache.
func Build(tb testing.TB, src, out string, args ...string) string {
	tb.Helper()
	t := Find(tb)
	code, err := os.ReadFile(src)
	if err != nil {
		tb.Fatalf("fatbintest: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%q\x00", t.NVCC, t.Release, t.CCBin, args)
	h.Write(code)
	dir := filepath.Join(os.TempDir(), "gpuprobe-nvcc-cache", hex.EncodeToString(h.Sum(nil))[:24])
	dst := filepath.Join(dir, out)
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("fatbintest: %v", err)
	}
	tmp, err := os.MkdirTemp(dir, "build")
	if err != nil {
		tb.Fatalf("fatbintest: %v", err)
	}
	defer os.RemoveAll(tmp)
	full := []string{}
	if t.CCBin != "" {
		full = append(full, "-ccbin", t.CCBin)
	}
	full = append(full, args...)
	full = append(full, "-o", filepath.Join(tmp, out), src)
	cmd := exec.Command(t.NVCC, full...)
	cmd.Dir = tmp
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("fatbintest: nvcc %s: %v\n%s", strings.Join(full, " "), err, b)
	}
	if err := os.Rename(filepath.Join(tmp, out), dst); err != nil {
		tb.Fatalf("fatbintest: %v", err)
	}
	return dst
}

// Cuobjdump runs cuobjdump with args in dir and returns its stdout.
func Cuobjdump(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	t := Find(tb)
	cmd := exec.Command(t.Cuobjdump, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("fatbintest: cuobjdump %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// Listed is one line of cuobjdump --list-elf / --list-ptx output.
type Listed struct {
	Kind string // "PTX" or "ELF"
	N    int    // the number cuobjdump gives it among entries of its kind
	Name string // file name cuobjdump would extract it to
}

// List runs cuobjdump --list-elf --list-ptx (with -all when all is set)
// on file and parses its listing, in cuobjdump's order.
func List(tb testing.TB, file string, all bool) []Listed {
	tb.Helper()
	args := []string{"--list-elf", "--list-ptx"}
	if all {
		args = append([]string{"-all"}, args...)
	}
	out := Cuobjdump(tb, filepath.Dir(file), append(args, file)...)
	res, err := ParseListing(out)
	if err != nil {
		tb.Fatalf("fatbintest: %v", err)
	}
	return res
}

// ParseListing parses the "ELF file    1: name" and "PTX file    1:
// name" lines of cuobjdump --list-elf --list-ptx output, in order; other
// lines are skipped.
func ParseListing(out string) ([]Listed, error) {
	var res []Listed
	for i, line := range strings.Split(out, "\n") {
		head, name, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		f := strings.Fields(head)
		if len(f) != 3 || f[1] != "file" {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("cuobjdump listing line %d %q: %w", i+1, line, err)
		}
		res = append(res, Listed{Kind: f[0], N: n, Name: strings.TrimSpace(name)})
	}
	return res, nil
}

// Ptxas assembles a PTX file for arch ("sm_90") with -v and returns the
// names of the entry functions it compiled, in its order.
func Ptxas(tb testing.TB, arch, ptxFile string) []string {
	tb.Helper()
	t := Find(tb)
	out := filepath.Join(tb.TempDir(), "out.cubin")
	cmd := exec.Command(t.Ptxas, "-v", "-arch", arch, "-o", out, ptxFile)
	b, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("fatbintest: ptxas -arch %s %s: %v\n%s", arch, ptxFile, err, b)
	}
	// "ptxas info    : Compiling entry function '_Z9vectorAddPKfS0_Pfi' for 'sm_80'"
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(line, "Compiling entry function '")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "'")
		names = append(names, name)
	}
	return names
}
