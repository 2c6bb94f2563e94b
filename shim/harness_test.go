package shim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// built are the binaries every test uses, compiled once per test run.
type built struct {
	dir       string // holds libcuda.so.1 (the MOCK driver)
	shim      string // libgpuprobe.so
	app       string // dlopen-based test app
	appDirect string // the test app linked with -lcuda
	cupti     string // libcupti.so.13 (the MOCK CUPTI)
	sanitizer string // libsanitizer-public.so (the MOCK Sanitizer API)
	profiler  string // an app that uses CUPTI itself (testdata/profiler.c)
	// profilerLib and profilerLocal: the same from a library loaded with
	// RTLD_LOCAL (testdata/profiler_local.c), as Python loads torch.
	profilerLib, profilerLocal string
}

var (
	buildOnce sync.Once
	buildRes  *built
	buildErr  error
	buildDir  string
)

// cflags are the shim's compiler flags (the same as shim/shim.mk).
var cflags = []string{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-fno-omit-frame-pointer",
	"-Isrc", "-I../shm/include", "-I../record/include"}

func gcc(args ...string) error {
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gcc %v: %w\n%s", args, err, out)
	}
	return nil
}

func build() (*built, error) {
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil, fmt.Errorf("gcc not found: %w", err)
	}
	dir, err := os.MkdirTemp("", "gpuprobe-shim-test")
	if err != nil {
		return nil, err
	}
	buildDir = dir
	b := &built{dir: dir, shim: filepath.Join(dir, "libgpuprobe.so"), app: filepath.Join(dir, "app"),
		appDirect: filepath.Join(dir, "app-direct"), cupti: filepath.Join(dir, "libcupti.so.13"),
		sanitizer: filepath.Join(dir, "libsanitizer-public.so"),
		profiler:  filepath.Join(dir, "profiler"), profilerLib: filepath.Join(dir, "libprofiler.so"),
		profilerLocal: filepath.Join(dir, "profiler-local")}
	srcs, err := filepath.Glob("src/*.c")
	if err != nil || len(srcs) == 0 {
		return nil, fmt.Errorf("no shim sources: %v", err)
	}
	// The test application is every testdata/app*.c (cmd/gpuprobe's and
	// e2e's builds take the same files).
	apps, err := filepath.Glob("testdata/app*.c")
	if err != nil || len(apps) == 0 {
		return nil, fmt.Errorf("no test application sources: %v", err)
	}
	steps := [][]string{
		append(append(append([]string{}, cflags...), "-o", b.shim), append(srcs, "-ldl", "-lpthread")...),
		// The MOCK driver: -Bsymbolic like the real one, so that its own
		// references to its entry points are not interposed by the shim.
		{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1",
			"-o", filepath.Join(dir, "libcuda.so.1"), "testdata/mock_libcuda.c"},
		append(append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-I../shm/include", "-o", b.app}, apps...), "-ldl", "-lpthread"),
		append(append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-I../shm/include", "-DAPP_DIRECT", "-o", b.appDirect}, apps...),
			filepath.Join(dir, "libcuda.so.1"), "-Wl,-rpath,"+dir, "-ldl", "-lpthread"),
		{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wl,-soname,libcupti.so.13",
			"-o", b.cupti, "testdata/mock_libcupti.c", "-ldl", "-lpthread"},
		{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-o", b.sanitizer, "testdata/mock_libsanitizer.c", "-ldl"},
		{"-O2", "-Wall", "-Wextra", "-Werror", "-o", b.profiler, "testdata/profiler.c",
			filepath.Join(dir, "libcuda.so.1"), b.cupti, "-Wl,-rpath," + dir},
		{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-DPROFILER_LIB", "-o", b.profilerLib, "testdata/profiler.c",
			filepath.Join(dir, "libcuda.so.1"), b.cupti, "-Wl,-rpath," + dir},
		{"-O2", "-Wall", "-Wextra", "-Werror", "-o", b.profilerLocal, "testdata/profiler_local.c", "-ldl"},
	}
	for _, s := range steps {
		if err := gcc(s...); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func binaries(tb testing.TB) *built {
	tb.Helper()
	buildOnce.Do(func() { buildRes, buildErr = build() })
	if buildErr != nil {
		tb.Fatalf("building the shim and its test programs: %v", buildErr)
	}
	return buildRes
}

// session is one client of the test agent: its peer, its launch ring and
// its names ring (nil when the agent offers none).
type session struct {
	peer  *agent.Peer
	ring  *shm.Ring
	names *shm.Ring
}

// read decodes what the session's rings hold: the names ring first, as
// the receiver reads it.
func (s *session) read(tb testing.TB) *stream {
	tb.Helper()
	return readRing(tb, s.names, s.ring)
}

// The names ring the test agent offers, as the receiver does
// (receiver.NameRingSlotSize, NameRingSlots): slots that hold the largest
// kernel_name record.
const (
	nameSlotSize = shm.SlotHeaderSize + record.MaxKernelNameSize
	nameSlots    = 256
)

// testAgent is a real agent socket server (package agent) handing each
// client its own launch ring and names ring, as the receiver does.
type testAgent struct {
	srv  *agent.Server
	path string

	mu       sync.Mutex
	sessions []*session
	gone     int
}

func startAgent(tb testing.TB, slotSize, slots uint32, opts agent.Options) *testAgent {
	tb.Helper()
	return startAgentAt(tb, filepath.Join(tb.TempDir(), "agent.sock"), slotSize, slots, opts)
}

// startAgentAt is startAgent serving path (a restarted collector).
func startAgentAt(tb testing.TB, path string, slotSize, slots uint32, opts agent.Options) *testAgent {
	tb.Helper()
	return startAgentNames(tb, path, slotSize, slots, nameSlots, opts)
}

// startAgentNames is startAgentAt with names rings of nslots slots (0: no
// names ring, as an older collector).
func startAgentNames(tb testing.TB, path string, slotSize, slots, nslots uint32, opts agent.Options) *testAgent {
	tb.Helper()
	return startAgentPatch(tb, path, slotSize, slots, nslots, opts, nil)
}

// startAgentPatch is startAgentNames answering PATCH with patch.
func startAgentPatch(tb testing.TB, path string, slotSize, slots, nslots uint32, opts agent.Options,
	patch func(*agent.Peer, *agentwire.PatchRequest) (*agentwire.Patched, error)) *testAgent {
	tb.Helper()
	a := &testAgent{path: path}
	opts.Path = a.path
	srv, err := agent.Listen(opts, agent.Callbacks{
		Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
			ring, err := shm.CreateRing(slotSize, slots)
			if err != nil {
				return nil, err
			}
			s := &session{peer: p, ring: ring}
			offers := []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()}}
			if nslots > 0 {
				if s.names, err = shm.CreateRing(nameSlotSize, nslots); err != nil {
					ring.Close()
					return nil, err
				}
				offers = append(offers, agentwire.Offer{Role: agentwire.RoleNameRing, Name: "names", Region: s.names.Region()})
			}
			a.mu.Lock()
			a.sessions = append(a.sessions, s)
			a.mu.Unlock()
			return offers, nil
		},
		Disconnect: func(*agent.Peer) {
			a.mu.Lock()
			a.gone++
			a.mu.Unlock()
		},
		Patch: patch,
	})
	if err != nil {
		tb.Fatalf("agent.Listen: %v", err)
	}
	a.srv = srv
	tb.Cleanup(func() {
		srv.Close()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, s := range a.sessions {
			s.ring.Close()
			if s.names != nil {
				s.names.Close()
			}
		}
	})
	return a
}

