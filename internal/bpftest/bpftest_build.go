package bpftest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CFlags are testdata/bpf/bpf.mk's clang flags for the GPU programs.
var CFlags = []string{"-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3"}

// BuildTestdata compiles testdata/bpf/*.c and testdata/bpf/compat/*.c
// into their git-ignored objects where an object is missing or older than
// its source or the header, as `make bpf-objects` does, so `go test ./...`
// works on a clean checkout. Call it from a TestMain. Concurrent test
// binaries never see half an object (each writes a temporary file and
// renames it).
func BuildTestdata() error {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return fmt.Errorf("clang is needed to build testdata/bpf (apt-get install clang): %w", err)
	}
	hdr, err := os.Stat(filepath.Join(Root(), "jit", "include", "gpuprobe.h"))
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range []string{"testdata/bpf", "testdata/bpf/compat"} {
		srcs, err := filepath.Glob(filepath.Join(Root(), dir, "*.c"))
		if err != nil {
			return err
		}
		for _, src := range srcs {
			dst := strings.TrimSuffix(src, ".c") + ".o"
			if fresh(dst, src, hdr.ModTime().UnixNano()) {
				continue
			}
			errs = append(errs, compile(clang, src, dst))
		}
	}
	return errors.Join(errs...)
}

func compile(clang, src, dst string) error {
	tmp := fmt.Sprintf("%s.tmp%d", dst, os.Getpid())
	args := append(append([]string{}, CFlags...), "-I", filepath.Join(Root(), "jit", "include"), "-c", src, "-o", tmp)
	if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("clang %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return os.Rename(tmp, dst)
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
