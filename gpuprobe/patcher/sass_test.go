package patcher

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/gpuprobe/sanpatch"
	"github.com/gpuprobe/gpuprobe/jit"
)

// sassPatcher returns a patcher with kernel_phases for the PTX route and
// user programs for both routes, their device-resident maps mirrored.
func sassPatcher(t *testing.T, user []*jit.Program) *Patcher {
	t.Helper()
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Programs: append(kp, user...), SASSPrograms: user,
		DeviceOnly: probes.KernelPhasesDeviceOnly, DeviceMaps: jit.DeviceResidentMaps(user),
		MirrorPeriod: 10 * time.Millisecond, RingDevice: probes.KernelPhasesRingDevice,
		DeviceOneIn: 4, DeviceMaxPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// regionBinder binds each map of regions (and the clock, as ClockBinding)
// to its region index.
func regionBinder(regions map[string]uint32) Binder {
	return func(name string) (Binding, bool) {
		r, ok := regions[name]
		return Binding{Region: r, Lanes: 1}, ok
	}
}

// TestSASSModule: the answer to an APISASS PATCH is the patch module's
// PTX, NUL-terminated, with kernel_phases' functions, the program's target
// as its one kernel, and one
// descriptor per module global in magic order (descriptor i is the global
// whose initial value is agentwire.SASSMagicBase + i); a device-resident map
// gets a device copy of its region (GlobalDeviceMap, mirror period in µs),
// the clock its region; device sampling is the PTX route's.
func TestSASSModule(t *testing.T) {
	user := gpuPrograms(t, "threadhist")
	p := sassPatcher(t, user)
	regions := map[string]uint32{"thread_runs": 4, "block_threads": 5, ClockBinding: 1}
	a, err := p.SASS(&agentwire.PatchRequest{Arch: 90, API: agentwire.APISASS}, regionBinder(regions))
	if err != nil {
		t.Fatal(err)
	}
	text := string(a.Image)
	if !strings.HasSuffix(text, "\x00") || strings.Count(text, "\x00") != 1 || !strings.HasPrefix(text, ".version ") {
		t.Fatalf("image is not one NUL-terminated PTX module: %.40q", text)
	}
	for _, f := range []string{sanpatch.PhasesEnterFunc, sanpatch.ExitFunc, ".target sm_90\n"} {
		if !strings.Contains(text, f) {
			t.Errorf("module lacks %q", f)
		}
	}
	want := []agentwire.PatchedKernel{{Name: "_Z9vectorAddPKfS0_Pf", ParamIndex: 0}}
	if !reflect.DeepEqual(a.Kernels, want) || a.DeviceOneIn != 4 || a.DeviceMaxPerSecond != 100 {
		t.Errorf("kernels %+v, device sampling 1 in %d, %d/s; want %+v (the program's target, bit 0), 4, 100", a.Kernels, a.DeviceOneIn, a.DeviceMaxPerSecond, want)
	}
	if len(a.Globals) == 0 {
		t.Fatal("no globals")
	}
	devMaps := 0
	for i, g := range a.Globals {
		decl := fmt.Sprintf(".global .align 8 .u64 %s = %d;", g.Name, agentwire.SASSMagicBase+uint64(i))
		if !strings.Contains(text, decl) {
			t.Errorf("global %d (%s): no %q in the module", i, g.Name, decl)
		}
		if g.Kind == agentwire.GlobalDeviceMap {
			devMaps++
			if g.Size != 10000 || (g.Region != 4 && g.Region != 5) {
				t.Errorf("device map global %s: region %d, period %d µs; want 4 or 5, 10000", g.Name, g.Region, g.Size)
			}
		}
	}
	if want := len(jit.DeviceResidentMaps(user)); devMaps < want || want == 0 {
		t.Errorf("%d device-map globals for %d device-resident maps", devMaps, want)
	}
	if _, err := agentwire.MarshalPatched(a); err != nil {
		t.Errorf("the answer does not encode: %v", err)
	}
}

// TestSASSCached: the module of an architecture is built once; another
// architecture gets its own.
func TestSASSCached(t *testing.T) {
	p := sassPatcher(t, gpuPrograms(t, "threadhist"))
	m1, err := p.sassModule(90)
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := p.sassModule(90)
	m3, err := p.sassModule(80)
	if err != nil {
		t.Fatal(err)
	}
	if m1 != m2 || m1 == m3 || !strings.Contains(m3.PTX, ".target sm_80\n") || len(p.sass.mods) != 2 {
		t.Fatalf("cache: same arch same module %v, other arch other module %v, %d cached", m1 == m2, m1 != m3, len(p.sass.mods))
	}
	for a := range uint32(2 * maxSASSModules) {
		p.sassModule(70 + a)
	}
	if n := len(p.sass.mods); n > maxSASSModules {
		t.Fatalf("%d modules cached, over %d", n, maxSASSModules)
	}
}

// TestSASSRefuses: what the SASS route cannot answer is a NOPATCH with a
// code and a message that says why.
func TestSASSRefuses(t *testing.T) {
	user := gpuPrograms(t, "threadhist")
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	perBlock, err := New(Options{Programs: kp, SASSPrograms: kp}) // kernel_phases' kp_block is per-block
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]uint32{"thread_runs": 4, "block_threads": 5}
	for _, tc := range []struct {
		name    string
		p       *Patcher
		arch    uint32
		regions map[string]uint32
		code    agentwire.NoPatchCode
		want    string
	}{
		{"missing region", sassPatcher(t, user), 90, map[string]uint32{"thread_runs": 4}, agentwire.NoPatchError, "map block_threads of program"},
		{"old device", sassPatcher(t, user), 60, all, agentwire.NoPatchError, "sm_60: needs sm_70"},
		{"build error", perBlock, 90, all, agentwire.NoPatchError, `per-block map "kp_block"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.p.SASS(&agentwire.PatchRequest{Arch: tc.arch, API: agentwire.APISASS}, regionBinder(tc.regions))
			var np *agentwire.NoPatch
			if !errors.As(err, &np) || np.Code != tc.code || !strings.Contains(np.Message, tc.want) {
				t.Fatalf("SASS: %v, want NOPATCH %v with %q", err, tc.code, tc.want)
			}
		})
	}
}

// TestSASSPhasesOnly: with no user programs for the route, the answer is
// kernel_phases' patch functions alone (for a device the shim's built-in
// image has no cubin for, e.g. Blackwell): no kernels, no globals.
func TestSASSPhasesOnly(t *testing.T) {
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Programs: kp})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.SASS(&agentwire.PatchRequest{Arch: 100, API: agentwire.APISASS}, regionBinder(nil))
	if err != nil {
		t.Fatal(err)
	}
	text := string(a.Image)
	if len(a.Kernels) != 0 || len(a.Globals) != 0 || !strings.Contains(text, sanpatch.PhasesEnterFunc) ||
		!strings.Contains(text, ".target sm_100\n") {
		t.Fatalf("%d kernels, %d globals, module %.80q: want kernel_phases alone for sm_100", len(a.Kernels), len(a.Globals), text)
	}
}
