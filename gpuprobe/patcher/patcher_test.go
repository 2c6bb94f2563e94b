package patcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
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
	p, err := New(Options{Programs: progs, DeviceOnly: []string{probes.KernelPhasesStartMap},
		MaxThreads: 4096, RingDevice: probes.KernelPhasesRingDevice})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ringBinder binds kp_warps to WELCOME region 2, with a device block.
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
// and the globals say how to bind kp_warps (region 2, its device block)
// and kp_start (one device allocation shared by both programs).
func TestPatchFatbin(t *testing.T) {
	img := build(t, "vectoradd.70-80.fatbin", "-fatbin", "-O3",
		"-gencode", "arch=compute_70,code=compute_70", "-gencode", "arch=compute_80,code=compute_80")
	p := newPatcher(t)
	bind := ringBinder(t)
	tests := []struct {
		arch       uint32
		wantTarget string
		code       agent.NoPatchCode
	}{
		{75, "sm_70", 0},
		{90, "sm_80", 0},
		{80, "sm_80", 0},
		{60, "", agent.NoPatchNoPTX},
	}
	for _, tc := range tests {
		a, err := p.Patch(&agent.PatchRequest{Arch: tc.arch, Image: img}, bind)
		if tc.code != 0 {
			var np *agent.NoPatch
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
func checkKernels(t *testing.T, m *ptxmod.Module, a *agent.Patched) {
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

func checkGlobals(t *testing.T, a *agent.Patched) {
	t.Helper()
	kinds := map[agent.GlobalKind]int{}
	for _, g := range a.Globals {
		kinds[g.Kind]++
		switch {
		case g.Kind == agent.GlobalRegion && g.Region != 2,
			g.Kind == agent.GlobalRingBlock && (g.Region != 2 || len(g.Init) != shm.RingDeviceBlockSize),
			g.Kind == agent.GlobalDeviceAlloc && (g.Region != 0 || g.Size != shm.DataOffset+128*8):
			t.Errorf("global %+v", g)
		case strings.Contains(g.Name, "lanes") && g.Kind == agent.GlobalConst && g.Value != 128:
			t.Errorf("lanes global %s = %d, want 4096/32", g.Name, g.Value)
		}
	}
	// kp_warps in the exit program: base and device block; kp_start in both
	// programs: one allocation each (number 0) plus its lanes.
	if kinds[agent.GlobalRegion] != 1 || kinds[agent.GlobalRingBlock] != 1 || kinds[agent.GlobalDeviceAlloc] != 2 {
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
		code  agent.NoPatchCode
		want  string
	}{
		{"cubin only", cubin, ringBinder(t), agent.NoPatchNoPTX, "no PTX (SASS only)"},
		{"garbage", []byte("\x01\x02\x03\x04garbage"), ringBinder(t), agent.NoPatchError, "unrecognised code image"},
		{"no region for the ring", ptxText, none, agent.NoPatchError, "map kp_warps of program kernel_phases_exit has no region"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Patch(&agent.PatchRequest{Arch: 90, Image: tc.image}, tc.bind)
			var np *agent.NoPatch
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
	a1, err := p.Patch(&agent.PatchRequest{Arch: 90, Image: img}, bind)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := p.Patch(&agent.PatchRequest{Arch: 90, Image: img}, bind)
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
