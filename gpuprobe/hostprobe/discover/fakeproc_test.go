package discover

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScanFakeProc scans testdata/proc: processes in other mount
// namespaces (root links into testdata/fsroot), a malformed stat, a
// vanished process, malformed, deleted, non-executable and unreachable
// mappings. Bad lines are skipped and counted, never fatal.
func TestScanFakeProc(t *testing.T) {
	root := filepath.Join("testdata", "proc")
	s := NewScanner(ScanOptions{ProcRoot: root})
	libs, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		path   string
		kind   Kind
		pids   []int
		source string
	}{
		{filepath.Join(root, "100/root/opt/cuda/lib64/libcudart.so.13"), KindRuntime, []int{100, 500}, "pid 100 maps"},
		{filepath.Join(root, "100/root/usr/lib/libcuda.so.1"), KindDriver, []int{100}, "pid 100 maps"},
	}
	if len(libs) != len(want) {
		t.Fatalf("got %d libraries %v, want %d", len(libs), libs, len(want))
	}
	for i, w := range want {
		l := libs[i]
		if l.Path != w.path || l.Kind != w.kind || !slices.Equal(l.PIDs, w.pids) || l.Source != w.source {
			t.Errorf("library %d: got %v\nwant %s %s pids %v from %q", i, l, w.kind, w.path, w.pids, w.source)
		}
		if id := mustID(t, w.path); id != l.Key() {
			t.Errorf("%s: identity %v, stat gives %v", w.path, l.Key(), id)
		}
	}
	// Per process: each with its own path to the file and its start time.
	procs := s.Processes()
	type proc struct {
		pid   int
		start uint64
		paths []string
	}
	var got []proc
	for _, pr := range procs {
		g := proc{pid: pr.PID, start: pr.Start}
		for _, l := range pr.Libs {
			g.paths = append(g.paths, l.Path)
		}
		got = append(got, g)
	}
	wantProcs := []proc{
		{100, 5000, []string{want[1].path, want[0].path}}, // in maps order
		{500, 7000, []string{filepath.Join(root, "500/root/opt/cuda/lib64/libcudart.so.13")}},
	}
	if fmt.Sprint(got) != fmt.Sprint(wantProcs) {
		t.Errorf("Processes() = %v, want %v", got, wantProcs)
	}
	st := s.Stats()
	// 100/maps: 3 bad lines, 200/stat: 1, 400/maps: 2, 500/maps: 1.
	if st.MalformedLines != 7 || st.Processes != 3 || st.MapsParsed != 3 || st.Scans != 1 {
		t.Errorf("stats %+v: want 7 malformed lines, 3 processes, 3 maps parsed, 1 scan", st)
	}
}

// TestScanErrors: a scan that cannot run at all says why.
func TestScanErrors(t *testing.T) {
	noSelf := t.TempDir()
	tests := []struct {
		name, root, want string
	}{
		{"missing proc root", filepath.Join(t.TempDir(), "nope"), "the collector's mount namespace"},
		{"no self", noSelf, fmt.Sprintf("scanning %s: the collector's mount namespace", noSelf)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ScanProcs(tt.root)
			if err == nil || !containsAll(err.Error(), tt.want, tt.root) {
				t.Errorf("error %v, want %q naming %s", err, tt.want, tt.root)
			}
		})
	}
}

