package shim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/record"
)

// Kernel names as long as PyTorch's arrive whole, whichever way the
// application reaches its kernels (testdata/app_names.c).

// nameLens are the name lengths of the names scenarios (app_names.c's
// names_lens): a name that fills a 128-byte launch slot, one byte more,
// PyTorch-like lengths, the longest record (4096) and one over it.
var nameLens = []int{80, 81, 300, 1000, record.MaxKernelNameLen, 5000}

// longName is app_names.c's names_long: kernel i's mangled name of n
// bytes, at::native::k<i>_xxx…x().
func longName(i, n int) string {
	id := fmt.Sprintf("k%d_", i)
	for d := 1; d < 6; d++ {
		k := n - 15 - d
		if ks := strconv.Itoa(k); len(ks) == d && k >= len(id) {
			return "_ZN2at6native" + ks + id + strings.Repeat("x", k-len(id)) + "Ev"
		}
	}
	panic(n)
}

// arrived is what a name of n bytes arrives as when nothing cuts it: the
// shim keeps at most MaxKernelNameLen bytes (flagged).
func arrived(name string) (string, bool) {
	if len(name) > record.MaxKernelNameLen {
		return name[:record.MaxKernelNameLen], true
	}
	return name, false
}

// checkWhole checks that every kernel_name record of st came through the
// names ring with its name whole: only a name over MaxKernelNameLen is
// cut (to that, flagged).
func checkWhole(t *testing.T, st *stream) {
	t.Helper()
	if st.namesRing != len(st.nameRecs) {
		t.Errorf("%d of %d kernel_name records came through the names ring", st.namesRing, len(st.nameRecs))
	}
	for _, k := range st.nameRecs {
		over := strings.HasPrefix(k.Name, longName(5, 5000)[:100]) // the one name over the bound
		if k.Truncated != over || (over && len(k.Name) != record.MaxKernelNameLen) {
			t.Errorf("name of function %#x: %d bytes, truncated=%v", k.Function, len(k.Name), k.Truncated)
		}
	}
}

// longWants are the launches of each long kernel, times times, with grid.y
// gy, in the order launch_all makes them.
func longWants(gy uint32, times int) []want {
	var ws []want
	for i, n := range nameLens {
		name, _ := arrived(longName(i, n))
		for range times {
			ws = append(ws, want{name, [3]uint32{uint32(i) + 1, gy, 1}, [3]uint32{32, 1, 1}, 0, 0, record.APILaunchKernel})
		}
	}
	return ws
}

// TestLongNames: long names looked up by name (cuModuleGetFunction,
// cuLibraryGetKernel), through cuKernelGetFunction, launched as a CUkernel,
// named by the driver at a first launch, and in a graph, all arrive whole
// through the names ring, never cut to fit a launch slot (which leaves
// 80 bytes of name in a 128-byte slot).
func TestLongNames(t *testing.T) {
	b := binaries(t)
	ws := longWants(1, 2)
	quiet := want{longName(len(nameLens), 500), [3]uint32{7, 1, 1}, [3]uint32{32, 1, 1}, 0, 0, record.APILaunchKernel}
	ws = append(ws, quiet, quiet,
		want{longName(3, nameLens[3]), [3]uint32{9, 1, 1}, [3]uint32{32, 1, 1}, 0, 0, record.APIGraphLaunch})
	for _, mode := range []string{"cudart", "dlsym", "direct"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 128, 1024, agent.Options{})
			if _, errOut, err := run(t, b, preload(b, a.path), b.program(mode), mode, "longnames"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			checkLaunches(t, st, ss[0].peer.PID, ws)
			checkWhole(t, st)
			if len(st.nameRecs) != len(nameLens)+1 {
				t.Errorf("%d kernel_name records, want one per function: %d", len(st.nameRecs), len(nameLens)+1)
			}
		})
	}
}

