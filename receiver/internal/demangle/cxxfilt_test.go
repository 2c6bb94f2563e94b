package demangle

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// loadCorpus reads testdata/*.txt: one mangled name per line, '#' comments.
func loadCorpus(t testing.TB) []string {
	t.Helper()
	var names []string
	for _, f := range []string{"testdata/corpus.txt", "testdata/grammar.txt"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("reading corpus: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			names = append(names, line)
		}
	}
	return names
}

// cxxfilt runs binutils' c++filt over names, one per line, as the oracle.
func cxxfilt(t *testing.T, names []string) []string {
	t.Helper()
	path, err := exec.LookPath("c++filt")
	if err != nil {
		t.Fatalf("c++filt (binutils) is needed as the oracle for this test and was not found on PATH: %v; install binutils", err)
	}
	cmd := exec.Command(path)
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running c++filt: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("c++filt returned %d lines for %d names", len(lines), len(names))
	}
	return lines
}

// TestAgainstCxxfilt compares Demangle with c++filt on the whole corpus.
func TestAgainstCxxfilt(t *testing.T) {
	names := loadCorpus(t)
	if len(names) < 60 {
		t.Fatalf("corpus has %d names, want at least 60", len(names))
	}
	want := cxxfilt(t, names)
	bad := 0
	for i, n := range names {
		got := Demangle(n)
		if got != want[i] {
			bad++
			t.Errorf("Demangle(%s)\n got: %s\nwant: %s", n, got, want[i])
		}
	}
	if bad > 0 {
		t.Logf("%d of %d names differ from c++filt", bad, len(names))
	}
}
