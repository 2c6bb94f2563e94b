package hostprobe

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// copyFile copies src to dst, a new inode.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func inodeOf(t testing.TB, path string) uint64 {
	t.Helper()
	k, err := statKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return k.ino
}

// TestAttachSwapAfterCheck renames the runtime stand-in over the driver
// stand-in after Attach took the driver's identity: the symbols read and
// the probes attached must be the driver's, the file checked.
func TestAttachSwapAfterCheck(t *testing.T) {
	requireRoot(t)
	s := buildStandins(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "libx.so")
	swap := filepath.Join(dir, "swap.so")
	copyFile(t, s.libcuda, path)
	copyFile(t, s.libcudart, swap)
	drvIno := inodeOf(t, path)
	testHookChecked = func(string) {
		testHookChecked = nil
		if err := os.Rename(swap, path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookChecked = nil }()
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	a, err := p.Attach(path)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if a.key.ino != drvIno {
		t.Errorf("attachment inode %d, want the checked file's %d", a.key.ino, drvIno)
	}
	if !slices.Contains(a.Attached, "cuLaunchKernel") || slices.Contains(a.Attached, "cudaLaunchKernel") {
		t.Errorf("attached %v: the swapped-in runtime's symbols, not the checked driver's", a.Attached)
	}
}

// TestAttachInodeReplaced: a file replaced since discovery checked it is
// refused.
func TestAttachInodeReplaced(t *testing.T) {
	requireRoot(t)
	s := buildStandins(t)
	path := filepath.Join(t.TempDir(), "libcuda.so.1")
	copyFile(t, s.libcuda, path)
	k, err := statKey(path)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, s.libcuda, path+".new")
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	if a, err := p.AttachInode(path, k.dev, k.ino); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("AttachInode of a replaced file = %v, %v; want a 'replaced' error", a, err)
	}
	now, _ := statKey(path)
	if _, err := p.AttachInode(path, now.dev, now.ino); err != nil {
		t.Errorf("AttachInode of the file now there: %v", err)
	}
}

// TestAttachSwapFires: the probes of an Attach whose path was renamed
// over after the check fire in the checked file, not in the one swapped
// in (two copies of the static-runtime app: same symbols, two inodes).
func TestAttachSwapFires(t *testing.T) {
	requireRoot(t)
	s := buildStandins(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "app")
	checked := filepath.Join(dir, "app_checked") // a second name of the checked inode
	swap := filepath.Join(dir, "app_swap")
	copyFile(t, s.appStatic, path)
	if err := os.Link(path, checked); err != nil {
		t.Fatal(err)
	}
	copyFile(t, s.appStatic, swap)
	testHookChecked = func(string) {
		testHookChecked = nil
		if err := os.Rename(swap, path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookChecked = nil }()
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	if _, err := p.Attach(path); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	count := func(app string) int {
		r := runApp(t, app)
		calls, _ := drain(t, p)
		n := 0
		for _, c := range calls {
			if c.PID == r.pid {
				n++
			}
		}
		return n
	}
	if n := count(checked); n == 0 {
		t.Errorf("the checked file ran: no HostCall; the probes are not on it")
	}
	if n := count(path); n != 0 {
		t.Errorf("the swapped-in file ran: %d HostCalls; the probes are on it", n)
	}
}
