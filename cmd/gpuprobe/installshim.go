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
	fs := newUsageFlags("install-shim", "usage: gpuprobe install-shim [--shim PATH] [--cache-dir DIR] DIR", stderr)
	shimFlag := fs.String("shim", "", "path of "+ShimName+" (default: $GPUPROBE_SHIM, else next to the gpuprobe binary)")
	cacheFlag := fs.String("cache-dir", "", "also make this directory the shim's cache of compiled patched images (GPUPROBE_CACHE_DIR): sticky, open to every uid for its own subdirectory")
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
	if err == nil && *cacheFlag != "" {
		err = makeCacheDir(*cacheFlag)
	}
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

// makeCacheDir makes dir the root of the shim's cache (shim/src/cache.c):
// mode 01777, as /tmp, so that each uid creates its own 0700
// subdirectory there and no uid can remove or rename another's. It must
// be a directory (not a link) and is left to its owner, root on a node.
func makeCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("cache directory %s: not a directory", dir)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	return nil
}
