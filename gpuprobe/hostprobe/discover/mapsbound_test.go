package discover

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// fakeProc100 makes a proc root holding testdata/proc/100 with maps as
// its maps file.
func fakeProc100(t *testing.T, maps []byte) string {
	t.Helper()
	proc, err := filepath.Abs(filepath.Join("testdata", "proc"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "100")
	for _, f := range []string{"100/stat", "100/ns/mnt", "self/ns/mnt"} {
		b, err := os.ReadFile(filepath.Join(proc, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	target, err := filepath.EvalSymlinks(filepath.Join(proc, "100", "root"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), maps, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestScanMapsBound: a maps file is read to procread.MaxMapsBytes and
// no further (libraries mapped past the bound are not seen, the cut
// counted); a line longer than procread.MaxMapsLine is malformed, the
// lines after it still read.
func TestScanMapsBound(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join("testdata", "proc", "100", "maps"))
	if err != nil {
		t.Fatal(err)
	}
	filler := []byte("7e0000000000-7e0000001000 r--p 00000000 00:00 99 /usr/lib/libfiller.so\n")
	pad := bytes.Repeat(filler, procread.MaxMapsBytes/len(filler)+1)
	long := "7e0000000000-7e0000001000 r-xp 00000000 00:00 98 /" + strings.Repeat("x", procread.MaxMapsLine) + "/libcuda.so.1\n"
	tests := []struct {
		name      string
		maps      []byte
		libs      int
		malformed uint64
		truncated uint64
	}{
		{"libraries first", append(append([]byte{}, orig...), pad...), 2, 3, 1},
		{"libraries past the bound", append(append([]byte{}, pad...), orig...), 0, 0, 1},
		{"long line", append([]byte(long), orig...), 2, 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScanner(ScanOptions{ProcRoot: fakeProc100(t, tc.maps)})
			libs, err := s.Scan()
			if err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if len(libs) != tc.libs || st.MalformedLines != tc.malformed || st.MapsTruncated != tc.truncated {
				t.Errorf("%d libraries %v, stats %+v; want %d, %d malformed, %d truncated",
					len(libs), libs, st, tc.libs, tc.malformed, tc.truncated)
			}
		})
	}
}
