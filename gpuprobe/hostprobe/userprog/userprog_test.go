package userprog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/gpuprobe/gpuprobe/jit"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// loadFile reads and parses the object at path, then loads it.
func loadFile(path string, o Options) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, err := jit.ParseObject(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Load(path, obj, o)
}

// requireRoot skips the test when it cannot load eBPF (CI runs as root).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: loading eBPF programs into Linux needs root (CI runs the tests as root)")
	}
}

// repoRoot finds the directory holding go.mod.
func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = up
	}
}

// targetArch is the __TARGET_ARCH_ define of host.h for this machine.
func targetArch(t testing.TB) string {
	switch runtime.GOARCH {
	case "amd64":
		return "-D__TARGET_ARCH_x86"
	case "arm64":
		return "-D__TARGET_ARCH_arm64"
	}
	t.Fatalf("testdata/host.h knows no pt_regs layout for %s", runtime.GOARCH)
	return ""
}

// buildBPF compiles an eBPF C source (testdata/<name>.c, or a path) with
// clang into a temp dir; a missing clang fails the test.
func buildBPF(t testing.TB, src string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build %s: %v", src, err)
	}
	if !strings.Contains(src, "/") {
		src = filepath.Join("testdata", src+".c")
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c")+".o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", targetArch(t),
		"-I", "testdata", "-I", filepath.Join(repoRoot(t), "jit", "include"), "-c", src, "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, b)
	}
	return out
}

// gcc runs gcc with args; a missing gcc fails the test.
func gcc(t testing.TB, args ...string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to build the probed test programs: %v", err)
	}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
}

// buildTarget builds testdata/target.c as dir/userprog_target (the name
// the test objects' sections use).
func buildTarget(t testing.TB) (dir, path string) {
	dir = t.TempDir()
	path = filepath.Join(dir, "userprog_target")
	gcc(t, "-O0", "-g", "-o", path, filepath.Join("testdata", "target.c"))
	return dir, path
}

// monoNow reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monoNow(t testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// run runs a program and returns its pid.
func run(t testing.TB, path string, args ...string) int {
	t.Helper()
	cmd := exec.Command(path, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return cmd.ProcessState.Pid()
}

func lookupU64(t testing.TB, m *ebpf.Map, key uint32) uint64 {
	t.Helper()
	var v uint64
	if err := m.Lookup(key, &v); err != nil {
		t.Fatalf("lookup %s[%d]: %v", m, key, err)
	}
	return v
}

// drain reads every record waiting in a kernel ring buffer, without
// blocking.
func drain(t testing.TB, m *ebpf.Map) [][]byte {
	t.Helper()
	r, err := ringbuf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetDeadline(time.Now())
	var out [][]byte
	for {
		rec, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, slices.Clone(rec.RawSample))
	}
}

func mapByName(ms []Map, name string) *ebpf.Map {
	for _, m := range ms {
		if m.Name == name {
			return m.Map
		}
	}
	return nil
}

