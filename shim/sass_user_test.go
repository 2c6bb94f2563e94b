package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// userModulePTX is a patch module as the collector sends it for the SASS
// route (gpuprobe/sanpatch with kernel_phases included): the built-in
// image's three globals under their magics, and two globals of its own,
// magics 0x4750534700000000 + index, each read so that ptxas keeps it.
func userModulePTX() string {
	const phase, user = 0x4750535053435230, 0x4750534700000000
	return fmt.Sprintf(`.version 7.8
.target sm_90
.address_size 64
.global .align 8 .u64 __gpuprobe_kp_scratch = %d;
.global .align 8 .u64 __gpuprobe_kp_table = %d;
.global .align 8 .u64 __gpuprobe_kp_ring = %d;
.global .align 8 .u64 gpuprobe_sp0_arr = %d;
.global .align 8 .u64 gpuprobe_sp0_lanes = %d;
.visible .func (.param .b32 __r) __gpuprobe_sp_enter(.param .b64 __ud, .param .b64 __pc)
{
	.reg .b64 %%a<6>;
	ld.global.u64 %%a1, [__gpuprobe_kp_scratch];
	ld.global.u64 %%a2, [__gpuprobe_kp_table];
	ld.global.u64 %%a3, [__gpuprobe_kp_ring];
	ld.global.u64 %%a4, [gpuprobe_sp0_arr];
	ld.global.u64 %%a5, [gpuprobe_sp0_lanes];
	add.u64 %%a1, %%a1, %%a2;
	add.u64 %%a1, %%a1, %%a3;
	add.u64 %%a1, %%a1, %%a5;
	st.global.u64 [%%a4], %%a1;
	st.param.b32 [__r], 0;
	ret;
}
.visible .func (.param .b32 __r) __gpuprobe_sp_exit(.param .b64 __ud, .param .b64 __pc)
{
	st.param.b32 [__r], 0;
	ret;
}
`, phase, phase+1, phase+2, user, user+1)
}

// startSASSUserAgent is a collector with GPU programs for the SASS route:
// WELCOME offers the launch ring and an array map (region 1) and says so
// (SettingSASSPrograms, unless programs is false); a PATCH with APISASS
// gets module, programs 0
// and 5 probing vecAdd (by base and mangled name), 3 gemm*, its first
// global bound to the array's region, its second a constant.
func startSASSUserAgent(t *testing.T, module string, programs bool) *testAgent {
	t.Helper()
	arr, err := shm.CreateArray(shm.KindArray, 8, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &testAgent{path: filepath.Join(t.TempDir(), "agent.sock")}
	opts := sassOn(0)
	opts.Path = a.path
	if programs {
		opts.Settings.Flags |= agentwire.SettingSASSPrograms
	}
	srv, err := agent.Listen(opts, agent.Callbacks{
		Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
			launches, err := newRing()
			if err != nil {
				return nil, err
			}
			a.mu.Lock()
			a.sessions = append(a.sessions, &session{peer: p, ring: launches})
			a.mu.Unlock()
			return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: launches.Region()},
				{Role: agentwire.RoleMap, Name: "arr", Region: arr.Region()}}, nil
		},
		Disconnect: func(*agent.Peer) {
			a.mu.Lock()
			a.gone++
			a.mu.Unlock()
		},
		Patch: func(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
			if req.API != agentwire.APISASS || req.Arch != 90 || len(req.Image) != 0 {
				return nil, &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: fmt.Sprintf("want an APISASS request for sm_90, got %+v", req)}
			}
			return &agentwire.Patched{Image: append([]byte(module), 0), Kernels: []agentwire.PatchedKernel{
				{Name: "vecAdd", ParamIndex: 0}, {Name: "gemm*", ParamIndex: 3}, {Name: "_Z6vecAddPfS_S_i", ParamIndex: 5},
			}, Globals: []agentwire.PatchedGlobal{
				{Name: "gpuprobe_sp0_arr", Kind: agentwire.GlobalRegion, Region: 1, Value: shm.DataOffset},
				{Name: "gpuprobe_sp0_lanes", Kind: agentwire.GlobalConst, Value: 7},
			}}, nil
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
		arr.Close()
	})
	return a
}

