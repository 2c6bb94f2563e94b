package receiver

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/hostprobetest"
)

// vectorAddPTX is a module with one kernel that launchlate's GPU half
// targets (kprobe/vectorAdd matches the demangled name).
const vectorAddPTX = `.version 7.8
.target sm_90
.address_size 64

.visible .entry _Z9vectorAddPKfS0_Pf(
	.param .u64 a,
	.param .u64 b,
	.param .u64 c
)
{
	ret;
}
`

// TestSharedKernelMap runs the receiver with launchlate.o, whose uprobe
// and GPU probe share launch_clock (a BPF_F_MMAPABLE kernel array): the
// uprobe is loaded into Linux, every client gets the map's fd (role 5,
// no header) and a clock region (role 6); a PATCH injects only the GPU
// half (the host program is not compiled) and binds its map and clock
// globals to those regions; a value written through the kernel map is seen
// in the client's mapping.
func TestSharedKernelMap(t *testing.T) {
	hostprobetest.RequireRoot(t)
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	obj := filepath.Join("..", "testdata", "bpf", "launchlate.o")
	if _, err := os.Stat(obj); err != nil {
		t.Fatalf("%v (build it with make -f testdata/bpf/bpf.mk)", err)
	}
	cfg.Programs = []config.ProgramConfig{{Path: obj}}
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r
	if len(r.host.sets) != 1 || len(r.host.sets[0].SharedMaps()) != 1 {
		t.Fatalf("launchlate's host program was not loaded with one shared map: %d sets", len(r.host.sets))
	}

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	kmap, clk := -1, -1
	for i, reg := range sess.Regions {
		switch {
		case reg.Role == agentwire.RoleKernelMap && reg.Name == "launch_clock":
			kmap = i
		case reg.Role == agentwire.RoleClock:
			clk = i
		}
	}
	if kmap < 0 || clk < 0 {
		t.Fatalf("WELCOME lacks the kernel map (%d) or the clock region (%d): %+v", kmap, clk, sess.Regions)
	}

	// The kernel map is the same memory as the client's mapping.
	m := r.host.sets[0].SharedMaps()[0].Map
	if err := m.Update(uint32(0), uint64(0xc10c4), 0); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(sess.Regions[kmap].Raw); v != 0xc10c4 {
		t.Fatalf("client mapping reads %#x, want the kernel map's 0xc10c4", v)
	}

	a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: []byte(vectorAddPTX)}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Kernels) != 1 {
		t.Fatalf("patched %d kernels, want 1", len(a.Kernels))
	}
	bound := map[uint32]bool{}
	for _, g := range a.Globals {
		if g.Kind == agentwire.GlobalRegion {
			bound[g.Region] = true
		}
	}
	if !bound[uint32(kmap)] || !bound[uint32(clk)] {
		t.Fatalf("globals %+v do not bind the kernel map (region %d) and the clock (region %d)", a.Globals, kmap, clk)
	}
}
