package discover

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScanPreloaded: real processes that map the stand-in libraries at
// start are found with the right kind, identity, path and pids.
func TestScanPreloaded(t *testing.T) {
	b := artifacts(t)
	drv, rt := mustID(t, b.driver), mustID(t, b.runtime)
	tests := []struct {
		name    string
		preload []string
		procs   int
		want    map[Key]Kind
		absent  []Key
	}{
		{"driver only", []string{b.driver}, 1, map[Key]Kind{drv: KindDriver}, []Key{rt}},
		{"runtime only", []string{b.runtime}, 1, map[Key]Kind{rt: KindRuntime}, []Key{drv}},
		{"both, two processes", []string{b.driver, b.runtime}, 2, map[Key]Kind{drv: KindDriver, rt: KindRuntime}, nil},
		{"through the libcuda.so symlink", []string{b.driverLink}, 1, map[Key]Kind{drv: KindDriver}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pids []int
			for range tt.procs {
				p := start(t, []string{"LD_PRELOAD=" + strings.Join(tt.preload, ":")}, b.holder)
				pids = append(pids, p.pid())
			}
			slices.Sort(pids)
			libs, err := ScanProcs("/proc")
			if err != nil {
				t.Fatal(err)
			}
			for k, kind := range tt.want {
				l, ok := byKey(libs, k)
				if !ok {
					t.Fatalf("library %v not found in %v", k, libs)
				}
				if l.Kind != kind {
					t.Errorf("%s: kind %s, want %s", l.Path, l.Kind, kind)
				}
				if got := mustID(t, l.Path); got != k {
					t.Errorf("%s: stat gives %v, want %v", l.Path, got, k)
				}
				if kind == KindDriver && l.Path != b.driver {
					t.Errorf("path %s, want the mapped file %s", l.Path, b.driver)
				}
				if !isSubset(pids, l.PIDs) {
					t.Errorf("%s: pids %v, want %v among them", l.Path, l.PIDs, pids)
				}
				if want := fmt.Sprintf("pid %d maps", l.PIDs[0]); l.Source != want {
					t.Errorf("%s: source %q, want %q", l.Path, l.Source, want)
				}
			}
			for _, k := range tt.absent {
				if l, ok := byKey(libs, k); ok && slices.Contains(l.PIDs, pids[0]) {
					t.Errorf("%s reported mapped in pid %d, which does not map it", l.Path, pids[0])
				}
			}
		})
	}
}

