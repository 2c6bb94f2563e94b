package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestPatchAndWarpRing drives the patching path end to end without a GPU:
// a client dials the real agent socket, gets a kernel_phases ring (role 3,
// kp_warps), sends a PTX image and gets it back patched with globals bound
// to that ring; warp records written into the ring (as the patched kernel
// would) reach the launch's span; a bad image is counted as a failure.
func TestPatchAndWarpRing(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = true
	tr, mr, traces, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	warpIdx := -1
	for i, reg := range sess.Regions {
		if reg.Role == agentwire.RoleMap && reg.Name == probes.KernelPhasesRingMap {
			warpIdx = i
		}
	}
	if warpIdx < 0 {
		t.Fatalf("no %s region in WELCOME: %+v", probes.KernelPhasesRingMap, sess.Regions)
	}

	img, err := os.ReadFile(filepath.Join("..", "testdata", "cuda", "inject", "exits.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: img}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Kernels) == 0 || !strings.Contains(string(a.Image), "__gpuprobe_launch_id") {
		t.Fatalf("not patched: %d kernels", len(a.Kernels))
	}
	var region, block bool
	for _, g := range a.Globals {
		switch g.Kind {
		case agentwire.GlobalRegion:
			region = int(g.Region) == warpIdx
		case agentwire.GlobalRingBlock:
			block = int(g.Region) == warpIdx && len(g.Init) == shm.RingDeviceBlockSize
		}
	}
	if !region || !block {
		t.Fatalf("globals do not bind region %d (kp_exec): %+v", warpIdx, a.Globals)
	}
	_, err = sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: []byte("not an image at all")}, 30*time.Second)
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || np.Code != agentwire.NoPatchError {
		t.Fatalf("bad image: %v", err)
	}
	if p, f := r.patch.patched.Load(), r.patch.failed.Load(); p != 1 || f != 1 {
		t.Fatalf("modules patched %d, failures %d; want 1 and 1", p, f)
	}

	// 2 blocks of 64 threads: 4 warps.
	launches, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	warps, err := shm.NewRing(sess.Regions[warpIdx].Region)
	if err != nil {
		t.Fatal(err)
	}
	now := monoNow(t)
	l := &record.Launch{LaunchID: 9, PID: uint32(os.Getpid()), EnqueueNS: now, ReturnNS: now + 100, Function: 1,
		Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{64, 1, 1}}
	if res := launches.Produce(uint32(record.TypeLaunch), l.Append(nil)); res != shm.Published {
		t.Fatal(res)
	}
	for i := range uint32(4) {
		w := &record.Warp{LaunchID: 9, Block: [3]uint32{i / 2, 0, 0}, Warp: i % 2, ActiveMask: ^uint32(0),
			StartNS: now + 1000, MinExitNS: now + 2000, EndNS: now + 2500}
		if res := warps.Produce(uint32(record.TypeWarp), w.Append(nil)); res != shm.Published {
			t.Fatal(res)
		}
	}
	// A poll reads the launch ring before the warps ring: the completion
	// may only be written once a poll has handled the launch and every
	// warp (the consumer stores its tail after handling what it read).
	waitFor(t, "the launch and the warps read", func() bool {
		return launches.Stats().Tail >= 1 && warps.Stats().Tail >= 4
	})
	c := &record.Completion{LaunchID: 9, CompleteNS: now + 3000}
	launches.Produce(uint32(record.TypeCompletion), c.Append(nil))
	var observed pcommon.Value
	waitFor(t, "a span with cuda.warps.observed", func() bool {
		for _, td := range traces.AllTraces() {
			rs := td.ResourceSpans()
			for i := range rs.Len() {
				ss := rs.At(i).ScopeSpans().At(0).Spans()
				for j := range ss.Len() {
					if v, ok := ss.At(j).Attributes().Get("cuda.warps.observed"); ok {
						observed = v
						return true
					}
				}
			}
		}
		return false
	})
	if observed.Int() != 4 {
		t.Fatalf("cuda.warps.observed %d, want 4", observed.Int())
	}
}

// TestOnSkipLogsOnce: every program left out of a module is counted; each
// (program, reason) is logged once, with the program's config key.
func TestOnSkipLogsOnce(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	r := &gpuReceiver{log: zap.New(core)}
	key := "programs[1] (object x.o, program foo)"
	noRegion := &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: "map m of program foo has no region for this client"}
	other := &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: "inject: program foo: verifier: insn 3"}
	for _, err := range []error{noRegion, noRegion, other, noRegion} {
		r.onSkip(patcher.Skip{Index: 2, Key: key, Err: err})
	}
	if n := r.patch.skips.Load(); n != 4 {
		t.Errorf("counted %d skips, want 4", n)
	}
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d log entries, want 2 (one per reason): %v", len(entries), entries)
	}
	for _, e := range entries {
		if e.ContextMap()["program"] != key {
			t.Errorf("log %q: program %v, want %q", e.Message, e.ContextMap()["program"], key)
		}
	}
}

// TestRejectedPatchIsAFailure: a PATCH whose image memfd is missing is
// answered NOPATCH by the agent server and counted in patch.failures.
func TestRejectedPatchIsAFailure(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = true
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r

	c, err := net.Dial("unix", cfg.Agent.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	readFrame := func() (uint16, []byte) {
		var h [agentwire.FrameHeader]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, binary.LittleEndian.Uint32(h[8:]))
		if _, err := io.ReadFull(c, p); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint16(h[6:]), p
	}
	hello, _ := agentwire.MarshalHello(agentwire.Hello{Name: "app"})
	c.Write(hello)
	if ft, _ := readFrame(); ft != uint16(agentwire.FrameWelcome) {
		t.Fatalf("frame %d, want WELCOME", ft)
	}
	patch, _ := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 90, Image: []byte("ptx")}, true)
	c.Write(patch) // flags say memfd, but no descriptor comes
	ft, p := readFrame()
	if ft != uint16(agentwire.FrameNoPatch) {
		t.Fatalf("frame %d, want NOPATCH", ft)
	}
	if np, err := agentwire.UnmarshalNoPatch(p); err != nil || !strings.Contains(np.Message, "0 descriptors") {
		t.Fatalf("NOPATCH %+v, %v", np, err)
	}
	if f := r.patch.failed.Load(); f != 1 {
		t.Fatalf("patch failures %d, want 1", f)
	}
}
