package shim

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
)

const (
	vecAdd = "_Z6vecAddPfS_S_i"
	gemm   = "_Z4gemmPKfS0_Pfi"
)

// want is one expected launch record.
type want struct {
	name        string
	grid, block [3]uint32
	shmem       uint32
	stream      uint64
	api         record.LaunchAPI
}

// basicLaunches is what `app MODE basic 5` launches (see testdata/app.c).
func basicLaunches() []want {
	var w []want
	for range 5 {
		w = append(w, want{vecAdd, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, record.APILaunchKernel})
	}
	return append(w,
		// cuLaunchKernel_ptsz with stream 0: the per-thread stream (0x2).
		want{gemm, [3]uint32{8, 8, 1}, [3]uint32{16, 16, 1}, 2048, 2, record.APILaunchKernel},
		want{vecAdd, [3]uint32{2, 3, 4}, [3]uint32{32, 2, 1}, 0, 0x1234, record.APILaunchKernelEx},
		want{gemm, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0x77, record.APILaunchCooperativeKernel})
}

// String prints w with a long name shortened (the test names reach 4 KiB).
func (w want) String() string {
	name := w.name
	if len(name) > 48 {
		name = fmt.Sprintf("%s…(%d bytes)", name[:40], len(name))
	}
	return fmt.Sprintf("{%s grid %v block %v shmem %d stream %#x api %v}", name, w.grid, w.block, w.shmem, w.stream, w.api)
}

func checkLaunches(t *testing.T, st *stream, pid int32, ws []want) {
	t.Helper()
	if len(st.launches) != len(ws) {
		t.Fatalf("%d launch records, want %d", len(st.launches), len(ws))
	}
	ids := map[uint64]bool{}
	for i, l := range st.launches {
		w := ws[i]
		got := want{st.names[l.Function], l.Grid, l.Block, l.SharedMem, l.Stream, l.API}
		if got != w {
			t.Errorf("launch %d: got %v, want %v", i, got, w)
		}
		if l.PID != uint32(pid) || l.TID == 0 || l.Result != 0 || l.Device != 0 {
			t.Errorf("launch %d: pid %d tid %d result %d device %d, want pid %d, a tid, result 0, device 0",
				i, l.PID, l.TID, l.Result, l.Device, pid)
		}
		if l.LaunchID == 0 || ids[l.LaunchID] {
			t.Errorf("launch %d: launch id %d is zero or repeated", i, l.LaunchID)
		}
		ids[l.LaunchID] = true
		if l.EnqueueNS == 0 || l.ReturnNS < l.EnqueueNS {
			t.Errorf("launch %d: enqueue %d, return %d", i, l.EnqueueNS, l.ReturnNS)
		}
	}
}

// TestLaunchRecords runs the basic workload through each way of reaching
// the driver and checks every record that arrives.
func TestLaunchRecords(t *testing.T) {
	b := binaries(t)
	for _, mode := range []string{"cudart", "dlsym", "direct"} {
		t.Run(mode, func(t *testing.T) {
			plain, _, err := run(t, b, nil, b.program(mode), mode, "basic", "5")
			if err != nil {
				t.Fatalf("uninstrumented run: %v", err)
			}
			a := startAgent(t, 256, 1024, agent.Options{})
			out, errOut, err := run(t, b, preload(b, a.path), b.program(mode), mode, "basic", "5")
			if err != nil {
				t.Fatalf("run under the shim: %v\n%s", err, errOut)
			}
			if out != plain {
				t.Errorf("output differs under the shim:\n%s\nwithout:\n%s", out, plain)
			}
			ss := a.waitGone(t, 1)
			if len(ss) != 1 {
				t.Fatalf("%d sessions, want 1", len(ss))
			}
			st := ss[0].read(t)
			checkLaunches(t, st, ss[0].peer.PID, basicLaunches())
			// Nothing is patched in this session: no launch runs a probe.
			for i, l := range st.launches {
				if l.Flags&record.LaunchUnprobed == 0 {
					t.Errorf("launch record %d (id %d) not marked unprobed, though nothing is patched", i, l.LaunchID)
				}
			}
			if len(st.nameRecs) != 2 {
				t.Errorf("%d kernel-name records (%v), want one per function handle: 2", len(st.nameRecs), sortedNames(st.names))
			}
			if len(st.syncs) != 1 || st.syncs[0].Kind != record.SyncStream || st.syncs[0].Stream != 0 {
				t.Errorf("sync records %+v, want one stream sync of stream 0 (the CUDA 13 cuCtxSynchronize ABI must pass unwrapped)", st.syncs)
			}
			if len(st.memcpys) != 1 || st.memcpys[0].Bytes != 4096 || st.memcpys[0].Kind != record.MemcpyHostToDevice {
				t.Errorf("memcpy records %+v, want one 4096-byte HtoD copy", st.memcpys)
			}
		})
	}
}

