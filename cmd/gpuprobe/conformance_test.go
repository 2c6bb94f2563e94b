package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func conformanceRoot(t *testing.T) string {
	dir := os.Getenv("GPUPROBE_CONFORMANCE")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata", "conformance")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("conformance data not found: %v", err)
	}
	return dir
}

func TestConformanceCommand(t *testing.T) {
	root := conformanceRoot(t)
	bad := filepath.Join(t.TempDir(), "bad.data")
	if err := os.WriteFile(bad, []byte("-- asm\nmov %r0, 2\nexit\n-- result\n0x1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		lastLine string
		contains string
	}{
		{"suite", []string{"conformance", filepath.Join(root, "tests")}, 0, " passed, 0 failed", ""},
		{"negative", []string{"conformance", "-negative", filepath.Join(root, "negative")}, 0, " passed, 0 failed", ""},
		{"negative verbose", []string{"conformance", "-negative", "-v", filepath.Join(root, "negative", "error.data")}, 0, "1 passed, 0 failed", "rejected at verify: verifier: insn 0"},
		{"failure", []string{"conformance", filepath.Join(root, "tests", "add.data"), bad}, 1, "1 passed, 1 failed", "bad.data: FAIL: interp: r0 = 0x2, want 0x1"},
		{"no paths", []string{"conformance"}, 2, "", "usage: gpuprobe conformance"},
		{"missing path", []string{"conformance", "/nonexistent"}, 1, "", "conformance path"},
		{"gpu unavailable here", []string{"conformance", "-gpu", bad}, 1, "", "gpuprobe conformance: -gpu: "},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"help", []string{"help"}, 0, "", "conformance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(tt.args, &out, &errOut)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out.String(), errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if tt.lastLine != "" && !strings.HasSuffix(lines[len(lines)-1], tt.lastLine) {
				t.Fatalf("last line %q, want %q", lines[len(lines)-1], tt.lastLine)
			}
			if all := out.String() + errOut.String(); !strings.Contains(all, tt.contains) {
				t.Fatalf("output does not contain %q:\n%s", tt.contains, all)
			}
		})
	}
}
