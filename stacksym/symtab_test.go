package stacksym

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// libc returns the path of the C library, a shared object with dynamic
// symbols on every glibc system.
func libc(t *testing.T) string {
	t.Helper()
	for _, pat := range []string{"/lib/*-linux-gnu/libc.so.6", "/usr/lib/*-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return m[0]
		}
	}
	t.Fatal("no libc.so.6 found")
	return ""
}

// fileOffsetOf returns the file offset of dynamic symbol name of ELF file
// path and the names of the functions at its address (aliases), read
// with debug/elf: the test's own oracle.
func fileOffsetOf(t *testing.T, path, name string) (uint64, map[string]bool) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		aliases := map[string]bool{}
		for _, a := range syms {
			if a.Value == s.Value && elf.ST_TYPE(a.Info) == elf.STT_FUNC {
				aliases[a.Name] = true
			}
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				return s.Value - p.Vaddr + p.Off, aliases
			}
		}
	}
	t.Fatalf("%s: no function %s", path, name)
	return 0, nil
}

// mapBase is where the fake processes map the library.
const mapBase = 0x7f0000000000

// fakeProcs writes processes pids under a proc root: each maps file lib
// whole at mapBase, and its root is the file system's.
func fakeProcs(t *testing.T, lib string, pids ...int) string {
	t.Helper()
	root := t.TempDir()
	fi, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	maps := fmt.Sprintf("%x-%x r-xp 00000000 00:00 0 %s\n", mapBase, mapBase+fi.Size(), lib)
	for _, pid := range pids {
		d := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "maps"), []byte(maps), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/", filepath.Join(d, "root")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestNativeShared: processes that map the same file share its symbol
// table. Four Resolvers (a collector's poll workers) over one Files
// resolve a return address of 16 processes to the function it is in,
// reading the table once.
func TestNativeShared(t *testing.T) {
	pids := make([]int, 16)
	for i := range pids {
		pids[i] = 100 + i
	}
	lib := libc(t)
	root := fakeProcs(t, lib, pids...)
	files := &Files{}
	rs := make([]*Resolver, 4)
	for i := range rs {
		rs[i] = &Resolver{Proc: root, Files: files}
	}
	off, want := fileOffsetOf(t, lib, "getpid")
	ret := mapBase + off + 1 // a return address inside it
	// Each Resolver on its own goroutine, as each poll worker has one.
	errs := make(chan error, len(rs))
	for w, r := range rs {
		go func() {
			for i := w; i < len(pids); i += len(rs) {
				for round := range 2 { // the second from the names kept
					fs := r.Native(uint32(pids[i]), []uint64{ret, 8}, nil)
					if !want[fs[0].Function] {
						errs <- fmt.Errorf("pid %d round %d: %#x resolved to %q in %q, want one of %v", pids[i], round, ret, fs[0].Function, fs[0].File, want)
						return
					}
					if fs[1].Function != "" || fs[1].File != "" {
						errs <- fmt.Errorf("pid %d: unmapped address 8 resolved to %+v", pids[i], fs[1])
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range rs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if files.Loads != 1 {
		t.Fatalf("%d symbol tables read for one file mapped by %d processes, want 1", files.Loads, len(pids))
	}
}

// TestFilesBudget: the kept tables stay within maxFiles and
// maxTableBytes, the least recently used going first; a table in use is
// reloaded after its eviction, not lost.
func TestFilesBudget(t *testing.T) {
	big := func(n int) *table {
		return &table{addr: make([]uint64, n), size: make([]uint32, n), name: make([]uint32, n)}
	}
	tests := []struct {
		name  string
		sizes []int // symbols of each table, added in order
		touch int   // the table looked up before the last is added
		gone  []int // the tables evicted
	}{
		{"under the budget", []int{10, 10, 10}, 0, nil},
		{"bytes: the least recently used goes", []int{maxTableBytes / symEntryBytes * 4 / 10, maxTableBytes / symEntryBytes * 3 / 10, maxTableBytes / symEntryBytes * 4 / 10}, 0, []int{1}},
		{"count: the oldest goes", make([]int, maxFiles+1), maxFiles - 1, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &Files{byKey: map[fileKey]*entry{}}
			keys := make([]fileKey, len(tt.sizes))
			for i, n := range tt.sizes {
				keys[i] = fileKey{ino: uint64(i + 1)}
				if i == len(tt.sizes)-1 {
					fs.get(keys[tt.touch])
				}
				e := &entry{t: big(n + 1)}
				fs.byKey[keys[i]] = e
				fs.clock++
				e.t.used = fs.clock
				fs.admit(keys[i], e)
			}
			if len(fs.byKey) > maxFiles || fs.bytes > maxTableBytes {
				t.Fatalf("%d tables of %d bytes kept, bounds %d and %d", len(fs.byKey), fs.bytes, maxFiles, maxTableBytes)
			}
			for i, k := range keys {
				_, kept := fs.get(k)
				if gone := contains(tt.gone, i); kept == gone {
					t.Errorf("table %d kept %v, want %v", i, kept, !gone)
				}
			}
		})
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
