package discover

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// TestSwapAfterCheck renames a CUDA driver over a checked plain library
// between the identity check and the ELF inspection: the file inspected
// must be the file checked, so the plain library is no CUDA library and
// the driver's inode is never reported under the plain one's identity.
func TestSwapAfterCheck(t *testing.T) {
	b := artifacts(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "libnv.so")
	swap := filepath.Join(dir, "swap.so")
	copyFile(t, b.plainLib, path)
	copyFile(t, b.renamedDrv, swap)
	plain, drv := mustID(t, path), mustID(t, swap)
	testHookChecked = func(string) {
		testHookChecked = nil
		if err := os.Rename(swap, path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookChecked = nil }()
	libs, err := FromConfig([]string{path})
	for _, l := range libs {
		if l.Key() == plain {
			t.Errorf("FromConfig reported %v: the plain library's identity with the swapped-in driver's kind", l)
		} else if l.Key() != drv {
			t.Errorf("FromConfig reported %v, an unknown file", l)
		}
	}
	if len(libs) == 0 && !containsAll(errString(err), "not a CUDA library") {
		t.Errorf("FromConfig error %v, want not a CUDA library", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// inspectPath opens path and inspects it.
func inspectPath(t testing.TB, path string) (elfInfo, error) {
	t.Helper()
	f, err := libfile.Open(path)
	if err != nil {
		return elfInfo{}, err
	}
	defer f.Close()
	return inspectELF(f)
}

// TestConfigOwnership: root's library locations hold root's files.
func TestConfigOwnership(t *testing.T) {
	b := artifacts(t)
	dir := t.TempDir()
	writable := filepath.Join(dir, "libcuda.so.1")
	copyFile(t, b.driver, writable)
	if err := os.Chmod(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfig([]string{writable}); !containsAll(errString(err), writable, "writable by every user") {
		t.Errorf("world-writable file: error %v, want writable by every user", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	other := filepath.Join(dir, "libcudart.so.13")
	copyFile(t, b.runtime, other)
	if err := os.Chown(other, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfig([]string{other}); !containsAll(errString(err), other, "not owned by root", "uid 4242") {
		t.Errorf("file of uid 4242: error %v, want not owned by root", err)
	}
	link := filepath.Join(dir, "libcuda.so")
	if err := os.Symlink(b.driver, link); err != nil {
		t.Fatal(err)
	}
	if libs, err := FromConfig([]string{link}); err != nil || len(libs) != 1 {
		t.Errorf("symlink to a root-owned driver: %v, %v; want the driver", libs, err)
	}
}

// TestLdconfigRefusal: a world-writable library in ldconfig's cache is
// left out and named in the error.
func TestLdconfigRefusal(t *testing.T) {
	b := artifacts(t)
	bad := filepath.Join(t.TempDir(), "libcudart.so.13")
	copyFile(t, b.runtime, bad)
	if err := os.Chmod(bad, 0o757); err != nil {
		t.Fatal(err)
	}
	entries := []LdconfigEntry{
		{Name: "libcuda.so.1", Flags: "libc6,x86-64", Path: b.driver},
		{Name: "libcudart.so.13", Flags: "libc6,x86-64", Path: bad},
	}
	libs, err := librariesFromLdconfig(entries, "amd64")
	if len(libs) != 1 || libs[0].Key() != mustID(t, b.driver) {
		t.Errorf("libraries %v, want the driver only", libs)
	}
	if !containsAll(errString(err), "refusing", bad, "writable by every user") {
		t.Errorf("error %v, want the refusal of %s", err, bad)
	}
}
