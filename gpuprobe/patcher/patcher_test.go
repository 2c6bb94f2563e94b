package patcher

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/shm"
)

// build compiles testdata/cuda/inject/vectoradd.cu with nvcc.
func build(t *testing.T, out string, args ...string) []byte {
	t.Helper()
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	b, err := os.ReadFile(fatbintest.Build(t, src, out, args...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newPatcher(t *testing.T) *Patcher {
	t.Helper()
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Programs: progs, DeviceOnly: probes.KernelPhasesDeviceOnly,
		MaxThreads: 4096, RingDevice: probes.KernelPhasesRingDevice, Keys: kpKeys(len(progs))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kpKeys keys n kernel_phases programs as one probe.
func kpKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "probes::kernel_phases"
	}
	return keys
}

// ringBinder binds kp_exec to WELCOME region 2, with a device block.
func ringBinder(t *testing.T) Binder {
	g, err := shm.CreateRing(80, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return func(name string) (Binding, bool) {
		if name != probes.KernelPhasesRingMap {
			return Binding{}, false
		}
		return Binding{Region: 2, Lanes: 1, RingBlock: g.DeviceBlock()}, true
	}
}

// TestPatchFatbin patches a fatbin with PTX for two architectures: the
// entry of the highest architecture not above the device's is chosen, the
// result assembles for the device, every kernel gets its launch parameter
// and the globals say how to bind kp_exec (region 2, its device block)
// and kp_table (one device allocation shared by both programs).
func TestPatchFatbin(t *testing.T) {
	img := build(t, "vectoradd.70-80.fatbin", "-fatbin", "-O3",
		"-gencode", "arch=compute_70,code=compute_70", "-gencode", "arch=compute_80,code=compute_80")
	p := newPatcher(t)
	bind := ringBinder(t)
	tests := []struct {
		arch       uint32
		wantTarget string
		code       agentwire.NoPatchCode
	}{
		{75, "sm_70", 0},
		{90, "sm_80", 0},
		{80, "sm_80", 0},
		{60, "", agentwire.NoPatchNoPTX},
	}
	for _, tc := range tests {
		a, err := p.Patch(&agentwire.PatchRequest{Arch: tc.arch, Image: img}, bind)
		if tc.code != 0 {
			var np *agentwire.NoPatch
			if !errors.As(err, &np) || np.Code != tc.code || !strings.Contains(np.Message, "sm_70, sm_80") {
				t.Fatalf("sm_%d: got %v, want NOPATCH %v listing the archs", tc.arch, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Fatalf("sm_%d: %v", tc.arch, err)
		}
		if n := len(a.Image); n == 0 || a.Image[n-1] != 0 {
			t.Fatalf("sm_%d: image is not NUL-terminated", tc.arch)
		}
		text := a.Image[:len(a.Image)-1]
		m, err := ptxmod.Parse(text)
		if err != nil {
			t.Fatalf("sm_%d: patched PTX does not parse: %v", tc.arch, err)
		}
		if len(m.Target) == 0 || m.Target[0] != tc.wantTarget {
			t.Errorf("sm_%d: .target %q, want %q (the chosen entry's)", tc.arch, m.Target, tc.wantTarget)
		}
		if _, err := ptx.Assemble(context.Background(), string(text), "sm_80"); err != nil {
			t.Fatalf("sm_%d: ptxas: %v", tc.arch, err)
		}
		checkKernels(t, m, a)
		checkGlobals(t, a)
	}
}

// checkKernels: every kernel of the module is patched, and its launch
// parameter is its last parameter.
func checkKernels(t *testing.T, m *ptxmod.Module, a *agentwire.Patched) {
	t.Helper()
	var kernels []*ptxmod.Func
	for _, f := range m.Funcs {
		if f.Entry && f.HasBody {
			kernels = append(kernels, f)
		}
	}
	if len(a.Kernels) != len(kernels) || len(kernels) == 0 {
		t.Fatalf("%d kernels patched, module has %d", len(a.Kernels), len(kernels))
	}
	for i, k := range a.Kernels {
		f := kernels[i]
		if f.Name != k.Name || int(k.ParamIndex) != len(f.Params)-1 || f.Params[k.ParamIndex].Name != inject.LaunchParamName {
			t.Errorf("kernel %d: %+v; module kernel %s has %d params", i, k, f.Name, len(f.Params))
		}
		if k.ParamOffset%8 != 0 || k.ParamOffset < 8*(k.ParamIndex-1) {
			t.Errorf("kernel %s: launch id at byte %d for %d parameters", k.Name, k.ParamOffset, k.ParamIndex)
		}
	}
}

func checkGlobals(t *testing.T, a *agentwire.Patched) {
	t.Helper()
	kinds := map[agentwire.GlobalKind]int{}
	for _, g := range a.Globals {
		kinds[g.Kind]++
		switch {
		case g.Kind == agentwire.GlobalRegion && g.Region != 2,
			g.Kind == agentwire.GlobalRingBlock && (g.Region != 2 || len(g.Init) != shm.RingDeviceBlockSize),
			g.Kind == agentwire.GlobalDeviceAlloc && (g.Region != 0 || g.Size != shm.DataOffset+256*65*32):
			t.Errorf("global %+v", g)
		case strings.Contains(g.Name, "kp_block"):
			t.Errorf("global %s: the shared-memory map needs no binding", g.Name)
		}
	}
	// kp_exec and kp_table in the exit program (the entry program keeps to
	// shared memory): base and device block, and one allocation (number
	// 0).
	if kinds[agentwire.GlobalRegion] != 1 || kinds[agentwire.GlobalRingBlock] != 1 || kinds[agentwire.GlobalDeviceAlloc] != 1 {
		t.Errorf("globals by kind %v: %+v", kinds, a.Globals)
	}
}

func TestPatchErrors(t *testing.T) {
	p := newPatcher(t)
	cubin := build(t, "vectoradd.sm_80.cubin", "-cubin", "-O3", "-arch", "sm_80")
	ptxText := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	none := func(string) (Binding, bool) { return Binding{}, false }
	tests := []struct {
		name  string
		image []byte
		bind  Binder
		code  agentwire.NoPatchCode
		want  string
	}{
		{"cubin only", cubin, ringBinder(t), agentwire.NoPatchNoPTX, "no PTX (SASS only)"},
		{"garbage", []byte("\x01\x02\x03\x04garbage"), ringBinder(t), agentwire.NoPatchError, "unrecognised code image"},
		{"no region for the ring", ptxText, none, agentwire.NoPatchError, "map kp_exec of program kernel_phases_exit has no region"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: tc.image}, tc.bind)
			var np *agentwire.NoPatch
			if !errors.As(err, &np) || np.Code != tc.code || !strings.Contains(np.Message, tc.want) {
				t.Fatalf("got %v, want NOPATCH %v with %q", err, tc.code, tc.want)
			}
		})
	}
}

// TestPatchCached: the second request for the same image and device is
// served from the injection cache with the same answer.
func TestPatchCached(t *testing.T) {
	p := newPatcher(t)
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	bind := ringBinder(t)
	a1, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, bind)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, bind)
	if err != nil {
		t.Fatal(err)
	}
	if string(a1.Image) != string(a2.Image) || len(a1.Globals) != len(a2.Globals) {
		t.Fatal("cached answer differs")
	}
	if st := p.CacheStats(); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("cache stats %+v, want 1 hit 1 miss", st)
	}
}

