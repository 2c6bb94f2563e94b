package discover

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// copyFile copies src to dst (a new inode) through a rename, as package
// managers replace libraries.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// runWatcher runs w until the test ends and returns its findings; done is
// closed when Run returned, with Run's error in *runErr.
func runWatcher(t *testing.T, w *Watcher) (found <-chan Library, cancel context.CancelFunc, done <-chan struct{}, runErr *error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan Library, 64)
	d := make(chan struct{})
	runErr = new(error)
	go func() {
		defer close(d)
		*runErr = w.Run(ctx, func(l Library) {
			select {
			case ch <- l:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-d
	})
	return ch, cancel, d, runErr
}

// next waits for the next finding; the deadline only guards against a
// hang.
func next(t *testing.T, found <-chan Library, what string) Library {
	t.Helper()
	select {
	case l := <-found:
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("no library found in 30 s, waiting for %s", what)
	}
	return Library{}
}

// waitRounds waits until the watcher completed n more rounds.
func waitRounds(t *testing.T, w *Watcher, n uint64) {
	t.Helper()
	target := w.Stats().Rounds + n
	deadline := time.Now().Add(30 * time.Second)
	for w.Stats().Rounds < target {
		if time.Now().After(deadline) {
			t.Fatalf("watcher stuck at %d rounds, waiting for %d", w.Stats().Rounds, target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatcher: configured libraries are reported at once; an application
// started after the watcher, a static runtime and a late dlopen are found;
// every file is reported once; a replaced file (new inode) again.
func TestWatcher(t *testing.T) {
	b := artifacts(t)
	cfgDir := filepath.Join(t.TempDir(), "lib")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgDrv, cfgRT := filepath.Join(cfgDir, "libcuda.so.1"), filepath.Join(cfgDir, "libcudart.so.13")
	copyFile(t, b.driver, cfgDrv)
	copyFile(t, b.runtime, cfgRT)
	w, err := NewWatcher(Options{Interval: 10 * time.Millisecond, Paths: []string{cfgDir}})
	if err != nil {
		t.Fatal(err)
	}
	found, cancel, done, runErr := runWatcher(t, w)
	seen := map[Key]Library{}
	expect := func(what string, want Key, kind Kind, pid int) Library {
		t.Helper()
		for {
			l := next(t, found, what)
			if old, dup := seen[l.Key()]; dup {
				t.Fatalf("reported twice: %v and %v", old, l)
			}
			seen[l.Key()] = l
			if l.Key() != want {
				continue // a CUDA library of another process on this machine
			}
			if l.Kind != kind || (pid != 0 && !containsInt(l.PIDs, pid)) {
				t.Fatalf("%s: got %v, want %s in pid %d", what, l, kind, pid)
			}
			return l
		}
	}
	// The two configured libraries, in the first round.
	for range 2 {
		l := next(t, found, "configured libraries")
		seen[l.Key()] = l
		if !strings.HasPrefix(l.Source, "config host_probes::library_paths[0]") {
			t.Fatalf("first finding %v, want the configured libraries", l)
		}
	}
	if _, ok := seen[mustID(t, cfgDrv)]; !ok {
		t.Fatalf("configured driver missing: %v", seen)
	}

	// Started after the watcher: a static runtime application.
	app := start(t, nil, b.staticApp)
	expect("static runtime app", mustID(t, b.staticApp), KindStaticRuntime, app.pid())

	// An application that dlopens a runtime (another file) after a scan saw it.
	h := start(t, nil, b.holder)
	waitRounds(t, w, 2)
	h.dlopen(b.runtime)
	expect("late dlopen", mustID(t, b.runtime), KindRuntime, h.pid())

	// The configured runtime mapped by a process: same file, not again.
	h.dlopen(cfgRT)
	waitRounds(t, w, 3)

	// A new version of the configured runtime: new inode, reported again.
	copyFile(t, b.runtime, cfgRT)
	l := expect("replaced runtime", mustID(t, cfgRT), KindRuntime, 0)
	if l.Path != cfgRT {
		t.Errorf("replaced runtime path %s, want %s", l.Path, cfgRT)
	}
	waitRounds(t, w, 3)
	for {
		select {
		case l := <-found:
			if _, dup := seen[l.Key()]; dup {
				t.Fatalf("reported twice: %v", l)
			}
			seen[l.Key()] = l
			continue
		default:
		}
		break
	}
	st := w.Stats()
	if st.Libraries != len(seen) || st.Rounds < 8 || st.Scans != st.Rounds || st.Processes == 0 || st.LastDuration <= 0 {
		t.Errorf("stats %+v, want %d libraries, scans = rounds ≥ 8, processes seen", st, len(seen))
	}
	cancel()
	select {
	case <-done:
		if *runErr != nil {
			t.Errorf("Run after cancel: %v", *runErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestWatcherCancelDuringStuckSource: Run returns on cancel while a
// source (here an ldconfig whose output a child holds open) has not
// finished.
func TestWatcherCancelDuringStuckSource(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "sleep.pid")
	script := filepath.Join(dir, "ldconfig")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 1000 &\necho $! > "+pidFile+".tmp\nmv "+pidFile+".tmp "+pidFile+"\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	savedC, savedD := ldconfigCandidates, ldconfigWaitDelay
	ldconfigCandidates = []string{script, "ldconfig"}
	ldconfigWaitDelay = time.Hour // the round cannot end while sleep lives
	t.Cleanup(func() { ldconfigCandidates, ldconfigWaitDelay = savedC, savedD })

	w, err := NewWatcher(Options{Ldconfig: true, NoProcs: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(Library) {}) }()
	var sleepPID int
	deadline := time.Now().Add(30 * time.Second)
	for sleepPID == 0 {
		if data, err := os.ReadFile(pidFile); err == nil {
			sleepPID, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the ldconfig stand-in did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(sleepPID, syscall.SIGKILL) })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel while a source was stuck")
	}
	if r := w.Stats().Rounds; r != 0 {
		t.Errorf("%d rounds completed: the source was not stuck, the test proves nothing", r)
	}
}

func TestNewWatcherErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"negative interval", Options{Interval: -time.Second}, "interval must not be negative, got -1s"},
		{"missing proc", Options{ProcRoot: "/nonexistent-proc"}, "proc file system: stat /nonexistent-proc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewWatcher(tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	w, err := NewWatcher(Options{ProcRoot: "/nonexistent-proc", NoProcs: true})
	if err != nil || w.opts.Interval != DefaultInterval {
		t.Errorf("NoProcs watcher: %v, interval %v; want no error and the default interval", err, w.opts.Interval)
	}
}
