package translate

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
// one from a new process with the same pid), but not by every record
// within nameRetry: a client naming pids that do not exist must not cost
// two /proc reads a record.
func TestProcessNameNotCachedEmpty(t *testing.T) {
	calls := 0
	names := []string{"", "app"}
	tr := New(Options{ProcessName: func(uint32) string { calls++; return names[min(calls-1, 1)] }})
	now := time.Unix(100, 0)
	tr.spans.res.now = func() time.Time { return now }
	for _, step := range []struct {
		name    string
		advance time.Duration
		want    string
		calls   int
	}{
		{"first: unreadable", 0, "", 1},
		{"within the retry: not read again", nameRetry / 2, "", 1},
		{"after the retry: read again", nameRetry, "app", 2},
		{"then cached", nameRetry, "app", 2},
	} {
		now = now.Add(step.advance)
		if n := tr.spans.res.processName(7); n != step.want || calls != step.calls {
			t.Fatalf("%s: %q after %d reads, want %q after %d", step.name, n, calls, step.want, step.calls)
		}
	}
}