func TestGraphLaunch(t *testing.T) {
	b := binaries(t)
	node1 := want{vecAdd, [3]uint32{5, 1, 1}, [3]uint32{128, 1, 1}, 0, 0x99, record.APIGraphLaunch}
	node2 := want{gemm, [3]uint32{3, 3, 1}, [3]uint32{8, 8, 1}, 512, 0x99, record.APIGraphLaunch}
	for _, mode := range []string{"cudart", "dlsym", "direct"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			if _, errOut, err := run(t, b, preload(b, a.path), b.program(mode), mode, "graph"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			checkLaunches(t, st, ss[0].peer.PID, []want{node1, node2, node1, node2})
		})
	}
}

// TestCaptureLaunch: launches captured into a graph write no launch
// record (they do not run); the graph's launches record its nodes, and
// launches outside the capture, during and after it, are recorded.
func TestCaptureLaunch(t *testing.T) {
	b := binaries(t)
	ws := []want{
		{vecAdd, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0, 0x55, record.APILaunchKernel},
		{vecAdd, [3]uint32{2, 1, 1}, [3]uint32{32, 1, 1}, 0, 0x55, record.APILaunchKernel},
	}
	for range 2 {
		ws = append(ws, want{vecAdd, [3]uint32{6, 1, 1}, [3]uint32{64, 1, 1}, 0, 0x77, record.APIGraphLaunch},
			want{gemm, [3]uint32{3, 3, 1}, [3]uint32{8, 8, 1}, 512, 0x77, record.APIGraphLaunch})
	}
	ws = append(ws, want{vecAdd, [3]uint32{7, 1, 1}, [3]uint32{16, 1, 1}, 0, 0x66, record.APILaunchKernel})
	for _, mode := range []string{"cudart", "dlsym", "direct"} {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			env := append(preload(b, a.path), "GPUPROBE_TRACE=1")
			if _, errOut, err := run(t, b, env, b.program(mode), mode, "capture"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			} else if !strings.Contains(errOut, "captured=2 ") {
				t.Errorf("the trace summary does not count 2 captured launches:\n%s", errOut)
			}
			ss := a.waitGone(t, 1)
			checkLaunches(t, ss[0].read(t), ss[0].peer.PID, ws)
		})
	}
}

