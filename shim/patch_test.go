package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// patchAgent is a real agent server whose Patch callback is the real
// gpuprobe/patcher (kernel_phases), bound like the receiver binds it: the
// launch ring is WELCOME region 0, the kp_exec ring region 1 (with its
// device block).
type patchAgent struct {
	*testAgent // its mu also guards answers
	answers    []*agentwire.Patched
}

func startPatchAgent(t *testing.T, answer func(*patcher.Patcher, *agentwire.PatchRequest, patcher.Binder) (*agentwire.Patched, error)) *patchAgent {
	t.Helper()
	return startPatchAgentAt(t, filepath.Join(t.TempDir(), "agent.sock"), answer)
}

// startPatchAgentAt is startPatchAgent serving path (a restarted collector).
func startPatchAgentAt(t *testing.T, path string, answer func(*patcher.Patcher, *agentwire.PatchRequest, patcher.Binder) (*agentwire.Patched, error)) *patchAgent {
	t.Helper()
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := patcher.New(patcher.Options{Programs: progs, DeviceOnly: probes.KernelPhasesDeviceOnly,
		MaxThreads: 4096, RingDevice: probes.KernelPhasesRingDevice})
	if err != nil {
		t.Fatal(err)
	}
	a := &patchAgent{testAgent: &testAgent{path: path}}
	var warps []*shm.Ring
	srv, err := agent.Listen(agent.Options{Path: a.path}, agent.Callbacks{
		Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
			ring, err := newRing()
			if err != nil {
				return nil, err
			}
			w, err := shm.CreateRing(80, 256)
			if err != nil {
				ring.Close()
				return nil, err
			}
			a.mu.Lock()
			a.sessions = append(a.sessions, &session{peer: p, ring: ring})
			warps = append(warps, w)
			a.mu.Unlock()
			return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()},
				{Role: agentwire.RoleMap, Name: probes.KernelPhasesRingMap, Region: w.Region()}}, nil
		},
		Disconnect: func(*agent.Peer) {
			a.mu.Lock()
			a.gone++
			a.mu.Unlock()
		},
		Patch: func(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
			a.mu.Lock()
			w := warps[len(warps)-1]
			a.mu.Unlock()
			ans, err := answer(pt, req, func(name string) (patcher.Binding, bool) {
				if name != probes.KernelPhasesRingMap {
					return patcher.Binding{}, false
				}
				return patcher.Binding{Region: 1, Lanes: 1, RingBlock: w.DeviceBlock()}, true
			})
			if ans != nil {
				a.mu.Lock()
				a.answers = append(a.answers, ans)
				a.mu.Unlock()
			}
			return ans, err
		},
	})
	if err != nil {
		t.Fatalf("agent.Listen: %v", err)
	}
	a.srv = srv
	t.Cleanup(func() {
		srv.Close()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, s := range a.sessions {
			s.ring.Close()
		}
		for _, w := range warps {
			w.Close()
		}
	})
	return a
}

var (
	devRe    = regexp.MustCompile(`mock: (hostreg|alloc) dev=(0x[0-9a-f]+) size=(\d+)`)
	globalRe = regexp.MustCompile(`mock: global (\S+)=(0x[0-9a-f]+|0)`)
	extraRe  = regexp.MustCompile(`extra=(\d+)`)
)

// mockDevices parses the MOCK driver's device memory log: device address
// → size, per kind (hostreg, alloc).
func mockDevices(stderr string) map[string]map[uint64]uint64 {
	out := map[string]map[uint64]uint64{"hostreg": {}, "alloc": {}}
	for _, m := range devRe.FindAllStringSubmatch(stderr, -1) {
		d, _ := strconv.ParseUint(m[2], 0, 64)
		s, _ := strconv.ParseUint(m[3], 10, 64)
		out[m[1]][d] = s
	}
	return out
}