// TestPatchDeviceSampling: with DeviceOneIn > 1 or DeviceMaxPerSecond > 0
// the answer carries them and the kernels are patched to skip every probe
// site in a launch whose id is 0; with 1 and 0 neither.
func TestPatchDeviceSampling(t *testing.T) {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	for _, tc := range []struct{ oneIn, rate uint32 }{{1, 0}, {8, 0}, {1, 100}, {4, 100}} {
		p, err := New(Options{Programs: progs, DeviceOnly: probes.KernelPhasesDeviceOnly, MaxThreads: 4096,
			RingDevice: probes.KernelPhasesRingDevice, DeviceOneIn: tc.oneIn, DeviceMaxPerSecond: tc.rate})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, ringBinder(t))
		if err != nil {
			t.Fatal(err)
		}
		guarded := strings.Contains(string(a.Image), "setp.eq.u64 %gpuprobe_noid, %gpuprobe_lid, 0;")
		if a.DeviceOneIn != tc.oneIn || a.DeviceMaxPerSecond != tc.rate || guarded != (tc.oneIn > 1 || tc.rate > 0) {
			t.Errorf("device_one_in %d, device_max_per_second %d: answer's %d and %d, launch-id guard %v",
				tc.oneIn, tc.rate, a.DeviceOneIn, a.DeviceMaxPerSecond, guarded)
		}
	}
}

