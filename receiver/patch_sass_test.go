package receiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"go.uber.org/zap"
)

// buildBPF compiles testdata/bpf/<name>.c with clang (required).
func buildBPF(t *testing.T, name string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/%s.c: %v", name, err)
	}
	out := filepath.Join(t.TempDir(), name+".o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
		"-I", "../jit/include", "-c", "../testdata/bpf/"+name+".c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s.c: %v\n%s", name, err, b)
	}
	return out
}

// TestPatchSASSModule: with probes::sass on, a client that asks for the
// SASS route's patch module (PATCH, API 3, no image) through the real
// agent socket gets PTX with kernel_phases' and the user program's patch
// functions, no kernels, and globals that bind the program's maps to the
// client's own regions; it is counted as patched.
func TestPatchSASSModule(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases, cfg.Probes.SASS = true, true
	cfg.Programs = []config.ProgramConfig{{Path: buildBPF(t, "threadhist")}}
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APISASS}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	text := string(a.Image)
	if len(a.Kernels) != 1 || !strings.HasSuffix(text, "\x00") || !strings.Contains(text, "__gpuprobe_kp_enter") ||
		!strings.Contains(text, "__gpuprobe_sp_exit") {
		t.Fatalf("not the SASS route's module: %d kernels, %d bytes", len(a.Kernels), len(text))
	}
	bound := map[string]bool{}
	for _, g := range a.Globals {
		if g.Kind != agentwire.GlobalRegion && g.Kind != agentwire.GlobalDeviceMap {
			continue
		}
		if int(g.Region) >= len(sess.Regions) {
			t.Fatalf("global %s: region %d of %d", g.Name, g.Region, len(sess.Regions))
		}
		bound[sess.Regions[g.Region].Name] = true
	}
	for _, m := range []string{"thread_runs", "block_threads"} {
		if !bound[m] {
			t.Errorf("no global binds map %s's region (globals %+v)", m, a.Globals)
		}
	}
	if p, f := r.patch.patched.Load(), r.patch.failed.Load(); p != 1 || f != 0 {
		t.Fatalf("modules patched %d, failures %d; want 1 and 0", p, f)
	}
	if st := r.settings(); st.Flags&(agentwire.SettingSASS|agentwire.SettingSASSPrograms) != agentwire.SettingSASS|agentwire.SettingSASSPrograms {
		t.Errorf("WELCOME settings %+v: want SASS with SASSPrograms (the shim asks for the module only then)", st)
	}
}

// TestPatchSASSOff: with probes::sass off, a request for the SASS route's
// module is answered "disabled", whatever the patcher could build; with it
// on and no user programs it is kernel_phases' module alone.
func TestPatchSASSOff(t *testing.T) {
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	p, err := patcher.New(patcher.Options{Programs: kp, SASSPrograms: kp})
	if err != nil {
		t.Fatal(err)
	}
	r := &gpuReceiver{cfg: testConfig(t).Own(), log: zap.NewNop()}
	r.patch.patcher = p
	_, err = r.onPatch(&agent.Peer{PID: 1}, &agentwire.PatchRequest{Arch: 90, API: agentwire.APISASS})
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || np.Code != agentwire.NoPatchDisabled || !strings.Contains(np.Message, "probes::sass") {
		t.Fatalf("onPatch: %v, want NOPATCH disabled naming probes::sass", err)
	}

	// On, but no user programs: kernel_phases alone (for a device the
	// shim's built-in image has no cubin for), counted as patched.
	p, err = patcher.New(patcher.Options{Programs: kp})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Probes.KernelPhases, r.cfg.Probes.SASS = true, true
	r.patch.patcher = p
	r.srcs.bySess = map[uint32]*source{0: {}}
	a, err := r.onPatch(&agent.Peer{PID: 1}, &agentwire.PatchRequest{Arch: 100, API: agentwire.APISASS})
	if err != nil || len(a.Globals) != 0 || r.patch.patched.Load() != 1 || r.patch.failed.Load() != 0 {
		t.Fatalf("onPatch: %v (%d patched, %d failures), want kernel_phases' module alone", err, r.patch.patched.Load(), r.patch.failed.Load())
	}
	if st := r.settings(); st.Flags&agentwire.SettingSASS == 0 || st.Flags&agentwire.SettingSASSPrograms != 0 {
		t.Errorf("WELCOME settings %+v: want SASS without SASSPrograms", st)
	}
}

// TestPatchSASSKernels: with kernels::include/exclude set, the WELCOME asks
// the shim to query the SASS route's kernels, and a query through the real
// agent socket (PATCH, API 4) names the kernels the route may probe, by
// mangled or demangled name, with sampling::device_one_in; a malformed
// query is refused naming its offset.
func TestPatchSASSKernels(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases, cfg.Probes.SASS = true, true
	cfg.Kernels = config.KernelsConfig{Include: []string{"gemm", "^at::native::"}, Exclude: []string{"warmup"}}
	cfg.Sampling.DeviceOneIn = 4
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r
	if st := r.settings(); st.Flags&agentwire.SettingSASSFilter == 0 {
		t.Errorf("WELCOME settings %+v: want SASSFilter (kernels::include/exclude set)", st)
	}

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	query := "sgemm_large\x00sgemm_warmup\x00_ZN2at6native13reduce_kernelEv\x00elementwise\x00"
	a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APISASSKernels, Image: []byte(query)}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range a.Kernels {
		got = append(got, fmt.Sprintf("%d:%s", k.ParamIndex, k.Name))
	}
	if want := "0:sgemm_large 2:_ZN2at6native13reduce_kernelEv"; strings.Join(got, " ") != want || a.DeviceOneIn != 4 || len(a.Image) != 0 {
		t.Errorf("answer kernels %q, device_one_in %d, %d image bytes; want %q, 4, 0", got, a.DeviceOneIn, len(a.Image), want)
	}
	_, err = sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APISASSKernels, Image: []byte("ok\x00cut")}, 10*time.Second)
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || !strings.Contains(np.Message, "image offset 3 has no terminating NUL") {
		t.Errorf("malformed query: %v, want NOPATCH naming offset 3", err)
	}

	// No filter and every launch probed: the shim need not ask.
	plain := testConfig(t)
	plain.Probes.KernelPhases, plain.Probes.SASS = true, true
	if st := (&gpuReceiver{cfg: plain.Own()}).settings(); st.Flags&agentwire.SettingSASS == 0 || st.Flags&agentwire.SettingSASSFilter != 0 {
		t.Errorf("WELCOME settings %+v: SASSFilter without a filter", st)
	}
}
