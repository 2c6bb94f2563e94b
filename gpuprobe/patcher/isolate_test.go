package patcher

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// TestPatchLeavesFailingProgramOut: a user program that cannot be patched
// into a module (no region for its map; rejected by the verifier) is left
// out of it, reported once with its key, and kernel_phases is still
// patched in; a module that no program can be patched into is refused.
func TestPatchLeavesFailingProgramOut(t *testing.T) {
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	bad := &jit.Program{Name: "bad", Section: "kprobe/vectorAdd", Kind: jit.ProbeEntry, Target: "*",
		Insns: asm.Instructions{asm.Mov.Reg(asm.R0, asm.R3), asm.Return()}}
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	ring := ringBinder(t)
	tests := []struct {
		name    string
		user    []*jit.Program
		key     string // the user program's key, reported once
		wantMsg string // in the skip's error
		// injection cache hits of a second Patch: a binding failure
		// re-binds the cached full set; a compile failure is
		// remembered and not injected again
		wantHits uint64
	}{
		{"no region for a user map", launchlate(t), "programs[0] (object launchlate.o, program launch_gpu)",
			"map delay_log2_ns of program launch_gpu has no region", 2},
		{"verifier rejects", []*jit.Program{bad}, "programs[1] (object bad.o, program bad)", "program bad: verifier", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			progs := append(append([]*jit.Program{}, kp...), tc.user...)
			keys := append(kpKeys(len(kp)), tc.key)
			var mu sync.Mutex
			var skips []Skip
			p, err := New(Options{Programs: progs, Keys: keys, DeviceOnly: probes.KernelPhasesDeviceOnly,
				MaxThreads: 4096, RingDevice: probes.KernelPhasesRingDevice,
				OnSkip: func(s Skip) { mu.Lock(); skips = append(skips, s); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			a, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, ring)
			if err != nil {
				t.Fatalf("module refused: %v", err)
			}
			if !strings.Contains(string(a.Image), "gpuprobe_kernel_phases") || strings.Contains(string(a.Image), "gpuprobe_"+tc.user[0].Name) {
				t.Errorf("patched module: kernel_phases in %v, %s in %v", strings.Contains(string(a.Image), "gpuprobe_kernel_phases"),
					tc.user[0].Name, strings.Contains(string(a.Image), "gpuprobe_"+tc.user[0].Name))
			}
			var got []string
			for _, s := range skips {
				got = append(got, s.Key)
				if !strings.Contains(s.Err.Error(), tc.wantMsg) {
					t.Errorf("skip %s: %v, want %q", s.Key, s.Err, tc.wantMsg)
				}
			}
			if len(got) != 1 || got[0] != tc.key {
				t.Errorf("skipped %q, want [%q]", got, tc.key)
			}
			// Again: skipped again, with no new compile (still 2 misses).
			if _, err := p.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, ring); err != nil {
				t.Fatal(err)
			}
			if st := p.CacheStats(); len(skips) != 2 || st.Misses != 2 || st.Hits != tc.wantHits {
				t.Errorf("second patch: %d skips, cache %+v; want 2 skips, 2 misses, %d hits", len(skips), st, tc.wantHits)
			}
			// Alone, the failing program gets the module refused.
			alone, err := New(Options{Programs: tc.user})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := alone.Patch(&agentwire.PatchRequest{Arch: 90, Image: img}, ring); err == nil {
				t.Error("the failing program alone: module patched")
			}
		})
	}
}

// TestPatchBindsMailbox: a program with host calls (allhelpers: puts,
// printk, a hash map) gets its mailbox global bound to the client's
// mailbox region; a client without one gets 0 (the helpers fail fast).
func TestPatchBindsMailbox(t *testing.T) {
	all, err := jit.LoadELF(filepath.Join("..", "..", "testdata", "bpf", "allhelpers.o"))
	if err != nil {
		t.Fatalf("%v (make bpf-objects builds it)", err)
	}
	p, err := New(Options{Programs: all})
	if err != nil {
		t.Fatal(err)
	}
	img := build(t, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	lockHdr := make([]byte, shm.MailboxLocksHeader)
	lockHdr[shm.MailboxLocksSlots] = 4 // 4 slots
	const lockSize = shm.MailboxLocksHeader + 4*shm.MailboxLockSize
	for _, tc := range []struct {
		name          string
		mailbox       bool
		locks         []byte
		want, wantLck agentwire.PatchedGlobal
	}{
		{"with a mailbox", true, lockHdr, agentwire.PatchedGlobal{Kind: agentwire.GlobalRegion, Region: 7},
			agentwire.PatchedGlobal{Kind: agentwire.GlobalRingBlock, Region: 7, Size: lockSize}},
		// Without a lock block host calls fail fast: no mailbox either.
		{"a mailbox without locks", true, nil, agentwire.PatchedGlobal{Kind: agentwire.GlobalConst}, agentwire.PatchedGlobal{Kind: agentwire.GlobalConst}},
		{"without", false, lockHdr, agentwire.PatchedGlobal{Kind: agentwire.GlobalConst}, agentwire.PatchedGlobal{Kind: agentwire.GlobalConst}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bind := func(name string) (Binding, bool) {
				if name == MailboxBinding {
					return Binding{Region: 7, RingBlock: tc.locks}, tc.mailbox
				}
				return Binding{Region: 1, Lanes: 1}, true
			}
			a, err := p.Patch(&agentwire.PatchRequest{Arch: 80, Image: img}, bind)
			if err != nil {
				t.Fatal(err)
			}
			n, nl := 0, 0
			for _, g := range a.Globals {
				switch {
				case strings.HasSuffix(g.Name, "_mailbox"):
					n++
					if g.Kind != tc.want.Kind || g.Region != tc.want.Region || g.Value != 0 {
						t.Errorf("%s: %+v, want %+v", g.Name, g, tc.want)
					}
				case strings.HasSuffix(g.Name, "_mailbox_locks"):
					nl++
					w := tc.wantLck
					if g.Kind != w.Kind || g.Region != w.Region || g.Size != w.Size || g.Value != 0 ||
						(w.Kind == agentwire.GlobalRingBlock && !bytes.Equal(g.Init, tc.locks)) {
						t.Errorf("%s: %+v, want %+v", g.Name, g, w)
					}
				}
			}
			if nl != n {
				t.Errorf("%d mailbox globals, %d lock-block globals", n, nl)
			}
			if n == 0 {
				t.Fatalf("no mailbox global in %+v", a.Globals)
			}
		})
	}
}
