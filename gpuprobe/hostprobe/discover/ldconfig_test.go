package discover

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseLdconfig parses testdata/ldconfig-p.txt: lines captured from
// `ldconfig -p` on a Debian 12 machine with CUDA 11.8, plus i386, AArch64,
// OS ABI and hwcap entries and malformed lines added by hand.
func TestParseLdconfig(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "ldconfig-p.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := ParseLdconfig(f)
	for _, want := range []string{
		`line 15 "\tlibbroken.so (libc6,x86-64) -> /usr/lib/libbroken.so": no " => "`,
		`line 16 "\tlibbroken2.so (libc6,x86-64) => relative/libbroken2.so": path "relative/libbroken2.so" is not absolute`,
		`line 17 "\tlibbroken3.so => /usr/lib/libbroken3.so": want "<name> (<flags>)"`,
		`line 18 "garbage": no " => "`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %s", err, want)
		}
	}
	if err != nil && strings.Count(err.Error(), "\n") != 3 {
		t.Errorf("error names more than the 4 malformed lines: %v", err)
	}
	tests := []struct {
		i    int
		want LdconfigEntry
	}{
		{0, LdconfigEntry{"libcuda.so.1", "libc6", "/usr/lib/i386-linux-gnu/libcuda.so.1"}},
		{3, LdconfigEntry{"libcudart.so.11.0", "libc6,x86-64", "/lib/x86_64-linux-gnu/libcudart.so.11.0"}},
		{9, LdconfigEntry{"libcudart.so.12", "libc6,x86-64, OS ABI: Linux 3.2.0", "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12"}},
		{10, LdconfigEntry{"libcuda.so.1", "libc6,AArch64", "/usr/lib/aarch64-linux-gnu/libcuda.so.1"}},
		{11, LdconfigEntry{"libx.so", "libc6,x86-64, hwcap: 0x0000000000000004", "/usr/lib/x86_64-linux-gnu/tls/libx.so"}},
	}
	if len(entries) != 12 {
		t.Fatalf("%d entries, want 12: %+v", len(entries), entries)
	}
	for _, tt := range tests {
		if entries[tt.i] != tt.want {
			t.Errorf("entry %d: %+v, want %+v", tt.i, entries[tt.i], tt.want)
		}
	}
}

// TestLibrariesFromLdconfig filters entries by name and architecture and
// resolves them to files.
func TestLibrariesFromLdconfig(t *testing.T) {
	b := artifacts(t)
	entries := []LdconfigEntry{
		{"libcuda.so.1", "libc6,x86-64", b.driver},
		{"libcuda.so", "libc6,x86-64", b.driverLink},                                 // same file
		{"libcudart.so.13", "libc6,x86-64, OS ABI: Linux 3.2.0", b.runtime},          // flags with spaces
		{"libcuda.so.1", "libc6", b.renamedDrv},                                      // 32-bit
		{"libcudart.so.12", "libc6,x86-64", filepath.Join(b.dir, "gone.so.12")},      // stale cache
		{"libplain.so", "libc6,x86-64", b.plainLib},                                  // not CUDA
		{"libcuda.so.1", "libc6,AArch64", filepath.Join(b.dir, "lib", "nothing.so")}, // other arch
	}
	tests := []struct {
		goarch string
		want   map[Key]Kind
	}{
		{"amd64", map[Key]Kind{mustID(t, b.driver): KindDriver, mustID(t, b.runtime): KindRuntime}},
		{"arm64", map[Key]Kind{}},
		{"mips64", map[Key]Kind{ // no architecture word known: nothing filtered
			mustID(t, b.driver): KindDriver, mustID(t, b.runtime): KindRuntime, mustID(t, b.renamedDrv): KindDriver}},
	}
	for _, tt := range tests {
		t.Run(tt.goarch, func(t *testing.T) {
			libs, err := librariesFromLdconfig(entries, tt.goarch)
			if err != nil {
				t.Errorf("refusals: %v", err)
			}
			if len(libs) != len(tt.want) {
				t.Fatalf("got %v, want %d libraries", libs, len(tt.want))
			}
			for _, l := range libs {
				if k, ok := tt.want[l.Key()]; !ok || k != l.Kind || l.Source != "ldconfig" || mustID(t, l.Path) != l.Key() {
					t.Errorf("unexpected %v", l)
				}
			}
		})
	}
}

// TestFromLdconfigReal runs this machine's ldconfig: CUDA 11.8's
// libcudart is installed here and on CI.
func TestFromLdconfigReal(t *testing.T) {
	libs, err := FromLdconfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	runtimes := 0
	for _, l := range libs {
		if l.Kind == KindRuntime {
			runtimes++
		}
		if l.Source != "ldconfig" || !filepath.IsAbs(l.Path) || mustID(t, l.Path) != l.Key() {
			t.Errorf("bad library %v", l)
		}
		if l.Kind == KindUnknown || l.Kind == KindStaticRuntime {
			t.Errorf("ldconfig gave kind %s: %v", l.Kind, l)
		}
	}
	if runtimes == 0 {
		t.Fatalf("ldconfig -p lists no libcudart for this architecture (got %v): install CUDA (Debian: nvidia-cuda-toolkit, as CI does)", libs)
	}
}

// TestFromLdconfigMissing: without ldconfig the error says so.
func TestFromLdconfigMissing(t *testing.T) {
	saved := ldconfigCandidates
	t.Cleanup(func() { ldconfigCandidates = saved })
	dir := t.TempDir()
	ldconfigCandidates = []string{filepath.Join(dir, "ldconfig"), "gpuprobe-no-such-ldconfig"}
	_, err := FromLdconfig(context.Background())
	if err == nil || !containsAll(err.Error(), "ldconfig: not found in", filepath.Join(dir, "ldconfig"), "nor in PATH") {
		t.Errorf("error %v, want one saying ldconfig was not found", err)
	}
}
