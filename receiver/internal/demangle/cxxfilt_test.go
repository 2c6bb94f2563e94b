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

// TestMutationsAgainstCxxfilt compares Demangle with c++filt on damaged
// names: every prefix of a sample of the corpus, and single-byte edits, so
// that invalid and borderline input is judged the same way as c++filt does.
func TestMutationsAgainstCxxfilt(t *testing.T) {
	corpus := loadCorpus(t)
	var names []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] && !strings.ContainsAny(s, " \t\n") {
			seen[s] = true
			names = append(names, s)
		}
	}
	const edits = "_0123456789EISTZNPRKLXvifjm"
	for i := 0; i < len(corpus); i += 7 {
		n := corpus[i]
		if len(n) > 300 {
			continue
		}
		for j := 3; j < len(n); j++ {
			add(n[:j])
		}
		for j := 2; j < len(n); j += 3 {
			e := edits[(i+j)%len(edits)]
			add(n[:j] + string(e) + n[j+1:])
			add(n[:j] + string(e) + n[j:])
		}
	}
	// Damaged names on which c++filt's output follows from quirks of its
	// implementation rather than from the ABI; we do not copy these.
	quirks := map[string]string{
		// ref-qualifier on a nested type name: c++filt adds a "const".
		"_ZL181__device_stub__ZN3cub17CUB_101702_800_NS29DeviceRadixSortOnesweepKernelINS0_21DeviceRadixSortPolicyIfNS0_8NullTypeEjE9Policy800ELb0EfS3_jiiEEvPT5_S7_PT3_PKS8_PT1_PKSC_PT2_PKSG_T4_iiPiS_PjPKjPfPKfPNR3cub17CUB_101702_800_NS8NullTypeEPKS8_iii": "",
		// inheriting constructor CI2 followed by template arguments, not a type.
		"_ZN6thrust10device_ptrIfECI2IfEEPT_": "",
	}
	want := cxxfilt(t, names)
	bad := 0
	for i, n := range names {
		if _, ok := quirks[n]; ok {
			continue
		}
		if got := Demangle(n); got != want[i] {
			bad++
			if bad <= 20 {
				t.Errorf("Demangle(%s)\n got: %s\nwant: %s", n, got, want[i])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d damaged names differ from c++filt", bad, len(names))
	}
}
