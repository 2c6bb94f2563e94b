package translate

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProcName(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		pid  uint32
		want string
	}{
		{"this process: the executable's base name, not comm's 15 bytes", uint32(os.Getpid()), filepath.Base(exe)},
		{"no such process", 1 << 30, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ProcName(tt.pid); got != tt.want {
				t.Fatalf("ProcName(%d) = %q, want %q", tt.pid, got, tt.want)
			}
		})
	}
}

// TestProcessNameNotCachedEmpty: a pid whose name could not be read is
// asked again later (its first record may come after it exited, a later
// one from a new process with the same pid).
func TestProcessNameNotCachedEmpty(t *testing.T) {
	calls := 0
	names := []string{"", "app"}
	tr := New(Options{ProcessName: func(uint32) string { calls++; return names[min(calls-1, 1)] }})
	if n := tr.spans.res.processName(7); n != "" {
		t.Fatalf("first = %q", n)
	}
	if n := tr.spans.res.processName(7); n != "app" {
		t.Fatalf("second = %q, want app (not a cached empty name)", n)
	}
	if n := tr.spans.res.processName(7); n != "app" || calls != 2 {
		t.Fatalf("third = %q after %d calls, want the cached app after 2", n, calls)
	}
}