// TestUnnamedFunction: a handle the shim never saw created is named through
// cuFuncGetName at its first launch, once.
func TestUnnamedFunction(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "dlsym", "unnamed"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ss := a.waitGone(t, 1)
	st := ss[0].read(t)
	w := want{"_Z9hiddenKernv", [3]uint32{7, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, record.APILaunchKernel}
	checkLaunches(t, st, ss[0].peer.PID, []want{w, w})
	if len(st.nameRecs) != 1 {
		t.Errorf("%d kernel-name records, want 1", len(st.nameRecs))
	}
}

// TestRenamedHandle: a function handle the driver reuses for another kernel
// is announced again with its new name before its next launch.
func TestRenamedHandle(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "dlsym", "rename"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ss := a.waitGone(t, 1)
	st := ss[0].read(t)
	if len(st.launches) != 4 {
		t.Fatalf("%d launches, want 4", len(st.launches))
	}
	f := st.launches[0].Function
	var names []string
	for _, k := range st.nameRecs {
		if k.Function == f {
			names = append(names, k.Name)
		}
	}
	if want := []string{vecAdd, "_Z7renamedv"}; !slices.Equal(names, want) {
		t.Fatalf("name records of handle %#x: %q, want %q", f, names, want)
	}
	for i, l := range st.launches {
		if l.Function != f {
			t.Errorf("launch %d of function %#x, want %#x", i, l.Function, f)
		}
	}
}

// TestFork: the child handshakes again and writes its own stream, with its
// own pid and its own kernel-name records.
func TestFork(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "fork"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ss := a.waitGone(t, 2)
	if len(ss) != 2 {
		t.Fatalf("%d sessions, want 2 (parent, child)", len(ss))
	}
	byPID := map[int32]*stream{}
	for _, s := range ss {
		byPID[s.peer.PID] = s.read(t)
	}
	parent, child := ss[0], ss[1]
	if parent.peer.PID == child.peer.PID {
		t.Fatalf("both sessions from pid %d", parent.peer.PID)
	}
	v := want{vecAdd, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, 0, record.APILaunchKernel}
	g := want{gemm, [3]uint32{2, 2, 1}, [3]uint32{32, 1, 1}, 0, 0, record.APILaunchKernel}
	checkLaunches(t, byPID[parent.peer.PID], parent.peer.PID, []want{v, v, v})
	checkLaunches(t, byPID[child.peer.PID], child.peer.PID, []want{g, g, g})
}

// TestThreads: launches from four threads, all recorded, ids unique, four
// thread ids.
func TestThreads(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 4096, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "threads"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ss := a.waitGone(t, 1)
	st := ss[0].read(t)
	if len(st.launches) != 1000 {
		t.Fatalf("%d launches, want 1000", len(st.launches))
	}
	ids, tids, blocks := map[uint64]bool{}, map[uint32]int{}, uint64(0)
	for _, l := range st.launches {
		if ids[l.LaunchID] {
			t.Errorf("launch id %d repeated", l.LaunchID)
		}
		ids[l.LaunchID] = true
		tids[l.TID]++
		blocks += uint64(l.Grid[0])
	}
	if len(tids) != 4 {
		t.Errorf("thread ids %v, want 4 threads of 250 launches", tids)
	}
	for tid, n := range tids {
		if n != 250 {
			t.Errorf("thread %d: %d launches, want 250", tid, n)
		}
	}
	// grid.x cycles 1,2,3 over 250 launches per thread: 84+83+83 → 499.
	if blocks != 4*499 {
		t.Errorf("sum of grid.x = %d, want %d", blocks, 4*499)
	}
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "silent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return path
}

// TestFailOpen: with no usable collector the application runs exactly as
// without the shim, and the handshake gives up within its bound.
func TestFailOpen(t *testing.T) {
	b := binaries(t)
	plain, _, err := run(t, b, nil, b.app, "cudart", "basic", "5")
	if err != nil {
		t.Fatal(err)
	}
	refusing := startAgent(t, 256, 1024, agent.Options{AllowedUIDs: []uint32{4242424}, AllowedGIDs: []uint32{4242424}})
	absent := filepath.Join(t.TempDir(), "absent.sock")
	cases := []struct {
		name   string
		env    []string
		max    time.Duration
		notice string // the one stderr line's reason; "" = stderr stays empty
	}{
		{"no socket", preload(b, absent), 5 * time.Second, "no collector at " + absent + " (socket: No such file or directory)"},
		{"not a socket", preload(b, "/dev/null"), 5 * time.Second, "no collector at /dev/null"},
		{"refused by credentials", preload(b, refusing.path), 5 * time.Second, "no collector at " + refusing.path},
		{"silent collector", append(preload(b, silentServer(t)), "GPUPROBE_TIMEOUT_MS=300"), 5 * time.Second, "no collector at "},
		{"disabled", append(preload(b, refusing.path), "GPUPROBE_DISABLE=1"), 5 * time.Second, ""},
		{"quiet", append(preload(b, absent), "GPUPROBE_QUIET=1"), 5 * time.Second, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, errOut, err := run(t, b, c.env, b.app, "cudart", "basic", "5")
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if out != plain {
				t.Errorf("output:\n%s\nwant:\n%s", out, plain)
			}
			wantNotice(t, errOut, c.notice)
			if d := time.Since(start); d > c.max {
				t.Errorf("took %v", d)
			}
		})
	}
	if n := len(refusing.sessions); n != 0 {
		t.Errorf("the refusing agent admitted %d sessions", n)
	}
}

// wantNotice checks that stderr is empty (notice "") or is the shim's one
// line saying the application runs unprobed, with notice in it.
func wantNotice(t *testing.T, stderr, notice string) {
	t.Helper()
	if notice == "" {
		if stderr != "" {
			t.Errorf("stderr is not empty: %q", stderr)
		}
		return
	}
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, notice) ||
		!strings.HasSuffix(stderr, "; running unprobed (GPUPROBE_QUIET=1 silences this)\n") {
		t.Errorf("stderr %q, want one line with %q that says the application runs unprobed", stderr, notice)
	}
}

// TestUnprobedNoticeOnce: a process tree that handshakes in the parent and
// again in a fork child, with no collector, gets the line once.
func TestUnprobedNoticeOnce(t *testing.T) {
	b := binaries(t)
	absent := filepath.Join(t.TempDir(), "absent.sock")
	_, errOut, err := run(t, b, preload(b, absent), b.app, "cudart", "fork")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	wantNotice(t, errOut, "no collector at "+absent)
}

// TestSilentCollectorBound: the handshake with a collector that never
// answers costs the application about GPUPROBE_TIMEOUT_MS, once.
func TestSilentCollectorBound(t *testing.T) {
	b := binaries(t)
	path := silentServer(t)
	start := time.Now()
	if _, errOut, err := run(t, b, append(preload(b, path), "GPUPROBE_TIMEOUT_MS=400"), b.app, "cudart", "basic", "50"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Errorf("run took %v, want the 400 ms bound once (plus start-up)", d)
	}
}

