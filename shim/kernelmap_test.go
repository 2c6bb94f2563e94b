package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// kernelMapMark is what the test stores in the kernel map's key 0: the
// MOCK driver logs the first u64 of every range it registers, so the test
// can tell the kernel map's mapping, and MOCK_FAIL_HOSTREG_FIRST picks it
// to refuse.
const kernelMapMark = 0x6b6d61705f6b6579 // "yek_pamk"

var hostregFirstRe = regexp.MustCompile(`mock: hostreg dev=(0x[0-9a-f]+) size=(\d+) first=(0x[0-9a-f]+|0)`)

// launchlateGPU builds testdata/bpf/launchlate.c and returns its GPU
// program: it reads the kernel map launch_clock and calls bpf_ktime_get_ns.
func launchlateGPU(t *testing.T) []*jit.Program {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/launchlate.c: %v", err)
	}
	obj := filepath.Join(t.TempDir(), "launchlate.o")
	out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../jit/include", "-c",
		filepath.Join("..", "testdata", "bpf", "launchlate.c"), "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	progs, err := jit.LoadELF(obj)
	if err != nil {
		t.Fatal(err)
	}
	var gpu []*jit.Program
	for _, p := range progs {
		if p.IsGPU() {
			gpu = append(gpu, p)
		}
	}
	return gpu
}

// kernelMapAgent serves the WELCOME the receiver gives a client of
// launchlate: 0 launch ring, 1 delay_log2_ns (shm array), 2 launch_clock
// (a real BPF_F_MMAPABLE array's fd, RoleKernelMap), 3 the clock region
// (RoleClock); PATCH is answered by the real patcher bound to them.
func kernelMapAgent(t *testing.T) (*testAgent, *ebpf.Map) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: creating a BPF map needs root (CI runs as root)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("RemoveMemlock: %v", err)
	}
	km, err := ebpf.NewMap(&ebpf.MapSpec{Name: "launch_clock", Type: ebpf.Array, KeySize: 4, ValueSize: 8,
		MaxEntries: 2, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		t.Fatalf("creating a BPF_F_MMAPABLE array: %v", err)
	}
	if err := km.Update(uint32(0), uint64(kernelMapMark), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	hist, err := shm.CreateArray(shm.KindArray, 8, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	clock, err := shm.CreateArray(shm.KindArray, 8, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := patcher.New(patcher.Options{Programs: launchlateGPU(t)})
	if err != nil {
		t.Fatal(err)
	}
	regions := map[string]uint32{"delay_log2_ns": 1, "launch_clock": 2, patcher.ClockBinding: 3}
	a := &testAgent{path: filepath.Join(t.TempDir(), "agent.sock")}
	srv, err := agent.Listen(agent.Options{Path: a.path}, agent.Callbacks{
		Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
			ring, err := newRing()
			if err != nil {
				return nil, err
			}
			a.mu.Lock()
			a.sessions = append(a.sessions, &session{peer: p, ring: ring})
			a.mu.Unlock()
			return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()},
				{Role: agentwire.RoleMap, Name: "delay_log2_ns", Region: hist.Region()},
				{Role: agentwire.RoleKernelMap, Name: "launch_clock", FD: km.FD(), Size: 4096, Kind: shm.KindArray},
				{Role: agentwire.RoleClock, Name: "clock", Region: clock.Region()}}, nil
		},
		Disconnect: func(*agent.Peer) {
			a.mu.Lock()
			a.gone++
			a.mu.Unlock()
		},
		Patch: func(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
			return pt.Patch(req, func(name string) (patcher.Binding, bool) {
				r, ok := regions[name]
				return patcher.Binding{Region: r, Lanes: 1}, ok
			})
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
		hist.Close()
		clock.Close()
		km.Close()
	})
	return a, km
}

// TestKernelMapRegion runs the test app under the shim with the MOCK
// driver against an agent that offers a real BPF map as a kernel map: the
// shim maps the map's fd, registers the mapping (the MOCK driver sees the
// value the test wrote through the BPF map), and sets launch_clock's global
// to its device address and the clock global to the clock region's device
// address + 512. When the driver refuses the kernel map's registration, its
// global is 0, the failure is logged and counted once, the rest is bound
// and the app runs, patched, to the end.
func TestKernelMapRegion(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptxFile := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	tests := []struct {
		name      string
		env       []string
		kernelMap bool // the kernel map is registered and bound
	}{
		{"registered", nil, true},
		{"registration fails", []string{fmt.Sprintf("MOCK_FAIL_HOSTREG_FIRST=%#x", uint64(kernelMapMark))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := kernelMapAgent(t)
			env := append(preload(b, a.path), "GPUPROBE_TRACE=1")
			env = append(env, tc.env...)
			stdout, stderr, err := run(t, b, env, b.app, "dlsym", "ptx", ptxFile)
			if err != nil {
				t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			a.waitGone(t, 1)
			if !strings.HasPrefix(stdout, "app: params-launch same=0") {
				t.Fatalf("the module was not patched:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			byFirst := map[uint64]uint64{} // first u64 → device address
			devs := map[uint64]bool{}
			for _, m := range hostregFirstRe.FindAllStringSubmatch(stderr, -1) {
				d, _ := strconv.ParseUint(m[1], 0, 64)
				f, _ := strconv.ParseUint(m[3], 0, 64)
				byFirst[f], devs[d] = d, true
			}
			globals := map[string]uint64{}
			for _, m := range globalRe.FindAllStringSubmatch(stdout, -1) {
				globals[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
			}
			kmDev, kmReg := byFirst[kernelMapMark]
			if kmReg != tc.kernelMap {
				t.Fatalf("kernel map registered: %v, want %v; stderr:\n%s", kmReg, tc.kernelMap, stderr)
			}
			wantKM := uint64(0)
			if tc.kernelMap {
				wantKM = kmDev
			}
			if got, ok := globals["gpuprobe_launch_gpu_map_launch_clock"]; !ok || got != wantKM {
				t.Errorf("launch_clock global = %#x (set %v), want %#x", got, ok, wantKM)
			}
			// The clock global points at the clock region's first value; the
			// delay histogram's global at its own region.
			clk, hist := globals["gpuprobe_launch_gpu_clock"], globals["gpuprobe_launch_gpu_map_delay_log2_ns"]
			if !devs[clk-shm.DataOffset] || !devs[hist] || clk-shm.DataOffset == hist {
				t.Errorf("clock global %#x, delay_log2_ns global %#x: want two registered regions' device addresses (+%d for the clock) %v",
					clk, hist, shm.DataOffset, devs)
			}
			logs := strings.Count(stderr, "cannot be registered with the device")
			wantSummary := "unbound_regions=0 "
			if !tc.kernelMap {
				wantSummary = "unbound_regions=1 "
				if logs != 1 || !strings.Contains(stderr, "mock: hostreg failed") {
					t.Errorf("the refused registration was logged %d times, want once; stderr:\n%s", logs, stderr)
				}
			} else if logs != 0 {
				t.Errorf("an unbound region was logged; stderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, wantSummary) {
				t.Errorf("exit summary lacks %q; stderr:\n%s", wantSummary, stderr)
			}
		})
	}
}
