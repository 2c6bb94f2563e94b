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