// TestSASSUserModule: a collector with GPU programs for the SASS route
// sends their patch module; the shim assembles it with ptxas (tools
// patch), binds its globals (a region's device address, a constant) and
// kernel_phases' in the cubin, and patches the kernels with its functions;
// a sampled launch's userdata carries the bits of the programs whose
// target names its kernel.
// Every launch still gets its window. A second process takes the cubin
// from the cache; a ptxas that fails leaves the built-in image.
func TestSASSUserModule(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed to assemble the patch module (Debian's nvidia-cuda-toolkit): %v", err)
	}
	b := binaries(t)
	cache := t.TempDir()
	for _, tc := range []struct {
		name, ptxas, counts, trace string
	}{
		{"assembled", ptxas, "added=0 added_user=1 ", "assembled"},
		{"cached", "/bin/false", "added=0 added_user=1 ", "from the cache"},
		{"ptxas fails", "/bin/false", "added=1 added_user=0 ", "kernel_phases' window only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := cache
			if tc.name == "ptxas fails" {
				dir = t.TempDir()
			}
			trace := filepath.Join(t.TempDir(), "trace.txt")
			st, counts := runSASSWith(t, startSASSUserAgent(t, userModulePTX(), true), b.app, "cudart", "slow", "60",
				"GPUPROBE_PTXAS="+tc.ptxas, "GPUPROBE_CACHE_DIR="+dir, "GPUPROBE_TRACE="+trace)
			if !strings.Contains(counts, tc.counts) || !strings.Contains(counts, "bad_image=0") {
				t.Errorf("MOCK Sanitizer counts %q: want %q and no image with a magic left", counts, tc.counts)
			}
			tr, _ := os.ReadFile(trace)
			if !strings.Contains(string(tr), tc.trace) {
				t.Errorf("trace lacks %q:\n%s", tc.trace, tr)
			}
			if tc.counts == "added=0 added_user=1 " {
				if !strings.Contains(counts, "user_patches=") || strings.Contains(counts, "user_patches=0 ") {
					t.Errorf("MOCK Sanitizer counts %q: no module patched with the collector's functions", counts)
				}
				m := regexp.MustCompile(`global gpuprobe_sp0_arr \(kind 1\) = 0x([0-9a-f]+)`).FindSubmatch(tr)
				if m == nil || string(m[1]) == "0" {
					t.Errorf("the region global was not bound to a device address:\n%s", tr)
				}
				if !strings.Contains(string(tr), "global gpuprobe_sp0_lanes (kind 2) = 0x7") {
					t.Errorf("the constant global was not bound to 7:\n%s", tr)
				}
				// Only vecAdd runs (slow): programs 0 and 5 in every
				// sampled launch, never 3.
				if !strings.Contains(counts, "bits=0x21") || strings.Contains(counts, "targeted=0 ") {
					t.Errorf("MOCK Sanitizer counts %q: want launches with program bits 0 and 5 only", counts)
				}
			}
			if sampled := sampledTimed(t, st); sampled < 5 {
				t.Errorf("%d of %d launches sampled", sampled, len(st.launches))
			}
		})
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "sass-*.cubin")); len(m) != 1 {
		t.Errorf("cache holds %v, want one cubin", m)
	}
}

// TestSASSBuiltinRefused: a device the built-in image has no cubin for
// (Blackwell; here an image that cannot be bound, GPUPROBE_SASS_IMAGE)
// gets the collector's module instead, assembled for the device, even
// from a collector with no programs for the route (kernel_phases alone):
// its launches still get their windows.
func TestSASSBuiltinRefused(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed to assemble the patch module (Debian's nvidia-cuda-toolkit): %v", err)
	}
	bogus := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(bogus, []byte("no cubin for this device"), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "trace.txt")
	st, counts := runSASSWith(t, startSASSUserAgent(t, userModulePTX(), false), binaries(t).app, "cudart", "slow", "60",
		"GPUPROBE_SASS_IMAGE="+bogus, "GPUPROBE_PTXAS="+ptxas, "GPUPROBE_CACHE_DIR="+t.TempDir(), "GPUPROBE_TRACE="+trace)
	if !strings.Contains(counts, "added=0 added_user=1 ") || !strings.Contains(counts, "bad_image=0") {
		t.Errorf("MOCK Sanitizer counts %q: want the collector's module added, no image with a magic left", counts)
	}
	if tr, _ := os.ReadFile(trace); !strings.Contains(string(tr), "asking the collector for kernel_phases' module") {
		t.Errorf("trace does not say why it asked:\n%s", tr)
	}
	if sampled := sampledTimed(t, st); sampled < 5 {
		t.Errorf("%d of %d launches sampled", sampled, len(st.launches))
	}
}

// sampledTimed returns how many launches were flagged SASS, each of which
// must have its Exec record; with every launch sampled, those before the
// image is bound are not (ptxas may take a while on a loaded machine) and
// every one after the first sampled is.
func sampledTimed(t *testing.T, st *stream) int {
	t.Helper()
	timed := map[uint64]bool{}
	for _, e := range st.execs {
		timed[e.LaunchID] = true
	}
	sampled := 0
	for _, l := range st.launches {
		if l.Flags&record.LaunchSASS != 0 {
			sampled++
			if !timed[l.LaunchID] {
				t.Errorf("launch %d: flagged SASS, no Exec record", l.LaunchID)
			}
		} else if sampled > 0 {
			t.Errorf("launch %d: not sampled after the image was bound", l.LaunchID)
		}
	}
	return sampled
}
