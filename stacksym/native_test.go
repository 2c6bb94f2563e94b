package stacksym

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeProc writes process 7's maps (one executable mapping of file at
// 0x1000) and stat (start time start) under root.
func writeProc(t *testing.T, root, file, start string) {
	t.Helper()
	d := filepath.Join(root, "7")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	maps := "1000-2000 r-xp 00000000 00:00 0 " + file + "\n"
	// Fields 3 to 21, then the start time (field 22), then one more.
	stat := "7 (a b) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + start + " 0\n"
	for name, body := range map[string]string{"maps": maps, "stat": stat} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPIDReuse: a process's cached maps serve its resolves until its
// start time changes (checked once startCheckEvery passed) or Forget
// drops them; then the pid's new maps are read.
func TestPIDReuse(t *testing.T) {
	root := t.TempDir()
	now := time.Unix(100, 0)
	r := Resolver{Proc: root, now: func() time.Time { return now }}
	file := func() string { return r.Native(7, []uint64{0x1800}, nil)[0].File }
	writeProc(t, root, "/old.so", "500")
	if f := file(); f != "/old.so" {
		t.Fatalf("first resolve: %q", f)
	}
	for _, step := range []struct {
		name        string
		file, start string
		advance     time.Duration
		forget      bool
		want        string
	}{
		{"maps changed, same process: cached", "/new.so", "500", 2 * startCheckEvery, false, "/old.so"},
		{"new start time, within the check interval: cached", "/new.so", "900", startCheckEvery / 2, false, "/old.so"},
		{"new start time, checked: re-read", "/new.so", "900", startCheckEvery, false, "/new.so"},
		{"same start time, forgotten: re-read", "/third.so", "900", 0, true, "/third.so"},
	} {
		writeProc(t, root, step.file, step.start)
		now = now.Add(step.advance)
		if step.forget {
			r.Forget(7)
		}
		if f := file(); f != step.want {
			t.Errorf("%s: resolved to %q, want %q", step.name, f, step.want)
		}
	}
}