// fakeProc is a writable proc tree with one process in another mount
// namespace, for the rescan policy.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	f := &fakeProc{t: t, root: t.TempDir()}
	fs := filepath.Join(f.root, "fs")
	f.write("self/ns/mnt", "collector")
	f.write("7/ns/mnt", "other")
	f.write("fs/lib/libcuda.so.1", "stand-in for libcuda.so.1")
	f.write("fs/lib/libcudart.so.13", "stand-in for libcudart.so.13")
	if err := os.Symlink(fs, filepath.Join(f.root, "7", "root")); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeProc) write(rel, data string) {
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// set gives process 7 a start time, a vsize and mapped libraries.
func (f *fakeProc) set(start, vsize int, libs ...string) {
	f.write("7/stat", fmt.Sprintf("7 (app) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d %d 0 0", start, vsize))
	maps := "5600000-5601000 r-xp 00000000 00:00 9 /bin/app\n"
	for i, l := range libs {
		maps += fmt.Sprintf("7f%02d0000-7f%02d1000 r-xp 00000000 00:00 %d /lib/%s\n", i, i, 10+i, l)
	}
	f.write("7/maps", maps)
}

// TestScannerRescanPolicy: a known process's maps are parsed again when
// its vsize changes, when RescanEvery scans passed, or when the pid is a
// new process (new start time); otherwise not.
func TestScannerRescanPolicy(t *testing.T) {
	f := newFakeProc(t)
	s := NewScanner(ScanOptions{ProcRoot: f.root, RescanEvery: 3})
	type step struct {
		name       string
		start      int
		vsize      int
		libs       []string
		wantParsed uint64 // maps parses so far
		wantLibs   []string
	}
	steps := []step{
		{"new process", 100, 1000, nil, 1, nil},
		{"unchanged: not parsed", 100, 1000, nil, 1, nil},
		{"maps changed, vsize same: not seen yet", 100, 1000, []string{"libcuda.so.1"}, 1, nil},
		{"third scan since the parse: parsed", 100, 1000, []string{"libcuda.so.1"}, 2, []string{"libcuda.so.1"}},
		{"dlopen grows vsize: parsed at once", 100, 2000, []string{"libcuda.so.1", "libcudart.so.13"}, 3, []string{"libcuda.so.1", "libcudart.so.13"}},
		{"unchanged again: cached result", 100, 2000, []string{"libcuda.so.1", "libcudart.so.13"}, 3, []string{"libcuda.so.1", "libcudart.so.13"}},
		{"pid reused by a new process, same vsize", 200, 2000, []string{"libcudart.so.13"}, 4, []string{"libcudart.so.13"}},
	}
	for i, st := range steps {
		f.set(st.start, st.vsize, st.libs...)
		libs, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range libs {
			got = append(got, filepath.Base(l.Path))
			if !slices.Equal(l.PIDs, []int{7}) {
				t.Errorf("step %d %s: %v: pids, want [7]", i, st.name, l)
			}
		}
		if !slices.Equal(got, st.wantLibs) {
			t.Errorf("step %d %s: libraries %v, want %v", i, st.name, got, st.wantLibs)
		}
		if p := s.Stats().MapsParsed; p != st.wantParsed {
			t.Errorf("step %d %s: %d maps parsed, want %d", i, st.name, p, st.wantParsed)
		}
	}
	// The process exits: its libraries are no longer reported.
	if err := os.RemoveAll(filepath.Join(f.root, "7")); err != nil {
		t.Fatal(err)
	}
	libs, err := s.Scan()
	if err != nil || len(libs) != 0 || s.Stats().Processes != 0 {
		t.Errorf("after exit: %v, %v, %d processes; want nothing", libs, err, s.Stats().Processes)
	}
}

// TestWatcherProcesses: after each scan, Options.Processes gets every
// process that maps a CUDA library, after its new libraries were reported
// to found; a reused pid comes with its new start time, and a process
// that exited is absent.
func TestWatcherProcesses(t *testing.T) {
	f := newFakeProc(t)
	f.set(100, 1000, "libcuda.so.1")
	type event struct {
		found string // a library reported
		procs []Process
	}
	events := make(chan event, 64)
	w, err := NewWatcher(Options{ProcRoot: f.root, Interval: 10 * time.Millisecond, RescanEvery: 1,
		Processes: func(ps []Process) { events <- event{procs: ps} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx, func(l Library) { events <- event{found: filepath.Base(l.Path)} })
	}()
	defer func() { cancel(); <-done }()
	next := func() event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(30 * time.Second):
			t.Fatal("no callback in 30 s")
		}
		return event{}
	}
	// summary is "pid/start:lib,lib" of the processes.
	summary := func(ps []Process) string {
		var out []string
		for _, p := range ps {
			var libs []string
			for _, l := range p.Libs {
				libs = append(libs, filepath.Base(l.Path))
			}
			out = append(out, fmt.Sprintf("%d/%d:%s", p.PID, p.Start, strings.Join(libs, ",")))
		}
		return strings.Join(out, " ")
	}
	if e := next(); e.found != "libcuda.so.1" {
		t.Fatalf("first callback %+v, want the library found", e)
	}
	if e := next(); e.found != "" || summary(e.procs) != "7/100:libcuda.so.1" {
		t.Fatalf("second callback %+v, want the processes: 7/100:libcuda.so.1", e)
	}
	// Wait for rounds that see each change (a round may have started
	// before it).
	waitFor := func(want string) {
		t.Helper()
		for {
			e := next()
			if e.found == "" && summary(e.procs) == want {
				return
			}
		}
	}
	f.set(200, 1000, "libcudart.so.13") // pid 7 reused
	waitFor("7/200:libcudart.so.13")
	// A second process, in the same container.
	f.write("9/ns/mnt", "other")
	if err := os.Symlink(filepath.Join(f.root, "fs"), filepath.Join(f.root, "9", "root")); err != nil {
		t.Fatal(err)
	}
	f.write("9/stat", "9 (other) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 300 1000 0 0")
	f.write("9/maps", "7f000000-7f001000 r-xp 00000000 00:00 1 /lib/libcuda.so.1\n")
	waitFor("7/200:libcudart.so.13 9/300:libcuda.so.1")
	if err := os.RemoveAll(filepath.Join(f.root, "7")); err != nil { // exited
		t.Fatal(err)
	}
	waitFor("9/300:libcuda.so.1")
	f.write("9/maps", "7f000000-7f001000 r-xp 00000000 00:00 1 /lib/libc.so.6\n") // unmapped
	waitFor("")
}
