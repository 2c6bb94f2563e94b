package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// TestIdleMapsOncePerProcess: the idle checks of 16 sessions of one
// process read its maps once (within mapsTTL), each answered for its
// own regions; a session registered no more is not looked for.
func TestIdleMapsOncePerProcess(t *testing.T) {
	p := &peerProc{pid: int32(os.Getpid()), pidfd: -1}
	p.start, _ = p.startTime()
	m := newIdleMaps()
	var ids [][]fileID
	for i := range 16 {
		fd, err := unix.MemfdCreate("gpuprobe-idle-test", unix.MFD_CLOEXEC)
		if err != nil {
			t.Skipf("memfd_create: %v", err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, 4096); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // the odd sessions' regions are not mapped
			mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(mem)
		}
		ids = append(ids, []fileID{{dev: st.Dev, ino: st.Ino}})
		m.add(p, ids[i])
	}
	now := time.Now()
	var first time.Time
	for i, id := range ids {
		found, cut, err := m.mapped(p, id, now)
		if err != nil || cut || found != (i%2 == 0) {
			t.Errorf("session %d: mapped %v, cut %v, %v; want %v", i, found, cut, err, i%2 == 0)
		}
		at := m.procs[procKey{p.pid, p.start}].at
		if i == 0 {
			first = at
		} else if !at.Equal(first) {
			t.Fatalf("session %d's check read the maps again", i)
		}
	}
	for _, id := range ids {
		m.remove(p, id)
	}
	if len(m.procs) != 0 {
		t.Errorf("%d processes left after every session ended", len(m.procs))
	}
}

// TestScanMapsCut: a maps file past the bound is read up to it, finding
// what comes before and saying it was cut.
func TestScanMapsCut(t *testing.T) {
	early, late := fileID{dev: unix.Mkdev(0, 1), ino: 11}, fileID{dev: unix.Mkdev(0, 1), ino: 5678}
	other := []byte("7f1c2a000000-7f1c2a001000 r--p 00000000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libfoo.so\n")
	region := []byte("7f1c2b000000-7f1c2b400000 rw-s 00000000 00:01 5678                       /memfd:gpuprobe-ring (deleted)\n")
	first := []byte("7f1c2b000000-7f1c2b400000 rw-s 00000000 00:01 11                         /memfd:gpuprobe-ring (deleted)\n")
	r := &linesReader{line: other, tail: region, n: (64 << 20) / len(other)}
	want := map[fileID]bool{early: false, late: false}
	sc, err := scanMaps(io.MultiReader(bytes.NewReader(first), r), want)
	if err != nil || !sc.Truncated || !want[early] || want[late] {
		t.Errorf("scan: %+v, %v, found %v; want cut at %d with only the early region", sc, err, want, procread.MaxMapsBytes)
	}
	if r.read > procread.MaxMapsBytes+procread.MaxMapsLine+1 {
		t.Errorf("read %d bytes, bound %d", r.read, procread.MaxMapsBytes)
	}
}

// TestIdleSessionsHugeMaps: 16 idle sessions of a process whose maps
// lists 150 MiB of mappings of a 3,800-byte path before their regions:
// the idle checks read it at most once a second for all of them, each
// read cut at procread.MaxMapsBytes, and end them all as unverifiable
// (Stats.MapsTruncated), instead of keeping them for good.
func TestIdleSessionsHugeMaps(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: maps 40,000 pages to make a 150 MiB /proc/self/maps")
	}
	o := newOwner(t)
	s := listen(t, o, Options{IdleTimeout: 300 * time.Millisecond, FrameTimeout: 100 * time.Millisecond})
	const sessions = 16
	for range sessions {
		sess, err := Dial(s.Path(), agentwire.Hello{Name: "huge-maps"})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
	}
	// Mapped after the sessions' regions: lower addresses, listed first.
	dir := t.TempDir()
	for range 15 {
		dir = filepath.Join(dir, strings.Repeat("d", 250))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("a 3,800-byte path: %v", err)
	}
	f, err := os.Create(filepath.Join(dir, "page"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	for range 40000 {
		mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatalf("mmap: %v", err)
		}
		defer unix.Munmap(mem)
	}
	deadline := time.Now().Add(20 * time.Second)
	for st := s.Stats(); st.Reclaimed < sessions; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: want %d idle sessions ended", st, sessions)
		}
		<-time.After(50 * time.Millisecond)
	}
	if st := s.Stats(); st.MapsTruncated != sessions {
		t.Errorf("stats %+v: want all %d counted as cut", st, sessions)
	}
}