// waitGone waits until n clients have disconnected (their records are all
// in their rings by then).
func (a *testAgent) waitGone(tb testing.TB, n int) []*session {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		gone, ss := a.gone, append([]*session(nil), a.sessions...)
		a.mu.Unlock()
		if gone >= n {
			return ss
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d clients disconnected after 10 s", gone, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stream is what a session's rings carried, decoded.
type stream struct {
	launches []record.Launch
	names    map[uint64]string // function handle → name
	nameRecs []record.KernelName
	syncs    []record.Sync
	memcpys  []record.Memcpy
	windows  []record.Window
	// windowAfter: for each of windows, how many launches the rings held
	// before it (when the shim wrote it, relative to the launches).
	windowAfter []int
	states      []record.WindowState
	patches     []record.Patch // the patch thread's account of each module
	execs       []record.Exec  // the SASS route's launch windows (sass.c)
	// Of nameRecs, those that came through the names ring; and the
	// records the launch ring held (of any type).
	namesRing, launchRing int
	devices               []record.Device
	// spanCtx: each launch's span context, by index of launches (the
	// latest span_context record of its thread before it; zero: none).
	spanCtx  []record.SpanContext
	threadSC map[uint32]record.SpanContext
	copyCtx  []record.SpanContext // each memcpy's, by index of memcpys
	stacks   []record.Stack
}

// readRing decodes the records of rings, read in turn (nil ones skipped).
func readRing(tb testing.TB, rings ...*shm.Ring) *stream {
	tb.Helper()
	st := &stream{names: map[uint64]string{}, threadSC: map[uint32]record.SpanContext{}}
	for i, ring := range rings {
		if ring == nil {
			continue
		}
		st.read(tb, ring, i < len(rings)-1)
		if s := ring.Stats(); s.Dropped != 0 || s.Oversize != 0 {
			tb.Errorf("ring dropped %d and rejected %d oversize records", s.Dropped, s.Oversize)
		}
	}
	return st
}

// read adds the records of ring to st; names says it is a names ring.
func (st *stream) read(tb testing.TB, ring *shm.Ring, names bool) {
	tb.Helper()
	c := ring.NewConsumer(shm.ConsumerOptions{})
	c.Read(0, func(r shm.Record) {
		if names {
			st.namesRing++
		} else {
			st.launchRing++
		}
		p, err := record.ParsePrefix(r.Payload)
		if err != nil {
			tb.Errorf("ticket %d: %v", r.Ticket, err)
			return
		}
		if uint32(p.Type) != r.Type {
			tb.Errorf("ticket %d: slot type %d, record type %d", r.Ticket, r.Type, p.Type)
		}
		var derr error
		switch p.Type {
		case record.TypeLaunch:
			var l record.Launch
			if derr = l.Decode(r.Payload); derr == nil {
				if _, ok := st.names[l.Function]; !ok {
					tb.Errorf("launch %d of function %#x came before its kernel-name record", l.LaunchID, l.Function)
				}
				st.launches = append(st.launches, l)
				st.spanCtx = append(st.spanCtx, st.threadSC[l.TID])
			}
		case record.TypeSpanContext:
			var sc record.SpanContext
			if derr = sc.Decode(r.Payload); derr == nil {
				st.threadSC[sc.TID] = sc
			}
		case record.TypeStack:
			var s record.Stack
			if derr = s.Decode(r.Payload); derr == nil {
				st.stacks = append(st.stacks, s)
			}
		case record.TypeKernelName:
			var k record.KernelName
			if derr = k.Decode(r.Payload); derr == nil {
				st.names[k.Function] = k.Name
				st.nameRecs = append(st.nameRecs, k)
			}
		case record.TypeSync:
			var s record.Sync
			if derr = s.Decode(r.Payload); derr == nil {
				st.syncs = append(st.syncs, s)
			}
		case record.TypeMemcpy:
			var m record.Memcpy
			if derr = m.Decode(r.Payload); derr == nil {
				st.memcpys = append(st.memcpys, m)
				st.copyCtx = append(st.copyCtx, st.threadSC[m.TID])
			}
		case record.TypeWindow:
			var w record.Window
			if derr = w.Decode(r.Payload); derr == nil {
				st.windows = append(st.windows, w)
				st.windowAfter = append(st.windowAfter, len(st.launches))
			}
		case record.TypeWindowState:
			var w record.WindowState
			if derr = w.Decode(r.Payload); derr == nil {
				st.states = append(st.states, w)
			}
		case record.TypeExec:
			var e record.Exec
			if derr = e.Decode(r.Payload); derr == nil {
				st.execs = append(st.execs, e)
			}
		case record.TypePatch:
			var pa record.Patch
			if derr = pa.Decode(r.Payload); derr == nil {
				st.patches = append(st.patches, pa)
			}
		case record.TypeDevice:
			var d record.Device
			if derr = d.Decode(r.Payload); derr == nil {
				if len(st.launches) > 0 {
					tb.Errorf("device record %d after a launch record", d.Device)
				}
				st.devices = append(st.devices, d)
			}
		default:
			tb.Errorf("ticket %d: unexpected record type %v", r.Ticket, p.Type)
		}
		if derr != nil {
			tb.Errorf("ticket %d: %v", r.Ticket, derr)
		}
	})
}

// run runs a test program with env added, returning stdout and stderr.
func run(tb testing.TB, b *built, env []string, prog string, args ...string) (string, string, error) {
	tb.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=", "GPUPROBE_SOCKET=", "GPUPROBE_DISABLE=", "GPUPROBE_PATCH=", "GPUPROBE_QUIET=", "TRACEPARENT=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// preload is the shim's environment for a session at socket. Loads wait
// for their patched image (GPUPROBE_PATCH_WAIT_MS), so that a test's first
// launch is probed; preloadAsync leaves patching off the application's
// thread, the default.
func preload(b *built, socket string) []string {
	return append(preloadAsync(b, socket), "GPUPROBE_PATCH_WAIT_MS=600000")
}

// preloadAsync is the shim's environment with its default, asynchronous
// patching. Run as an unprivileged user, the socket is that user's, and
// GPUPROBE_SERVER_UID tells the shim to trust it as it trusts root's.
func preloadAsync(b *built, socket string) []string {
	env := []string{"LD_PRELOAD=" + b.shim, "GPUPROBE_SOCKET=" + socket, "GPUPROBE_PATCH=1", "GPUPROBE_PATCH_WAIT_MS="}
	if uid := os.Geteuid(); uid != 0 {
		env = append(env, "GPUPROBE_SERVER_UID="+strconv.Itoa(uid))
	}
	return env
}

// program returns the binary for an app mode.
func (b *built) program(mode string) string {
	if mode == "direct" {
		return b.appDirect
	}
	return b.app
}

func sortedNames(m map[uint64]string) []string {
	var s []string
	for _, n := range m {
		s = append(s, n)
	}
	sort.Strings(s)
	return s
}

func newRing() (*shm.Ring, error) { return shm.CreateRing(256, 1024) }

// restartAfterFirstLine starts app under collector a1 and, once the app
// has printed its first line, restarts the collector at path (a new test
// agent with slotSize and opts); it returns the new agent and all the app
// printed, after the app exited (a failed run fails the test).
func restartAfterFirstLine(t *testing.T, app *exec.Cmd, a1 *testAgent, path string, slotSize uint32, opts agent.Options) (*testAgent, string) {
	t.Helper()
	return restartWith(t, app, a1, func() *testAgent { return startAgentAt(t, path, slotSize, 1024, opts) })
}

// restartWith is restartAfterFirstLine with the second collector started
// by start.
func restartWith(t *testing.T, app *exec.Cmd, a1 *testAgent, start func() *testAgent) (*testAgent, string) {
	t.Helper()
	out, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	app.Stderr = &errb
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("app: %v\n%s", err, errb.String())
	}
	a1.srv.Close()
	time.Sleep(150 * time.Millisecond)
	a2 := start()
	rest, _ := io.ReadAll(r)
	if err := app.Wait(); err != nil {
		t.Fatalf("app: %v\n%s", err, errb.String())
	}
	return a2, first + string(rest)
}