// TestPatchLoad runs the test app on a real nvcc-built PTX under the shim
// with the MOCK driver, against a real agent whose Patch callback is
// gpuprobe/patcher, and checks what the driver got.
func TestPatchLoad(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptxFile := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	orig, err := os.ReadFile(ptxFile)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		if r.Arch != 90 {
			return nil, fmt.Errorf("arch %d, want 90 (the MOCK device)", r.Arch)
		}
		return p.Patch(r, bind)
	}
	nopatch := func(*patcher.Patcher, *agentwire.PatchRequest, patcher.Binder) (*agentwire.Patched, error) {
		return nil, &agentwire.NoPatch{Code: agentwire.NoPatchNoKernel, Message: "test: nothing targeted"}
	}
	slow := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		time.Sleep(1500 * time.Millisecond)
		return p.Patch(r, bind)
	}
	sampled := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		a, err := patch(p, r, bind)
		if a != nil {
			a.DeviceOneIn = 2
		}
		return a, err
	}
	limited := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		a, err := patch(p, r, bind)
		if a != nil {
			a.DeviceMaxPerSecond = 1
		}
		return a, err
	}
	tests := []struct {
		name    string
		mode    string // app mode: dlsym loads a module, cudart a library
		answer  func(*patcher.Patcher, *agentwire.PatchRequest, patcher.Binder) (*agentwire.Patched, error)
		env     []string
		patched bool
		oneIn   uint64 // the answer's DeviceOneIn
		rate    bool   // the answer's DeviceMaxPerSecond is 1: of the app's launches within a second, the first keeps its id
	}{
		{"module", "dlsym", patch, nil, true, 0, false},
		{"device sampling 1 in 2", "dlsym", sampled, nil, true, 2, false},
		{"device rate 1 a second", "dlsym", limited, nil, true, 0, true},
		{"library", "cudart", patch, nil, true, 0, false},
		{"direct", "direct", patch, nil, true, 0, false},
		{"nopatch", "dlsym", nopatch, nil, false, 0, false},
		{"timeout", "dlsym", slow, []string{"GPUPROBE_TIMEOUT_MS=300"}, false, 0, false},
		{"global-fails", "cudart", patch, []string{"MOCK_FAIL_GLOBAL=1"}, false, 0, false},
	}
	// Each case runs again with the PTX loaded by path (scenario ptxfile:
	// cuModuleLoad, or cuLibraryLoadFromFile with options), which the shim
	// reads and patches like the in-memory text.
	for _, tc := range tests[:len(tests):len(tests)] {
		tc.name += "-file"
		tests = append(tests, tc)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			byPath, scenario := strings.HasSuffix(tc.name, "-file"), "ptx"
			if byPath {
				scenario = "ptxfile"
			}
			var sentMu sync.Mutex
			var sent []string // the PTX images the collector was sent
			answer := tc.answer
			tc.answer = func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
				if strings.Contains(string(r.Image), ".entry _Z9vectorAdd") {
					sentMu.Lock()
					sent = append(sent, string(r.Image))
					sentMu.Unlock()
				}
				return answer(p, r, bind)
			}
			a := startPatchAgent(t, tc.answer)
			imgOut := filepath.Join(t.TempDir(), "loaded.ptx")
			env := append(preload(b, a.path), "MOCK_IMAGE_OUT="+imgOut, "GPUPROBE_TRACE=1")
			env = append(env, tc.env...)
			stdout, stderr, err := run(t, b, env, b.program(tc.mode), tc.mode, scenario, ptxFile)
			if err != nil {
				t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			sentMu.Lock()
			// A slow collector may not have read the request yet.
			if strings.HasPrefix(tc.name, "timeout") && len(sent) == 0 {
				sent = []string{string(orig)}
			}
			checkFileLoad(t, tc.mode, byPath, tc.patched, ptxFile, string(orig), sent, st, stderr)
			sentMu.Unlock()
			loaded, err := os.ReadFile(imgOut)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(st.launches) != 4 || len(lines) < 4 {
				t.Fatalf("%d launch records, stdout:\n%s\nstderr:\n%s", len(st.launches), stdout, stderr)
			}
			if !tc.patched {
				if string(loaded) != string(orig) {
					t.Errorf("the driver loaded %d bytes, not the original %d-byte PTX", len(loaded), len(orig))
				}
				if lines[0] != "app: params-launch same=1" || lines[1] != "app: buffer-launch same=1" ||
					lines[2] != "app: graph-node n=3 p0=1 p1=1 p2=1 same=1" ||
					lines[3] != "app: captured-launch same=1" {
					t.Errorf("an unpatched kernel's launch was changed:\n%s", stdout)
				}
				if globalRe.MatchString(stdout) {
					t.Errorf("globals set on an unpatched module:\n%s", stdout)
				}
				if !strings.Contains(stderr, "loading the original image") && !strings.Contains(stderr, "not patched") {
					t.Errorf("no trace of the fail-open:\n%s", stderr)
				}
				return
			}
			a.mu.Lock()
			if len(a.answers) != 1 {
				a.mu.Unlock()
				t.Fatalf("%d PATCHED answers, want 1", len(a.answers))
			}
			ans := a.answers[0]
			a.mu.Unlock()
			if want := strings.TrimRight(string(ans.Image), "\x00"); string(loaded) != want {
				t.Errorf("the driver loaded %d bytes, not the %d-byte patched PTX", len(loaded), len(want))
			}
			if string(loaded) == string(orig) {
				t.Errorf("the driver loaded the original PTX")
			}
			var k *agentwire.PatchedKernel
			for i := range ans.Kernels {
				if ans.Kernels[i].Name == "_Z9vectorAddPKfS0_Pf" {
					k = &ans.Kernels[i]
				}
			}
			if k == nil || k.ParamIndex != 3 || k.ParamOffset != 24 {
				t.Fatalf("PATCHED kernels %+v: want vectorAdd's launch id at index 3, offset 24", ans.Kernels)
			}
			// With device sampling, a launch the hash leaves out runs with
			// launch id 0 and its record says so; with a rate of 1 a
			// second, so does every launch after the first (the app makes
			// them within microseconds).
			probed := func(i int) bool {
				if tc.rate {
					return i == 0
				}
				return tc.oneIn <= 1 || sampleKeep(st.launches[i].LaunchID, tc.oneIn)
			}
			passed := func(i int) uint64 {
				if probed(i) {
					return st.launches[i].LaunchID
				}
				return 0
			}
			wantP := fmt.Sprintf("app: params-launch same=0 p0=1 p1=1 p2=1 extra=%d", passed(0))
			wantB := fmt.Sprintf("app: buffer-launch same=0 size=32 copied=1 extra=%d", passed(1))
			if lines[0] != wantP || lines[1] != wantB {
				t.Errorf("launches got\n%s\n%s\nwant\n%s\n%s", lines[0], lines[1], wantP, wantB)
			}
			// The graph node's reserved id (high bit set) reached the driver
			// as the node's 4th parameter, and the graph launch's record
			// carries the same id.
			wantG := fmt.Sprintf("app: graph-node n=4 p0=1 p1=1 p2=1 extra=%d same=1", st.launches[2].LaunchID)
			if lines[2] != wantG {
				t.Errorf("graph node got\n%s\nwant\n%s", lines[2], wantG)
			}
			if st.launches[2].LaunchID>>63 != 1 {
				t.Errorf("graph node launch id %#x: not a reserved graph-node id", st.launches[2].LaunchID)
			}
			// The captured launch wrote no record; the run of its node
			// (launch record 3) carries the id it passed to the driver.
			wantC := fmt.Sprintf("app: captured-launch same=0 extra=%d", st.launches[3].LaunchID)
			if lines[3] != wantC || st.launches[3].API != record.APIGraphLaunch || st.launches[3].Stream != 0x77 {
				t.Errorf("captured launch got\n%s (record: %v on stream %#x)\nwant\n%s (a cuGraphLaunch record on 0x77)",
					lines[3], st.launches[3].API, st.launches[3].Stream, wantC)
			}
			if st.launches[0].LaunchID == st.launches[1].LaunchID {
				t.Errorf("both launches have id %d", st.launches[0].LaunchID)
			}
			// Each of them ran the patched kernel with its id, but for those
			// device sampling left out (never a graph node or a captured
			// launch): those, and only those, are marked unprobed.
			for i, l := range st.launches[:4] {
				want := i < 2 && !probed(i)
				if got := l.Flags&record.LaunchUnprobed != 0; got != want {
					t.Errorf("launch record %d (id %#x): unprobed %v, want %v", i, l.LaunchID, got, want)
				}
			}
			if tc.oneIn > 1 && probed(0) == probed(1) {
				t.Logf("ids %d and %d: both probed or both not, which the hash allows", st.launches[0].LaunchID, st.launches[1].LaunchID)
			}
			devs := mockDevices(stderr)
			got := map[string]uint64{}
			for _, m := range globalRe.FindAllStringSubmatch(stdout, -1) {
				got[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
			}
			if len(got) != len(ans.Globals) || len(ans.Globals) == 0 {
				t.Errorf("%d globals set, PATCHED has %d: %v", len(got), len(ans.Globals), got)
			}
			for _, g := range ans.Globals {
				v, ok := got[g.Name]
				if !ok {
					t.Errorf("global %s (%v) not set", g.Name, g.Kind)
					continue
				}
				switch g.Kind {
				case agentwire.GlobalRegion:
					if _, ok := devs["hostreg"][v-g.Value]; !ok {
						t.Errorf("global %s = %#x: not a registered region's device address + %d (%v)", g.Name, v, g.Value, devs["hostreg"])
					}
				case agentwire.GlobalConst:
					if v != g.Value {
						t.Errorf("global %s = %#x, want %#x", g.Name, v, g.Value)
					}
				case agentwire.GlobalRingBlock, agentwire.GlobalDeviceAlloc:
					if s, ok := devs["alloc"][v]; !ok || s != g.Size {
						t.Errorf("global %s (%v) = %#x: not a %d-byte allocation (%v)", g.Name, g.Kind, v, g.Size, devs["alloc"])
					}
					// The app unloads the module at the end: its
					// device-only maps are freed with it; a ring
					// block belongs to the session's region and stays.
					freed := strings.Contains(stderr, fmt.Sprintf("mock: free dev=%#x\n", v))
					if want := g.Kind == agentwire.GlobalDeviceAlloc; freed != want {
						t.Errorf("global %s (%v) = %#x: freed at unload %v, want %v", g.Name, g.Kind, v, freed, want)
					}
				}
			}
			if !strings.Contains(stdout, "app: unloaded") {
				t.Errorf("the app did not unload its module:\n%s", stdout)
			}
		})
	}
}