// TestHostPrograms attaches a uprobe and a uretprobe to probed_add of a
// gcc-built program, runs it and checks counts, ring records and the
// array shared with the object's GPU program.
func TestHostPrograms(t *testing.T) {
	requireRoot(t)
	dir, target := buildTarget(t)
	set, err := loadFile(buildBPF(t, "hostprog"), Options{Resolve: SearchDirs(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	realTarget, err := filepath.EvalSymlinks(target)
	if err != nil {
		t.Fatal(err)
	}
	reps := set.Programs()
	wantProgs := []struct {
		name   string
		ret    bool
		symbol string
	}{{"on_enter", false, "probed_add"}, {"on_return", true, "probed_add"}}
	if len(reps) != len(wantProgs) {
		t.Fatalf("%d host programs, want %d: %+v", len(reps), len(wantProgs), reps)
	}
	for i, w := range wantProgs {
		r := reps[i]
		if r.Name != w.name || r.Return != w.ret || r.Binary != "userprog_target" || r.Symbol != w.symbol ||
			len(r.Errors) != 0 || !slices.Equal(r.Attached, []string{realTarget}) {
			t.Errorf("program %d: %+v, want %s return=%v attached to %s", i, r, w.name, w.ret, realTarget)
		}
	}

	var names []string
	for _, m := range set.Maps() {
		names = append(names, m.Name)
	}
	if want := "argstat,calls,events,shared,spans"; strings.Join(names, ",") != want {
		t.Errorf("exported maps %v, want %s (starts is a hash, seen_on_gpu a GPU map)", names, want)
	}
	sh := set.SharedMaps()
	if len(sh) != 1 || sh[0].Name != "shared" || sh[0].Size != uint64(os.Getpagesize()) {
		t.Fatalf("shared maps %+v, want shared of one page", sh)
	}
	if sh[0].Map.Flags()&unix.BPF_F_MMAPABLE == 0 {
		t.Fatalf("shared map flags %#x: not created mmapable", sh[0].Map.Flags())
	}
	if notes := set.Notes(); len(notes) != 1 || !strings.Contains(notes[0], `map "shared"`) || !strings.Contains(notes[0], "BPF_F_MMAPABLE") {
		t.Errorf("notes %q, want one about adding BPF_F_MMAPABLE to shared", notes)
	}

	const calls = 5
	t0 := monoNow(t)
	pid := run(t, target, "5")
	t1 := monoNow(t)

	ms := set.Maps()
	if n := lookupU64(t, mapByName(ms, "calls"), 0); n != calls {
		t.Errorf("calls[0] (entries) = %d, want %d", n, calls)
	}
	if n := lookupU64(t, mapByName(ms, "calls"), 1); n != calls {
		t.Errorf("calls[1] (returns) = %d, want %d", n, calls)
	}
	st := make([]byte, 16)
	if err := mapByName(ms, "argstat").Lookup(uint32(0), &st); err != nil {
		t.Fatal(err)
	}
	if sum, last := binary.LittleEndian.Uint64(st), int64(binary.LittleEndian.Uint64(st[8:])); sum != 0+1+2+3+4 || last != 1000+7*4 {
		t.Errorf("argstat = {sum_a %d, last_b %d}, want {10, 1028}", sum, last)
	}

	// The shared array through an mmap of its fd, as the application sees it.
	mem, err := unix.Mmap(sh[0].Map.FD(), 0, int(sh[0].Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap shared map: %v", err)
	}
	v := binary.LittleEndian.Uint64(mem)
	if err := unix.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	if v != 1000+4 {
		t.Errorf("shared[0] through mmap = %d, want 1004 (written by the uprobe at the last call)", v)
	}

	evs := drain(t, mapByName(ms, "events"))
	if len(evs) != calls {
		t.Fatalf("%d events, want %d", len(evs), calls)
	}
	for i, e := range evs {
		ts := binary.LittleEndian.Uint64(e)
		p, a, b := binary.LittleEndian.Uint32(e[8:]), int64(binary.LittleEndian.Uint64(e[16:])), int64(binary.LittleEndian.Uint64(e[24:]))
		if len(e) != 32 || ts < t0 || ts > t1 || int(p) != pid || a != int64(i) || b != int64(1000+7*i) {
			t.Errorf("event %d: %d bytes ts %d (window %d..%d) pid %d (want %d) a %d b %d", i, len(e), ts, t0, t1, p, pid, a, b)
		}
	}
	spans := drain(t, mapByName(ms, "spans"))
	if len(spans) != calls {
		t.Fatalf("%d spans, want %d", len(spans), calls)
	}
	for i, s := range spans {
		start, end := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		ret := int64(binary.LittleEndian.Uint64(s[24:]))
		if start < t0 || end < start || end > t1 || ret != int64(i+1000+7*i) {
			t.Errorf("span %d: %d..%d (window %d..%d) ret %d, want %d", i, start, end, t0, t1, ret, i+1000+7*i)
		}
	}
}

// TestPartialAttach: a missing binary and a missing symbol are reported,
// the other program still attaches; AttachFile adds a file later and
// skips a second name of a file already attached.
func TestPartialAttach(t *testing.T) {
	requireRoot(t)
	dir, target := buildTarget(t)
	set, err := loadFile(buildBPF(t, "partial"), Options{Resolve: SearchDirs(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	realTarget, _ := filepath.EvalSymlinks(target)
	tests := []struct {
		name     string
		attached []string
		errs     []string
	}{
		{"good", []string{realTarget}, nil},
		{"nobinary", nil, []string{`program "nobinary"`, `"/nonexistent/gpuprobe-userprog-test"`, "no such file"}},
		{"nosymbol", nil, []string{`program "nosymbol"`, `symbol "no_such_symbol" not found in ` + realTarget}},
	}
	reps := set.Programs()
	if len(reps) != len(tests) {
		t.Fatalf("%d programs: %+v", len(reps), reps)
	}
	for i, tc := range tests {
		r := reps[i]
		if r.Name != tc.name || !slices.Equal(r.Attached, tc.attached) {
			t.Errorf("%s: %+v, want attached %v", tc.name, r, tc.attached)
		}
		if tc.errs == nil && len(r.Errors) != 0 {
			t.Errorf("%s: errors %v", tc.name, r.Errors)
		}
		if tc.errs != nil {
			if len(r.Errors) != 1 {
				t.Fatalf("%s: errors %v, want one", tc.name, r.Errors)
			}
			for _, w := range tc.errs {
				if !strings.Contains(r.Errors[0].Error(), w) {
					t.Errorf("%s: error %q does not contain %q", tc.name, r.Errors[0], w)
				}
			}
		}
	}
	hits := mapByName(set.Maps(), "hits")
	run(t, target, "3")
	if n := lookupU64(t, hits, 0); n != 3 {
		t.Fatalf("hits = %d after 3 calls, want 3", n)
	}

	// A second name of the same file: nothing new (a second uprobe on one
	// inode would count every call twice).
	link := filepath.Join(t.TempDir(), "userprog_target")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if n, _ := set.AttachFile("userprog_target", link); n != 0 {
		t.Errorf("AttachFile(symlink) attached %d programs, want 0", n)
	}
	// A copy is another file: good attaches, nosymbol fails again.
	cp := filepath.Join(t.TempDir(), "userprog_target")
	b, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := set.AttachFile("userprog_target", cp)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "no_such_symbol") {
		t.Errorf("AttachFile(copy) = %d, %v; want 1 and the missing symbol", n, err)
	}
	run(t, cp, "2")
	run(t, target, "1")
	if n := lookupU64(t, hits, 0); n != 3+2+1 {
		t.Fatalf("hits = %d, want 6", n)
	}
}

// buildLauncher builds the stand-in libcudart.so.13 (testdata/cudart_standin.c)
// into its own directory and testdata/launcher.c linked to it.
func buildLauncher(t *testing.T) (libDir, lib, launcher string) {
	t.Helper()
	libDir = t.TempDir()
	lib = filepath.Join(libDir, "libcudart.so.13")
	gcc(t, "-O0", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", lib, filepath.Join("testdata", "cudart_standin.c"))
	launcher = filepath.Join(t.TempDir(), "launcher")
	gcc(t, "-O0", "-o", launcher, filepath.Join("testdata", "launcher.c"), lib, "-Wl,-rpath,"+libDir)
	return libDir, lib, launcher
}

// TestLaunchLate attaches launchlate's uprobe to cudaLaunchKernel of a
// stand-in libcudart.so.13 (see testdata/cudart_standin.c) and checks the
// launch time it writes into the shared launch_clock.
func TestLaunchLate(t *testing.T) {
	requireRoot(t)
	libDir, lib, launcher := buildLauncher(t)

	obj := buildBPF(t, filepath.Join(repoRoot(t), "testdata", "bpf", "launchlate.c"))
	set, err := loadFile(obj, Options{Resolve: SearchDirs(libDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	reps := set.Programs()
	if len(reps) != 1 || reps[0].Name != "launch_host" || reps[0].Binary != "libcudart.so" ||
		!slices.Equal(reps[0].Attached, []string{lib}) || len(reps[0].Errors) != 0 {
		t.Fatalf("programs %+v, want launch_host attached to %s", reps, lib)
	}
	sh := set.SharedMaps()
	if len(sh) != 1 || sh[0].Name != "launch_clock" || len(set.Notes()) != 0 {
		t.Fatalf("shared %+v notes %q: want launch_clock, already mmapable in the object", sh, set.Notes())
	}
	t0 := monoNow(t)
	run(t, launcher)
	t1 := monoNow(t)
	got := lookupU64(t, sh[0].Map, 0)
	if got < t0 || got > t1 {
		t.Fatalf("launch_clock[0] = %d, want CLOCK_MONOTONIC within %d..%d", got, t0, t1)
	}
	if off := lookupU64(t, sh[0].Map, 1); off != 0 {
		t.Errorf("launch_clock[1] = %d: the uprobe must not touch the offset slot", off)
	}
}

// TestKernelSharedArray: bpftime's kernel-shared array (1504) of
// kernelshared.c is created in Linux as an mmapable BPF_MAP_TYPE_ARRAY,
// shared with the GPU half and exported as an array; its uretprobe counts
// the launcher's one launch.
func TestKernelSharedArray(t *testing.T) {
	requireRoot(t)
	libDir, _, launcher := buildLauncher(t)

	obj := buildBPF(t, filepath.Join(repoRoot(t), "testdata", "bpf", "kernelshared.c"))
	set, err := loadFile(obj, Options{Resolve: SearchDirs(libDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	sh := set.SharedMaps()
	if len(sh) != 1 || sh[0].Name != "ks_count" {
		t.Fatalf("shared %+v, want ks_count", sh)
	}
	if ty, fl := sh[0].Map.Type(), sh[0].Map.Flags(); ty != ebpf.Array || fl&unix.BPF_F_MMAPABLE == 0 {
		t.Fatalf("ks_count created as type %v flags %#x, want an mmapable array", ty, fl)
	}
	exported := set.Maps()
	if len(exported) != 1 || exported[0].Spec.Type != ebpf.Array {
		t.Fatalf("exported %+v, want ks_count as an array", exported)
	}
	run(t, launcher)
	if n := lookupU64(t, sh[0].Map, 1); n != 1 {
		t.Errorf("ks_count[1] = %d launches, want 1", n)
	}
	if n := lookupU64(t, sh[0].Map, 0); n != 0 {
		t.Errorf("ks_count[0] = %d: only the GPU half writes it", n)
	}
}

// TestLoadErrors: objects and options Load must reject, with errors that
// name the program, the map and what is wrong.
func TestLoadErrors(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name string
		src  string // testdata object; "" for a missing file
		o    Options
		want []string
	}{
		{"GPU-only map in a host program", "gpumap", Options{},
			[]string{`program "host_uses_gpu_map"`, `map "gpu_counts"`, "type 1503", "GPU-only"}},
		{"ring buffer without record type", "untypedring", Options{},
			[]string{`program "emit"`, `ring buffer "raw" declares no record type`}},
		{"rejected by the kernel's verifier", "unchecked", Options{},
			[]string{`program "no_null_check"`, `section "uprobe/userprog_target:probed_add"`, "verifier", "invalid mem access"}},
		{"unknown program in attach", "hostprog", Options{Attach: []string{"on_enter", "nope"}},
			[]string{`attach[1]: no program "nope"`, "on_enter, on_return"}},
		{"only GPU programs selected", "hostprog", Options{Attach: []string{"on_gpu"}},
			[]string{"no host program"}},
		{"missing object", "", Options{}, []string{"no such file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "none.o")
			if tc.src != "" {
				path = buildBPF(t, tc.src)
			}
			set, err := loadFile(path, tc.o)
			if err == nil {
				set.Close()
				t.Fatal("Load succeeded")
			}
			if errors.Is(err, ErrNoHostPrograms) != (tc.name == "only GPU programs selected") {
				t.Errorf("errors.Is(err, ErrNoHostPrograms) = %v", errors.Is(err, ErrNoHostPrograms))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestAttachFilter loads only the programs attach names, each once.
func TestAttachFilter(t *testing.T) {
	requireRoot(t)
	dir, _ := buildTarget(t)
	set, err := loadFile(buildBPF(t, "hostprog"), Options{Attach: []string{"on_return", "on_return"}, Resolve: SearchDirs(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	reps := set.Programs()
	if len(reps) != 1 || reps[0].Name != "on_return" || !reps[0].Return {
		t.Fatalf("programs %+v, want on_return only, once (listed twice)", reps)
	}
	if sh := set.SharedMaps(); len(sh) != 0 {
		t.Errorf("shared maps %+v: on_gpu is not selected and on_return does not use shared", sh)
	}
}

func TestResolvers(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"libfoo.so.1", "libfoo.so.2", "libbar.so"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		resolve Resolver
		binary  string
		want    []string // files (basenames for ldconfig results)
		err     string
	}{
		{"absolute path", DefaultResolve, filepath.Join(dir, "libbar.so"), []string{filepath.Join(dir, "libbar.so")}, ""},
		{"absolute path missing", DefaultResolve, "/nonexistent/libx.so", nil, `binary "/nonexistent/libx.so"`},
		{"library through ldconfig", DefaultResolve, "libc.so", []string{"libc.so.6"}, ""},
		{"unknown library", DefaultResolve, "libgpuprobe-no-such-lib.so", nil, "no library of that name in ldconfig's cache"},
		{"search dirs by prefix", SearchDirs("/nonexistent", dir), "libfoo.so", []string{filepath.Join(dir, "libfoo.so.1"), filepath.Join(dir, "libfoo.so.2")}, ""},
		{"search dirs falls back to ldconfig", SearchDirs(dir), "libc.so", []string{"libc.so.6"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.resolve(tc.binary)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tc.want[0], "/") {
				if !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
				return
			}
			var bases []string
			for _, g := range got {
				bases = append(bases, filepath.Base(g))
			}
			if !slices.Contains(bases, tc.want[0]) {
				t.Fatalf("got %v, want a file named %s", got, tc.want[0])
			}
		})
	}
}

func TestParseLdconfig(t *testing.T) {
	out := "3 libs found in cache `/etc/ld.so.cache'\n" +
		"\tlibcudart.so.12 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudart.so.12\n" +
		"\tlibcuda.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libcuda.so.1\n" +
		"\tlibc.so.6 (libc6) => /lib32/libc.so.6\n" +
		"garbage line\n"
	got := parseLdconfig([]byte(out))
	want := []ldconfigEntry{
		{"libcudart.so.12", "x86-64", "/usr/lib/x86_64-linux-gnu/libcudart.so.12"},
		{"libcuda.so.1", "AArch64", "/usr/lib/aarch64-linux-gnu/libcuda.so.1"},
		{"libc.so.6", "", "/lib32/libc.so.6"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// BenchmarkProbedCall runs target.c's loop of 100000 probed_add calls
// without programs, with the uprobe of partial.c (an array add), and with
// hostprog.c's uprobe + uretprobe (maps, a hash and two ring records per
// call); ns/call includes the loop itself, so the cost of the probes is
// the difference to "bare". Ring records are drained between runs.
func BenchmarkProbedCall(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipped: loading eBPF programs needs root")
	}
	const calls = 100000
	dir, target := buildTarget(b)
	for _, bc := range []struct {
		name, obj string
		attach    []string
	}{
		{"bare", "", nil},
		{"uprobe_array", "partial", []string{"good"}},
		{"uprobe_uretprobe_rings", "hostprog", []string{"on_enter", "on_return"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var set *Set
			if bc.obj != "" {
				var err error
				if set, err = loadFile(buildBPF(b, bc.obj), Options{Attach: bc.attach, Resolve: SearchDirs(dir)}); err != nil {
					b.Fatal(err)
				}
				defer set.Close()
			}
			b.ResetTimer()
			for range b.N {
				cmd := exec.Command(target, "100000")
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				if set != nil {
					b.StopTimer()
					for _, m := range set.Maps() {
						if m.Spec.Type == ebpf.RingBuf {
							drain(b, m.Map)
						}
					}
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/calls, "ns/call")
		})
	}
}

// TestTargetlessHostProgram loads an object whose host program is a bare
// SEC("uprobe") (libbpf's manual-attach form): the object loads, and the
// program is reported skipped with the reason, not loaded into Linux.
func TestTargetlessHostProgram(t *testing.T) {
	obj := buildBPF(t, filepath.Join(repoRoot(t), "testdata", "bpf", "idioms.c"))
	for _, attach := range [][]string{nil, {"host_manual"}, {"cuda__exit", "host_manual"}} {
		set, err := loadFile(obj, Options{Attach: attach})
		if err != nil {
			t.Fatalf("attach %v: %v", attach, err)
		}
		ps := set.Programs()
		if len(ps) != 1 || ps[0].Name != "host_manual" || !ps[0].Skipped || len(ps[0].Attached) != 0 ||
			len(ps[0].Errors) != 1 || !strings.Contains(ps[0].Errors[0].Error(), `program "host_manual" (section "uprobe") cannot attach`) {
			t.Errorf("attach %v: programs %+v", attach, ps)
		}
		if len(set.Maps()) != 0 {
			t.Errorf("attach %v: maps %v for a skipped program", attach, set.Maps())
		}
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := loadFile(obj, Options{Attach: []string{"cuda__exit"}}); !errors.Is(err, ErrNoHostPrograms) {
		t.Errorf("GPU program only: %v, want ErrNoHostPrograms", err)
	}
}