const helperEnv = "GPUPROBE_SHIM_TEST_AGENT"

// TestMain lets the test binary double as a collector process that a test
// can SIGKILL.
func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		os.Exit(helperAgent(path))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func helperAgent(path string) int {
	srv, err := agent.Listen(agent.Options{Path: path}, agent.Callbacks{Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
		ring, err := newRing()
		if err != nil {
			return nil, err
		}
		os.Stdout.WriteString("connected\n")
		return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()}}, nil
	}})
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		return 1
	}
	defer srv.Close()
	os.Stdout.WriteString("listening\n")
	time.Sleep(time.Minute)
	return 0
}

// TestCollectorKilled: SIGKILL the collector while the application is
// launching; the application finishes normally with the same output.
func TestCollectorKilled(t *testing.T) {
	b := binaries(t)
	plain, _, err := run(t, b, nil, b.app, "cudart", "slow", "40")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.sock")
	col := exec.Command(os.Args[0], "-test.run=^$")
	col.Env = append(os.Environ(), helperEnv+"="+path)
	colOut, err := col.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	defer col.Process.Kill()
	lines := bufio.NewScanner(colOut)
	if !lines.Scan() || lines.Text() != "listening" {
		t.Fatalf("collector: %q", lines.Text())
	}

	app := exec.Command(b.app, "cudart", "slow", "40")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=")
	app.Env = append(app.Env, preload(b, path)...)
	appOut, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	app.Stderr = &errb
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(appOut)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("app: %v", err)
	}
	if !lines.Scan() || lines.Text() != "connected" {
		t.Fatalf("the app did not connect: %q", lines.Text())
	}
	if err := col.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	col.Wait()
	rest, _ := bufio.NewReader(r).ReadString(0)
	if err := app.Wait(); err != nil {
		t.Fatalf("app after the collector was killed: %v\n%s", err, errb.String())
	}
	if got := first + rest; got != plain {
		t.Errorf("output:\n%s\nwant:\n%s", got, plain)
	}
}

// TestTimestamps: launch timestamps are CLOCK_MONOTONIC and keep their
// scale once the shim switches to the TSC (50 ms after load): the app
// sleeps 10 ms between launches.
func TestTimestamps(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	before := monotonic(t)
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "slow", "30"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	after := monotonic(t)
	ss := a.waitGone(t, 1)
	st := ss[0].read(t)
	if len(st.launches) != 30 {
		t.Fatalf("%d launches, want 30", len(st.launches))
	}
	for i, l := range st.launches {
		if l.EnqueueNS < before || l.ReturnNS > after || l.ReturnNS < l.EnqueueNS || l.ReturnNS-l.EnqueueNS > 100_000_000 {
			t.Errorf("launch %d: enqueue %d return %d, outside [%d, %d] or longer than 100 ms (a scale error, not load)", i, l.EnqueueNS, l.ReturnNS, before, after)
		}
		if i > 0 {
			if d := l.EnqueueNS - st.launches[i-1].EnqueueNS; d < 9_000_000 || d > 1_000_000_000 {
				t.Errorf("launch %d: %d ns after the previous one, want about 10 ms", i, d)
			}
		}
	}
}

func monotonic(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// TestTrace: GPUPROBE_TRACE=PATH logs the lookups, the wrappers, the first
// calls, the loads and a summary.
func TestTrace(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	log := filepath.Join(t.TempDir(), "trace.log")
	if _, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_TRACE="+log), b.app, "cudart", "basic", "5"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, s := range []string{
		`/libcuda.so.1, "cuGetProcAddress_v2") = 0x`,
		`cuGetProcAddress_v2("cuLaunchKernel", version 4000, flags 2)`,
		"wrap cuLaunchKernel [per-thread stream] via cuGetProcAddress",
		"wrap cuLaunchKernelEx via cuGetProcAddress (by name)",
		"not wrapped: cuCtxSynchronize",
		"first call: cuLaunchKernel (dynamic slot 0",
		"cuLibraryLoadData: fatbin image",
		`cuLibraryGetKernel(0x`,
		`, "_Z6vecAddPfS_S_i") = 0, 0x`,
		"connected to " + a.path,
		// 12 records of the workload, and one Device record.
		"summary: launches=8 graph_launches=0 captured=0 names=2 names_cut=0 loads=1 syncs=1 memcpys=1 records=13 not_written=0",
		"device record 0: Mock H100 0, sm_90, uuid 10101010-",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("trace lacks %q:\n%s", s, text)
		}
	}
}
