package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallShim(t *testing.T) {
	src := filepath.Join(t.TempDir(), ShimName)
	if err := os.WriteFile(src, []byte("\x7fELF shim"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// An older copy is replaced whole.
	if err := os.WriteFile(filepath.Join(dir, ShimName), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"install-shim", "--shim", src, dir}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	dst := filepath.Join(dir, ShimName)
	if strings.TrimSpace(out.String()) != dst {
		t.Errorf("printed %q, want %q", out.String(), dst)
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != "\x7fELF shim" {
		t.Fatalf("installed %q, %v", got, err)
	}
	st, _ := os.Stat(dst)
	if st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left %d files in %s, want only %s", len(entries), dir, ShimName)
	}
}

func TestInstallShimErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		rc   int
	}{
		{"no dir", []string{"install-shim", "--shim", "/nonexistent/" + ShimName}, 2},
		{"missing shim", []string{"install-shim", "--shim", "/nonexistent/" + ShimName, t.TempDir()}, 1},
		{"missing dir", []string{"install-shim", "--shim", "/proc/self/exe", "/nonexistent/dir"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if rc := run(tc.args, &out, &errb); rc != tc.rc {
				t.Errorf("rc %d, want %d (%s)", rc, tc.rc, errb.String())
			}
		})
	}
}

// TestInstallShimCacheDir: --cache-dir makes the cache's root sticky and
// open to every uid (each makes its own private subdirectory there), and
// refuses a path that is not a directory.
func TestInstallShimCacheDir(t *testing.T) {
	src := filepath.Join(t.TempDir(), ShimName)
	if err := os.WriteFile(src, []byte("\x7fELF shim"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	var out, errb bytes.Buffer
	if rc := run([]string{"install-shim", "--shim", src, "--cache-dir", cache, t.TempDir()}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	st, err := os.Lstat(cache)
	if err != nil || !st.IsDir() || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Fatalf("cache dir %v, %v: want a sticky 0777 directory", st.Mode(), err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if rc := run([]string{"install-shim", "--shim", src, "--cache-dir", file, t.TempDir()}, &out, &errb); rc != 1 {
		t.Errorf("a file as cache dir: rc %d, want 1", rc)
	}
}