func isSubset(sub, set []int) bool {
	for _, x := range sub {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// TestScannerLateDlopen: a process already scanned that dlopens libcuda
// later (as cudart does at the first CUDA call) is found by the next scan,
// even with the periodic full rescan pushed out of reach.
func TestScannerLateDlopen(t *testing.T) {
	b := artifacts(t)
	s := NewScanner(ScanOptions{RescanEvery: 1 << 30})
	p := start(t, nil, b.holder)
	libs, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	drv, rt := mustID(t, b.driver), mustID(t, b.runtime)
	for _, k := range []Key{drv, rt} {
		if l, ok := byKey(libs, k); ok && slices.Contains(l.PIDs, p.pid()) {
			t.Fatalf("before dlopen: %v already mapped by pid %d", l, p.pid())
		}
	}
	for i, lib := range []string{b.driver, b.runtime} {
		p.dlopen(lib)
		libs, err = s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		k := []Key{drv, rt}[i]
		l, ok := byKey(libs, k)
		if !ok || !slices.Contains(l.PIDs, p.pid()) {
			t.Fatalf("after dlopen %s: not found for pid %d in %v", lib, p.pid(), libs)
		}
	}
	if st := s.Stats(); st.Scans != 3 || st.MapsParsed == 0 || st.Processes == 0 {
		t.Errorf("stats %+v: want 3 scans, some maps parsed and processes seen", st)
	}
}

// TestStaticRuntimeELF classifies executables and libraries by the CUDA
// entry points they define.
func TestStaticRuntimeELF(t *testing.T) {
	b := artifacts(t)
	tests := []struct {
		name string
		path string
		want Kind
	}{
		{"static runtime, .symtab", b.staticApp, KindStaticRuntime},
		{"static runtime, stripped, exported in .dynsym", b.exportedApp, KindStaticRuntime},
		{"static runtime, stripped: invisible", b.strippedApp, KindUnknown},
		{"imports cudaLaunchKernel: not static", b.dynamicApp, KindUnknown},
		{"runtime stand-in", b.runtime, KindRuntime},
		{"driver stand-in", b.driver, KindDriver},
		{"plain library", b.plainLib, KindUnknown},
		{"holder", b.holder, KindUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := inspectPath(t, tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := info.kind(); got != tt.want {
				t.Errorf("%s: kind %s, want %s (%+v)", tt.path, got, tt.want, info)
			}
		})
	}
	t.Run("not ELF", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "text")
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := inspectPath(t, p); err == nil || !strings.Contains(err.Error(), "not an ELF file") || !strings.Contains(err.Error(), p) {
			t.Errorf("error %v: want 'not an ELF file' naming %s", err, p)
		}
	})
	t.Run("truncated ELF", func(t *testing.T) {
		data, err := os.ReadFile(b.staticApp)
		if err != nil {
			t.Fatal(err)
		}
		// The section headers are at the end: every cut loses them.
		for _, n := range []int{2, 16, 63, 64, 200, len(data) / 2, len(data) - 1} {
			p := filepath.Join(t.TempDir(), "cut")
			if err := os.WriteFile(p, data[:n], 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := inspectPath(t, p); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("%d bytes: error %v, want one naming %s", n, err, p)
			}
		}
	})
}

// TestScanStaticRuntime: running executables are classified: the static
// one is reported with its own path, the one importing the runtime is not,
// but the runtime library it maps is.
func TestScanStaticRuntime(t *testing.T) {
	b := artifacts(t)
	st := start(t, nil, b.staticApp)
	dyn := start(t, nil, b.dynamicApp)
	s := NewScanner(ScanOptions{})
	libs, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	l, ok := byKey(libs, mustID(t, b.staticApp))
	if !ok {
		t.Fatalf("static runtime executable not found in %v", libs)
	}
	if l.Kind != KindStaticRuntime || l.Path != b.staticApp || !slices.Contains(l.PIDs, st.pid()) ||
		l.Source != fmt.Sprintf("pid %d exe", l.PIDs[0]) {
		t.Errorf("got %v, want static-runtime %s of pid %d from exe", l, b.staticApp, st.pid())
	}
	if l, ok := byKey(libs, mustID(t, b.dynamicApp)); ok {
		t.Errorf("an executable that imports cudaLaunchKernel was reported: %v", l)
	}
	if l, ok := byKey(libs, mustID(t, b.runtime)); !ok || l.Kind != KindRuntime || !slices.Contains(l.PIDs, dyn.pid()) {
		t.Errorf("runtime mapped by pid %d: got %v (found %v)", dyn.pid(), l, ok)
	}
	// A second process of the same executable costs no second ELF check
	// (counted per executable: other processes of the machine may start
	// meanwhile and be checked).
	key := mustID(t, b.staticApp)
	if n := s.checked[key]; n != 1 {
		t.Fatalf("%s checked %d times by the first scan, want 1", b.staticApp, n)
	}
	st2 := start(t, nil, b.staticApp)
	libs, err = s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if n := s.checked[key]; n != 1 {
		t.Errorf("%s checked %d times: the verdict was not cached", b.staticApp, n)
	}
	if l, _ := byKey(libs, mustID(t, b.staticApp)); !slices.Contains(l.PIDs, st2.pid()) {
		t.Errorf("second process %d missing: %v", st2.pid(), l)
	}
}

