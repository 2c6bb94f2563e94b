package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func init() {
	Register(&Command{
		Name:    "install-shim",
		Summary: "copy " + ShimName + " into a directory (a Kubernetes init container's job)",
		Run:     runInstallShim,
	})
}

// runInstallShim copies the shim that `gpuprobe run` would preload into
// DIR, for images without a shell (docs/kubernetes.md).
func runInstallShim(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("install-shim", "usage: gpuprobe install-shim [--shim PATH] DIR", stderr)
	shimFlag := fs.String("shim", "", "path of "+ShimName+" (default: $GPUPROBE_SHIM, else next to the gpuprobe binary)")
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	src, err := findShim(*shimFlag, os.Executable)
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe install-shim:", err)
		return 1
	}
	dst, err := installShim(src, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe install-shim:", err)
		return 1
	}
	fmt.Fprintln(stdout, dst)
	return 0
}

// installShim copies src to dir/libgpuprobe.so (mode 0755) through a
// temporary file and a rename, so a process loading the old copy never
// sees a half-written one.
func installShim(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+ShimName+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copying %s: %w", src, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, ShimName)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}
