package procread

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// repeatReader yields line n times without holding them: a maps file of
// any size in constant memory. It counts the bytes it handed out.
type repeatReader struct {
	line []byte
	n    int
	off  int
	read int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.line[r.off:])
		p, r.off, total = p[c:], r.off+c, total+c
		if r.off == len(r.line) {
			r.off, r.n = 0, r.n-1
		}
	}
	r.read += int64(total)
	if total == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return total, nil
}

func TestLines(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name     string
		in       string
		maxBytes int64
		maxLine  int
		want     []string
		cut      int
		trunc    bool
	}{
		{"empty", "", 100, 16, nil, 0, false},
		{"lines", "a\nbb\nccc\n", 100, 16, []string{"a", "bb", "ccc"}, 0, false},
		{"no final newline", "a\nbb", 100, 16, []string{"a", "bb"}, 0, false},
		{"empty lines passed", "a\n\nb\n", 100, 16, []string{"a", "", "b"}, 0, false},
		{"long line cut, rest skipped", "a\n" + long + "\nb\n", 1000, 16, []string{"a", long[:16], "b"}, 1, false},
		{"long last line", "a\n" + long, 1000, 16, []string{"a", long[:16]}, 1, false},
		{"exactly the bound", "a\nb\n", 4, 16, []string{"a", "b"}, 0, false},
		{"bound cuts a line", "a\nbb\nccc\n", 6, 16, []string{"a", "bb"}, 0, true},
		{"bound at a line's end", "a\nbb\nccc\n", 5, 16, []string{"a", "bb"}, 0, true},
		{"bound inside a long line", "a\n" + long + "\n", 50, 16, []string{"a", long[:16]}, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			sc, err := Lines(strings.NewReader(tc.in), tc.maxBytes, tc.maxLine, func(l []byte, cut bool) bool {
				got = append(got, string(l))
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || sc.Cut != tc.cut || sc.Truncated != tc.trunc || sc.Lines != len(tc.want) {
				t.Errorf("lines %q, %+v; want %q, cut %d, truncated %v", got, sc, tc.want, tc.cut, tc.trunc)
			}
			if sc.Bytes > tc.maxBytes || !tc.trunc && sc.Bytes != int64(len(tc.in)) {
				t.Errorf("read %d bytes of %d, bound %d", sc.Bytes, len(tc.in), tc.maxBytes)
			}
		})
	}
}

// TestLinesHugeFile: a 233 MiB maps-like file is read to the bound and
// no further, in memory that does not grow with the file; a callback
// that has its answer stops the read at once.
func TestLinesHugeFile(t *testing.T) {
	line := []byte("7f0000000000-7f0000001000 r--p 00000000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libc.so.6\n")
	n := (233 << 20) / len(line)
	r := &repeatReader{line: line, n: n}
	lines := 0
	sc, err := Lines(r, MaxMapsBytes, MaxMapsLine, func([]byte, bool) bool { lines++; return true })
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Truncated || sc.Bytes != MaxMapsBytes || lines != MaxMapsBytes/len(line) {
		t.Errorf("%+v, %d lines; want truncated at %d bytes, %d lines", sc, lines, MaxMapsBytes, MaxMapsBytes/len(line))
	}
	if r.read > MaxMapsBytes+MaxMapsLine+1 {
		t.Errorf("read %d bytes of the file, bound %d", r.read, MaxMapsBytes)
	}

	r = &repeatReader{line: line, n: n}
	sc, _ = Lines(r, MaxMapsBytes, MaxMapsLine, func(l []byte, _ bool) bool { return !bytes.Contains(l, []byte("libc")) })
	if !sc.Stopped || sc.Lines != 1 || r.read > MaxMapsLine {
		t.Errorf("stopping at the first line: %+v, %d bytes read", sc, r.read)
	}

	allocs := testing.AllocsPerRun(3, func() {
		r := &repeatReader{line: line, n: (8 << 20) / len(line)}
		Lines(r, MaxMapsBytes, MaxMapsLine, func([]byte, bool) bool { return true })
	})
	if allocs > 10 {
		t.Errorf("%.0f allocations to scan 8 MiB: the scan must not grow with the file", allocs)
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "status")
	if err := os.WriteFile(p, []byte("Name:\tx\nGroups:\t1 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := File(p, 64); err != nil || string(b) != "Name:\tx\nGroups:\t1 2\n" {
		t.Errorf("File: %q, %v", b, err)
	}
	if b, err := File(p, 20); err != nil || len(b) != 20 {
		t.Errorf("File at exactly its size: %q, %v", b, err)
	}
	b, err := File(p, 8)
	if !errors.Is(err, ErrTruncated) || string(b) != "Name:\tx\n" || !strings.Contains(err.Error(), p) {
		t.Errorf("File over its bound: %q, %v", b, err)
	}
	if _, err := File(filepath.Join(dir, "none"), 8); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
