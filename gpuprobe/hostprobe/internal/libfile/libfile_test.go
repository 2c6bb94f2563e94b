package libfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "lib.so")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.so")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Open(symlink) error %v, want a symlink error", err)
	}
	if f, err := OpenLink(link); err != nil {
		t.Errorf("OpenLink(symlink): %v", err)
	} else {
		f.Close()
	}
	if _, err := Open(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open(fifo) error %v, want not a regular file (and no hang)", err)
	}
	var open []*File
	for range MaxOpen {
		f, err := Open(file)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	if _, err := Open(file); !errors.Is(err, ErrTooManyOpen) {
		t.Errorf("Open beyond MaxOpen: %v, want ErrTooManyOpen", err)
	}
	for _, f := range open {
		f.Close()
	}
	f, err := Open(file)
	if err != nil {
		t.Fatalf("Open after closing: %v", err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(f.Path(), &st); err != nil || st.Ino != f.ID.Ino {
		t.Errorf("Path %s: ino %d, %v; want %d", f.Path(), st.Ino, err, f.ID.Ino)
	}
}

// TestOpenIn: an absolute symlink inside a container's root resolves in
// that root, not in the collector's.
func TestOpenIn(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "gpuprobe-test-only", "libx.so")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// /lib2 -> /gpuprobe-test-only: only inside root does it exist.
	if err := os.Symlink("/gpuprobe-test-only", filepath.Join(root, "lib2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "gpuprobe-test-only", "escape.so")); err != nil {
		t.Fatal(err)
	}
	var want syscall.Stat_t
	if err := syscall.Stat(lib, &want); err != nil {
		t.Fatal(err)
	}
	f, err := OpenIn(root, "/lib2/libx.so")
	if err != nil {
		t.Fatalf("OpenIn through an absolute symlink: %v", err)
	}
	if f.ID.Ino != want.Ino {
		t.Errorf("OpenIn: ino %d, want %d (the file inside root)", f.ID.Ino, want.Ino)
	}
	f.Close()
	if f, err := OpenIn(root, "/gpuprobe-test-only/escape.so"); err == nil {
		f.Close()
		t.Errorf("OpenIn of a final symlink succeeded")
	}
	if f, err := OpenIn(root, "/../../../etc/hostname"); err == nil {
		defer f.Close()
		var host syscall.Stat_t
		if syscall.Stat("/etc/hostname", &host) == nil && host.Ino == f.ID.Ino && uint64(host.Dev) == f.ID.Dev {
			t.Errorf("OpenIn escaped root with ..")
		}
	}
}