// launchlate builds testdata/bpf/launchlate.c with clang and returns its GPU
// program (it reads the kernel map launch_clock and calls
// bpf_ktime_get_ns).
func launchlate(t *testing.T) []*jit.Program {
	t.Helper()
	gpu := gpuPrograms(t, "launchlate")
	if len(gpu) != 1 {
		t.Fatalf("launchlate has %d GPU programs, want 1", len(gpu))
	}
	return gpu
}

// gpuPrograms builds testdata/bpf/NAME.c with clang and returns its GPU
// programs.
func gpuPrograms(t *testing.T, name string) []*jit.Program {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/%s.c: %v", name, err)
	}
	obj := filepath.Join(t.TempDir(), name+".o")
	src := filepath.Join("..", "..", "testdata", "bpf", name+".c")
	if out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../../jit/include", "-c", src, "-o", obj).CombinedOutput(); err != nil {
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

// TestPatchDeviceMaps: with a program's GPU maps in Options.DeviceMaps,
// their globals ask the shim for a device copy of their region, mirrored
// every MirrorPeriod (agentwire.GlobalDeviceMap, Size in µs); the ring is
// written by the warp-aggregated device producer; a kernel map shared
// with host programs stays a host region; the result assembles.
func TestPatchDeviceMaps(t *testing.T) {
	progs := append(launchlate(t), gpuPrograms(t, "kernelretsnoop")...)
	dev := jit.DeviceResidentMaps(progs)
	if !reflect.DeepEqual(dev, []string{"delay_log2_ns", "exits"}) {
		t.Fatalf("DeviceResidentMaps = %v", dev)
	}
	p, err := New(Options{Programs: progs, DeviceMaps: dev, MirrorPeriod: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	regions := map[string]uint32{"launch_clock": 3, "delay_log2_ns": 5, "exits": 6}
	a, err := p.Patch(&agentwire.PatchRequest{Arch: 80, Image: img}, func(name string) (Binding, bool) {
		r, ok := regions[name]
		return Binding{Region: r, Lanes: 1}, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]agentwire.PatchedGlobal{
		"_map_launch_clock":  {Kind: agentwire.GlobalRegion, Region: 3},
		"_map_delay_log2_ns": {Kind: agentwire.GlobalDeviceMap, Region: 5, Size: 10000},
		"_map_exits":         {Kind: agentwire.GlobalDeviceMap, Region: 6, Size: 10000},
	}
	got := map[string]agentwire.PatchedGlobal{}
	for _, g := range a.Globals {
		for suffix := range want {
			if strings.HasSuffix(g.Name, suffix) {
				g.Name = ""
				got[suffix] = g
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("globals %+v, want %+v (all: %+v)", got, want, a.Globals)
	}
	if text := string(a.Image); !strings.Contains(text, "_ringreservewarp") || strings.Contains(text, "_ringout(") {
		t.Error("the ring in device memory is not written by the warp-aggregated producer")
	}
	if _, err := ptx.Assemble(context.Background(), string(a.Image[:len(a.Image)-1]), "sm_80"); err != nil {
		t.Fatalf("ptxas: %v", err)
	}
}

// TestPatchKernelMapAndClock binds launchlate's globals: the kernel map
// launch_clock to its RoleKernelMap region (no header: value 0), the clock
// global to the RoleClock region's first value (value shm.DataOffset); a
// client without them gets 0 for both (the map is absent on the GPU and
// bpf_ktime_get_ns is %globaltimer), while a missing region for an
// ordinary map still refuses the patch.
func TestPatchKernelMapAndClock(t *testing.T) {
	p, err := New(Options{Programs: launchlate(t)})
	if err != nil {
		t.Fatal(err)
	}
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	binder := func(regions map[string]uint32) Binder {
		return func(name string) (Binding, bool) {
			r, ok := regions[name]
			return Binding{Region: r, Lanes: 1}, ok
		}
	}
	region := func(i uint32, v uint64) agentwire.PatchedGlobal {
		return agentwire.PatchedGlobal{Kind: agentwire.GlobalRegion, Region: i, Value: v}
	}
	zero := agentwire.PatchedGlobal{Kind: agentwire.GlobalConst}
	tests := []struct {
		name    string
		regions map[string]uint32
		want    map[string]agentwire.PatchedGlobal // global name suffix → binding
		wantErr string
	}{
		{"all bound", map[string]uint32{"launch_clock": 3, ClockBinding: 4, "delay_log2_ns": 5},
			map[string]agentwire.PatchedGlobal{"_map_launch_clock": region(3, 0), "_clock": region(4, shm.DataOffset), "_map_delay_log2_ns": region(5, 0)}, ""},
		{"no kernel map, no clock", map[string]uint32{"delay_log2_ns": 1},
			map[string]agentwire.PatchedGlobal{"_map_launch_clock": zero, "_clock": zero, "_map_delay_log2_ns": region(1, 0)}, ""},
		{"no region for a GPU array", map[string]uint32{"launch_clock": 3, ClockBinding: 4}, nil,
			"map delay_log2_ns of program launch_gpu has no region"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := p.Patch(&agentwire.PatchRequest{Arch: 80, Image: img}, binder(tc.regions))
			if tc.wantErr != "" {
				var np *agentwire.NoPatch
				if !errors.As(err, &np) || !strings.Contains(np.Message, tc.wantErr) {
					t.Fatalf("got %v, want NOPATCH with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]agentwire.PatchedGlobal{}
			for _, g := range a.Globals {
				for suffix := range tc.want {
					if strings.HasSuffix(g.Name, "launch_gpu"+suffix) {
						g.Name = ""
						got[suffix] = g
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("globals %+v, want %+v (all: %+v)", got, tc.want, a.Globals)
			}
			if _, err := ptx.Assemble(context.Background(), string(a.Image[:len(a.Image)-1]), "sm_80"); err != nil {
				t.Fatalf("ptxas: %v", err)
			}
		})
	}
}

// TestReplacedSASS: a module whose SASS for the device is better than its
// PTX (arch-specific, or the PTX is older) is not patched: cuBLAS picked
// other GEMM kernels on an H200 when its sm_90a detection kernel was
// replaced by JIT-compiled compute_90 PTX.
func TestReplacedSASS(t *testing.T) {
	ptx := func(a uint32, spec bool) *fatbin.Entry {
		return &fatbin.Entry{Kind: fatbin.KindPTX, Arch: a, ArchSpecific: spec}
	}
	sass := func(a uint32, spec bool) *fatbin.Entry {
		return &fatbin.Entry{Kind: fatbin.KindELF, Arch: a, ArchSpecific: spec}
	}
	tests := []struct {
		name    string
		entries []*fatbin.Entry
		ptx     *fatbin.Entry
		want    string // the replaced entry's arch name, "" for none
	}{
		{"PTX only", nil, ptx(90, false), ""},
		{"sm_90 SASS and compute_90 PTX", []*fatbin.Entry{sass(90, false)}, ptx(90, false), ""},
		{"sm_90a SASS and compute_90 PTX", []*fatbin.Entry{sass(90, false), sass(90, true)}, ptx(90, false), "sm_90a"},
		{"sm_90a SASS and compute_90a PTX", []*fatbin.Entry{sass(90, true)}, ptx(90, true), ""},
		{"sm_90 SASS and compute_80 PTX", []*fatbin.Entry{sass(80, false), sass(90, false)}, ptx(80, false), "sm_90"},
		{"SASS for another device only", []*fatbin.Entry{sass(80, false), sass(100, false)}, ptx(80, false), ""},
	}
	for _, tt := range tests {
		name := ""
		if got := replacedSASS(tt.entries, tt.ptx, 90); got != nil {
			name = got.ArchName()
		}
		if name != tt.want {
			t.Errorf("%s: replaced %q, want %q", tt.name, name, tt.want)
		}
	}
}

// TestPatchKeepsNewerSASS: nvcc's real fatbin with sm_90 SASS and only
// compute_80 PTX is answered NOPATCH for an sm_90 device, naming both.
func TestPatchKeepsNewerSASS(t *testing.T) {
	b := build(t, "vectoradd.80-90.fatbin", "-fatbin", "-gencode", "arch=compute_80,code=compute_80", "-gencode", "arch=compute_90,code=sm_90")
	_, err := SelectPTX(b, 90)
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || !strings.Contains(np.Message, "sm_90 SASS") || !strings.Contains(np.Message, "sm_80") {
		t.Fatalf("SelectPTX = %v, want NOPATCH naming the sm_90 SASS and the sm_80 PTX", err)
	}
	if _, err := SelectPTX(b, 86); err != nil {
		t.Fatalf("SelectPTX for sm_86 (no SASS of its own) = %v, want the compute_80 PTX", err)
	}
}