// TestLongNamesNoNamesRing: a collector that offers no names ring (an
// older one) gets names cut to fit its launch slots, each flagged, never
// cut silently; the others whole.
func TestLongNamesNoNamesRing(t *testing.T) {
	b := binaries(t)
	a := startAgentNames(t, filepath.Join(t.TempDir(), "agent.sock"), 128, 1024, 0, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "longnames"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	room := 128 - 16 - record.KernelNameHeaderSize // 80 bytes
	for _, k := range st.nameRecs {
		var full string
		for i, n := range append(append([]int(nil), nameLens...), 500) {
			if s := longName(i, n); strings.HasPrefix(s, k.Name) {
				full = s
			}
		}
		switch {
		case full == "":
			t.Errorf("name %.40q… is no kernel's", k.Name)
		case len(full) <= room && (k.Name != full || k.Truncated):
			t.Errorf("a %d-byte name arrived as %d bytes, truncated=%v", len(full), len(k.Name), k.Truncated)
		case len(full) > room && (len(k.Name) != room || !k.Truncated):
			t.Errorf("a %d-byte name arrived as %d bytes, truncated=%v; want %d, truncated", len(full), len(k.Name), k.Truncated, room)
		}
	}
	if len(st.nameRecs) != len(nameLens)+1 {
		t.Errorf("%d kernel_name records, want %d", len(st.nameRecs), len(nameLens)+1)
	}
}

// TestLongNamesDevices: one process launching on two devices (one thread
// each): a CUkernel's function differs per device, and every handle's name
// arrives whole; records carry their device.
func TestLongNamesDevices(t *testing.T) {
	b := binaries(t)
	for _, mode := range []string{"cudart", "dlsym"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 128, 1024, agent.Options{})
			env := append(preload(b, a.path), "MOCK_DEVICE_COUNT=2")
			if _, errOut, err := run(t, b, env, b.app, mode, "multidev"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			checkWhole(t, st)
			if len(st.launches) != 2*3*len(nameLens) {
				t.Fatalf("%d launches, want %d", len(st.launches), 2*3*len(nameLens))
			}
			handles := map[string]map[uint64]bool{}
			for _, l := range st.launches {
				i := int(l.Grid[0]) - 1
				if i < 0 || i >= len(nameLens) || l.Device != l.Grid[1]-1 {
					t.Fatalf("launch %+v: grid.x is the kernel + 1, grid.y the device + 1", l)
				}
				want, _ := arrived(longName(i, nameLens[i]))
				if st.names[l.Function] != want {
					t.Errorf("launch of kernel %d on device %d: name of %d bytes, want %d", i, l.Device, len(st.names[l.Function]), len(want))
				}
				if handles[want] == nil {
					handles[want] = map[uint64]bool{}
				}
				handles[want][l.Function] = true
			}
			// cudart: odd kernels launch through cuKernelGetFunction, one
			// function per device, each named.
			for i, n := range nameLens {
				name, _ := arrived(longName(i, n))
				if want := 1 + btoi(mode == "cudart" && i%2 == 1); len(handles[name]) != want {
					t.Errorf("kernel %d launched through %d handles, want %d", i, len(handles[name]), want)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLongNamesFork: a fork child inherits the parent's announced handles;
// it announces them again, whole, in its own session, and the parent's
// session gets none of the child's records.
func TestLongNamesFork(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 128, 1024, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "forknames"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ss := a.waitGone(t, 2)
	if len(ss) != 2 {
		t.Fatalf("%d sessions, want 2", len(ss))
	}
	parent, child := ss[0], ss[1]
	pst, cst := parent.read(t), child.read(t)
	checkLaunches(t, pst, parent.peer.PID, append(longWants(1, 1), longWants(3, 1)...))
	checkLaunches(t, cst, child.peer.PID, longWants(2, 2))
	for _, st := range []*stream{pst, cst} {
		checkWhole(t, st)
	}
	for _, k := range append(pst.nameRecs, cst.nameRecs...) {
		if k.PID != uint32(parent.peer.PID) && k.PID != uint32(child.peer.PID) {
			t.Errorf("name record of pid %d", k.PID)
		}
	}
	for _, k := range pst.nameRecs {
		if k.PID != uint32(parent.peer.PID) {
			t.Errorf("the parent's session has a name record of pid %d", k.PID)
		}
	}
}

// TestLongNamesSpawn: workers started like torchrun's (a parent that never
// calls the driver forks and execs them), each on its own device, each its
// own session with whole names.
func TestLongNamesSpawn(t *testing.T) {
	b := binaries(t)
	for _, mode := range []string{"cudart", "direct"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 128, 1024, agent.Options{})
			env := append(preload(b, a.path), "MOCK_DEVICE_COUNT=2")
			out, errOut, err := run(t, b, env, b.program(mode), mode, "spawn", "2")
			if err != nil || !strings.Contains(out, "app: spawn workers=2 failed=0") {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			ss := a.waitGone(t, 2)
			if len(ss) != 2 {
				t.Fatalf("%d sessions, want 2 (one per worker, none for the parent)", len(ss))
			}
			devs := map[uint32]bool{}
			for _, s := range ss {
				st := s.read(t)
				if len(st.launches) == 0 {
					t.Fatalf("worker pid %d: no launches", s.peer.PID)
				}
				dev := st.launches[0].Device
				devs[dev] = true
				checkLaunches2(t, st, s.peer.PID, dev, longWants(dev+1, 2))
				checkWhole(t, st)
			}
			if len(devs) != 2 {
				t.Errorf("workers on devices %v, want 0 and 1", devs)
			}
		})
	}
}

// checkLaunches2 is checkLaunches for launches on device dev.
func checkLaunches2(t *testing.T, st *stream, pid int32, dev uint32, ws []want) {
	t.Helper()
	if len(st.launches) != len(ws) {
		t.Fatalf("%d launch records, want %d", len(st.launches), len(ws))
	}
	for i, l := range st.launches {
		w := ws[i]
		got := want{st.names[l.Function], l.Grid, l.Block, l.SharedMem, l.Stream, l.API}
		if got != w || l.PID != uint32(pid) || l.Device != dev {
			t.Errorf("launch %d: pid %d device %d %v; want pid %d device %d %v", i, l.PID, l.Device, got, pid, dev, w)
		}
	}
}

// manyNames runs `app cudart manynames n` against a, reading the rings
// after its first pass (the second starts when the test has read them),
// and returns what they carried.
func manyNames(t *testing.T, a *testAgent, n int) *stream {
	t.Helper()
	b := binaries(t)
	app := exec.Command(b.app, "cudart", "manynames", strconv.Itoa(n))
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=")
	app.Env = append(app.Env, preload(b, a.path)...)
	in, err := app.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	app.Stderr = &errb
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(outp)
	if line, err := r.ReadString('\n'); err != nil || line != "app: first pass done\n" {
		app.Process.Kill()
		t.Fatalf("app: %q %v\n%s", line, err, errb.String())
	}
	a.mu.Lock()
	s := a.sessions[0]
	a.mu.Unlock()
	st := &stream{names: map[uint64]string{}}
	read := func() {
		if s.names != nil {
			st.read(t, s.names, true)
		}
		st.read(t, s.ring, false)
	}
	read()
	io.WriteString(in, "go\n")
	in.Close()
	io.Copy(io.Discard, r)
	if err := app.Wait(); err != nil {
		t.Fatalf("app: %v\n%s", err, errb.String())
	}
	a.waitGone(t, 1)
	read()
	return st
}

// TestNamesRingFull: more new kernels than a ring holds between two reads
// of the collector. A name that found its ring full is written again
// before its handle's next launch, so no launch arrives unnamed (before,
// it was marked sent all the same: the kernel stayed unnamed for the rest
// of the session). With a names ring, a name that finds it full goes cut
// and flagged into the launch ring, and whole into the names ring once
// there is room.
func TestNamesRingFull(t *testing.T) {
	const n = 12
	names := func(st *stream) map[string]bool { // kernel names whole, by name
		whole := map[string]bool{}
		for _, k := range st.nameRecs {
			if !k.Truncated {
				whole[k.Name] = true
			}
		}
		return whole
	}
	t.Run("launch ring", func(t *testing.T) {
		// 16 slots, no names ring: after the Device record, the first
		// pass fills the ring after 7 kernels (a name and a launch each)
		// and the 8th's name; the rest are dropped.
		a := startAgentNames(t, filepath.Join(t.TempDir(), "agent.sock"), 512, 16, 0, agent.Options{})
		st := manyNames(t, a, n) // readRing's "came before its kernel-name record" checks every launch
		if whole := names(st); len(whole) != n {
			t.Errorf("%d of %d names arrived", len(whole), n)
		}
		if got := len(st.launches); got != n+7 {
			t.Errorf("%d launches arrived, want %d (7 of the first pass, all %d of the second)", got, n+7, n)
		}
	})
	t.Run("names ring", func(t *testing.T) {
		// An 8-slot names ring: 8 names whole, 4 cut into the launch ring
		// (flagged), then whole at their second launch.
		a := startAgentNames(t, filepath.Join(t.TempDir(), "agent.sock"), 128, 1024, 8, agent.Options{})
		st := manyNames(t, a, n)
		if whole := names(st); len(whole) != n {
			t.Errorf("%d of %d names arrived whole", len(whole), n)
		}
		cut := 0
		for _, k := range st.nameRecs {
			if k.Truncated {
				cut++
			}
		}
		if cut != 4 || len(st.nameRecs) != n+4 {
			t.Errorf("%d name records, %d of them cut; want %d, 4 cut", len(st.nameRecs), cut, n+4)
		}
		if len(st.launches) != 2*n {
			t.Errorf("%d launches, want %d", len(st.launches), 2*n)
		}
		if d := a.sessions[0].names.Stats().Dropped; d != 0 {
			t.Errorf("names ring counted %d drops; a full names ring is checked, not written", d)
		}
	})
}

// TestReconnectNames: after a collector restart, names go whole into the
// new session's names ring before the handle's next launch.
func TestReconnectNames(t *testing.T) {
	b := binaries(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	a1 := startAgentAt(t, path, 128, 1024, agent.Options{})
	app := exec.Command(b.app, "cudart", "slowlong", "60")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=")
	app.Env = append(app.Env, preload(b, path)...)
	a2, _ := restartAfterFirstLine(t, app, a1, path, 128, agent.Options{})
	name := longName(200, 300)
	for i, a := range []*testAgent{a1, a2} {
		ss := a.waitGone(t, 1)
		st := ss[0].read(t)
		checkWhole(t, st)
		if len(st.nameRecs) != 1 || st.nameRecs[0].Name != name {
			t.Errorf("session %d: name records %d, want 1 of the whole name", i+1, len(st.nameRecs))
		}
		if i == 1 && len(st.launches) < 10 {
			t.Errorf("the new collector got %d launches", len(st.launches))
		}
	}
}