// TestPatchNoSession: with no collector the app loads its own image and
// launches unchanged.
func TestPatchNoSession(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptxFile := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	imgOut := filepath.Join(t.TempDir(), "loaded.ptx")
	env := append(preload(b, filepath.Join(t.TempDir(), "none.sock")), "MOCK_IMAGE_OUT="+imgOut)
	stdout, stderr, err := run(t, b, env, b.app, "dlsym", "ptx", ptxFile)
	if err != nil {
		t.Fatalf("app: %v\n%s%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "app: params-launch same=1\napp: buffer-launch same=1\napp: graph-node n=3 p0=1 p1=1 p2=1 same=1\n") ||
		extraRe.MatchString(stdout) {
		t.Errorf("launches changed without a session:\n%s", stdout)
	}
	loaded, err1 := os.ReadFile(imgOut)
	orig, err2 := os.ReadFile(ptxFile)
	if err := errors.Join(err1, err2); err != nil || string(loaded) != string(orig) {
		t.Errorf("loaded image differs from the original (%v)", err)
	}
}

// sampleKeep is the shim's gp_sample_keep (gp.h): whether a launch
// id keeps its id under sampling::device_one_in n.
func sampleKeep(id, n uint64) bool {
	id ^= id >> 30
	id *= 0xbf58476d1ce4e5b9
	id ^= id >> 27
	id *= 0x94d049bb133111eb
	id ^= id >> 31
	return (id>>32)%n == 0
}