// TestScanMountNamespace: a library that exists only inside a process's
// own mount namespace (a tmpfs mounted there, as in a container) is
// reported through /proc/<pid>/root, and opening that path gives the
// mapped file.
func TestScanMountNamespace(t *testing.T) {
	requireRoot(t)
	b := artifacts(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed for the mount namespace test")
	}
	dir := t.TempDir()
	inner := filepath.Join(dir, "container-lib")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `mount -t tmpfs gpuprobe-test "$1" && cp "$2" "$3" "$1"/ && exec "$4"`
	p := start(t, nil, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
		inner, b.runtime, b.driver, b.holder)
	inRT := filepath.Join(inner, filepath.Base(b.runtime))
	inDrv := filepath.Join(inner, filepath.Base(b.driver))
	p.dlopen(inRT)
	p.dlopen(inDrv)
	if _, err := os.Stat(inRT); err == nil {
		t.Fatalf("%s is visible outside the namespace: the test proves nothing", inRT)
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.pid())); err != nil || ns == hostNS {
		t.Fatalf("pid %d: mount namespace %q (err %v), the collector's is %q", p.pid(), ns, err, hostNS)
	}
	libs, err := ScanProcs("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inside string
		kind   Kind
	}{{inRT, KindRuntime}, {inDrv, KindDriver}} {
		want := fmt.Sprintf("/proc/%d/root%s", p.pid(), c.inside)
		var got *Library
		for i := range libs {
			if libs[i].Path == want {
				got = &libs[i]
			}
		}
		if got == nil {
			t.Fatalf("%s not found in %v", want, libs)
		}
		if got.Kind != c.kind || !slices.Equal(got.PIDs, []int{p.pid()}) {
			t.Errorf("got %v, want %s in pid %d only", got, c.kind, p.pid())
		}
		f, err := os.Open(got.Path)
		if err != nil {
			t.Fatalf("opening %s: %v", got.Path, err)
		}
		id, err := statFile(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if id != got.Key() {
			t.Errorf("%s: open+fstat gives %v, reported %v", got.Path, id, got.Key())
		}
		if host := mustID(t, map[Kind]string{KindRuntime: b.runtime, KindDriver: b.driver}[c.kind]); host == got.Key() {
			t.Errorf("the copy in the namespace has the host file's identity %v", host)
		}
		// The identity matches what the process has mapped.
		if !mapsHasInode(t, p.pid(), c.inside, got.Ino) {
			t.Errorf("pid %d maps no %s with inode %d", p.pid(), c.inside, got.Ino)
		}
	}
}

func statFile(f *os.File) (Key, error) {
	fi, err := f.Stat()
	if err != nil {
		return Key{}, err
	}
	id, err := idOf(f.Name(), fi)
	return id.key(), err
}

func mapsHasInode(t *testing.T, pid int, path string, ino uint64) bool {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		m, err := ParseMapsLine(line)
		if err != nil {
			t.Fatalf("real maps line %q: %v", line, err)
		}
		if m.Path == path && m.Inode == ino {
			return true
		}
	}
	return false
}

// BenchmarkScanProcs is one full scan of this machine's /proc with a new
// Scanner: every maps file parsed, every executable inspected.
func BenchmarkScanProcs(b *testing.B) {
	n := 0
	for b.Loop() {
		libs, err := ScanProcs("/proc")
		if err != nil {
			b.Fatal(err)
		}
		n = len(libs)
	}
	b.ReportMetric(float64(n), "libs")
}

// BenchmarkScannerSteady is a scan with the Scanner's caches warm: the
// Watcher's cost per interval on an unchanging machine.
func BenchmarkScannerSteady(b *testing.B) {
	s := NewScanner(ScanOptions{})
	if _, err := s.Scan(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	st := s.Stats()
	b.ReportMetric(float64(st.Processes), "procs")
	b.ReportMetric(float64(st.MapsParsed)/float64(st.Scans), "maps/scan")
}
