package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/internal/bpftest"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// samplePTX returns a PTX module embedded in testdata/cuda/samples/ptxload.cu
// (the string constant named name).
func samplePTX(t *testing.T, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "cuda", "samples", "ptxload.cu"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)static const char ` + name + `\[\] = R"\((.*?)\)";`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("ptxload.cu has no PTX string %s", name)
	}
	return append(m[1], 0)
}

// simLaunch is one launch the simulated GPU runs: runs > 1 is a graph
// kernel node launched that many times (one id, the node of a launch
// captured from a stream).
type simLaunch struct {
	id          uint64
	grid, block [3]uint32
	runs        int
}

func (l simLaunch) threads() uint64 {
	return uint64(l.grid[0]*l.grid[1]*l.grid[2]) * uint64(l.block[0]*l.block[1]*l.block[2])
}

// fault is a deliberate error of the simulated GPU.
type fault int

const (
	faultNone           fault = iota
	faultLoseExec             // one launch's device window (Exec record) missing
	faultExecBlocks           // one device window counts a block too many
	faultDupExit              // one thread's exit recorded twice, another's not
	faultLateExit             // one exit time after its launch's last warp end
	faultDoubleCount          // one per-thread counter slot incremented twice
	faultLostUpdate           // one counter update lost (as a concurrent race would)
	faultBlockCount           // one block_threads count off by one
	faultCapturedRecord       // a launch record for the captured launch, which never ran
)

// simulate plays the GPU (and the shim) for a session patched with
// kernel_phases, kernelretsnoop and threadhist: launch records, one
// record.Exec per run of a launch, one exit record per thread inside its
// warp's time, the per-thread and per-block counters.
func simulate(t *testing.T, s *agent.Session, launches []simLaunch, f fault) {
	t.Helper()
	ring := func(role agentwire.Role, name string) *shm.Ring {
		r, err := shm.NewRing(s.Region(role, name))
		if err != nil {
			t.Fatalf("region %s: %v", name, err)
		}
		return r
	}
	array := func(name string) *shm.Array {
		a, err := shm.NewArray(s.Region(agentwire.RoleMap, name))
		if err != nil {
			t.Fatalf("region %s: %v", name, err)
		}
		return a
	}
	lr, kp, ex := ring(agentwire.RoleLaunchRing, ""), ring(agentwire.RoleMap, probes.KernelPhasesRingMap), ring(agentwire.RoleMap, "exits")
	runs, blocks := array("thread_runs"), array("block_threads")
	put := func(g *shm.Ring, typ uint32, b []byte) {
		if res := g.Produce(typ, b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
	put(lr, uint32(record.TypeKernelName), (&record.KernelName{Function: 1, PID: 1, Name: "ptx_affine"}).Append(nil))
	now := uint64(1_000_000)
	first, firstExec := true, true
	for _, l := range launches {
		rec := record.Launch{LaunchID: l.id, PID: 1, Function: 1, Grid: l.grid, Block: l.block}
		if l.runs > 1 { // a graph node's runs: cuGraphLaunch records
			if f == faultCapturedRecord { // what the shim wrote before capture.c
				put(lr, uint32(record.TypeLaunch), rec.Append(nil))
			}
			rec.API = record.APIGraphLaunch
		}
		for range max(l.runs, 1) {
			put(lr, uint32(record.TypeLaunch), rec.Append(nil))
			bt := l.block[0] * l.block[1] * l.block[2]
			runStart := now
			for bz := range l.grid[2] {
				for by := range l.grid[1] {
					for bx := range l.grid[0] {
						for w := range (bt + 31) / 32 {
							start := now
							now += 1000
							lanes := min(bt-32*w, 32)
							for lane := range lanes {
								tl := 32*w + lane
								tx, ty, tz := tl%l.block[0], tl/l.block[0]%l.block[1], tl/(l.block[0]*l.block[1])
								ts := start + 10 + uint64(lane)
								if f == faultLateExit && first {
									ts = 1 << 40 // after every launch's last warp
								}
								if f == faultDupExit && first {
									tx = (tx + 1) % l.block[0]
								}
								first = false
								e := make([]byte, 64)
								for i, v := range []uint64{uint64(bx), uint64(by), uint64(bz), uint64(tx), uint64(ty), uint64(tz), ts} {
									binary.LittleEndian.PutUint64(e[8*i:], v)
								}
								put(ex, 0, e)
								gl := uint64((bz*l.grid[1]+by)*l.grid[0]+bx)*uint64(bt) + uint64(tl)
								if _, err := runs.AddUint64(0, gl, 1); err != nil {
									t.Fatal(err)
								}
								if bx < 1024 {
									if _, err := blocks.AddUint64(uint64(bx), 0, 1); err != nil {
										t.Fatal(err)
									}
								}
							}
						}
					}
				}
			}
			ex := record.Exec{LaunchID: l.id, StartNS: runStart, EndNS: now, Blocks: uint64(l.grid[0] * l.grid[1] * l.grid[2]), Threads: l.threads()}
			if f == faultExecBlocks && firstExec {
				ex.Blocks++
			}
			if !(f == faultLoseExec && firstExec) {
				put(kp, 0, ex.Append(nil))
			}
			firstExec = false
		}
	}
	switch f {
	case faultDoubleCount:
		runs.AddUint64(0, 3, 1)
	case faultLostUpdate:
		runs.AddUint64(0, 3, ^uint64(0)) // slot 3 is covered by every launch: 3 → 2
	case faultBlockCount:
		blocks.AddUint64(1, 0, 1)
	}
}

// TestAgentDumpChecks: agent-dump --patch with kernel_phases,
// kernelretsnoop and threadhist patches a PTX module of the ptxload
// sample, a simulated GPU writes what the patched kernels would, and the
// checks pass exactly when the records are right.
func TestAgentDumpChecks(t *testing.T) {
	objs := bpftest.Object(t, "kernelretsnoop") + "," + bpftest.Object(t, "threadhist")
	launches := []simLaunch{
		{id: 1, grid: [3]uint32{3, 1, 1}, block: [3]uint32{40, 1, 1}},
		{id: 2, grid: [3]uint32{3, 1, 1}, block: [3]uint32{40, 1, 1}},
		{id: 1<<63 | 5, grid: [3]uint32{2, 2, 1}, block: [3]uint32{7, 5, 3}, runs: 2}, // a graph node launched twice
	}
	tests := []struct {
		name   string
		fault  fault
		expect string
		racy   bool
		fail   []string // checks that must fail (all others pass)
	}{
		{name: "right", expect: "launches ptx_affine 4\n"},
		{name: "launch count off", expect: "launches ptx_affine 5\n", fail: []string{"launch counts"}},
		{name: "other kernel", expect: "launches ptx_affine 4\nlaunches other 1\n", fail: []string{"launch counts", "kernels patched"}},
		{name: "lost device window", fault: faultLoseExec, expect: "launches ptx_affine 4\n",
			fail: []string{"device windows per launch", "exit records (exits)"}}, // the first launch's exits precede the second's window
		{name: "device window blocks off", fault: faultExecBlocks, expect: "launches ptx_affine 4\n", fail: []string{"device windows per launch"}},
		{name: "duplicate exit", fault: faultDupExit, expect: "launches ptx_affine 4\n", fail: []string{"exit records (exits)"}},
		{name: "late exit", fault: faultLateExit, expect: "launches ptx_affine 4\n", fail: []string{"exit records (exits)"}},
		{name: "thread counted twice", fault: faultDoubleCount, expect: "launches ptx_affine 4\n", fail: []string{"per-thread counts (thread_runs)"}, racy: true},
		{name: "lost update, exact", fault: faultLostUpdate, expect: "launches ptx_affine 4\n", fail: []string{"per-thread counts (thread_runs)"}},
		{name: "lost update, racy", fault: faultLostUpdate, expect: "launches ptx_affine 4\n", racy: true},
		{name: "block count off", fault: faultBlockCount, expect: "launches ptx_affine 4\n", fail: []string{"per-block counts (block_threads)"}},
		{name: "captured launch recorded", fault: faultCapturedRecord, expect: "launches ptx_affine 4\n", fail: []string{"launch counts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			expect, summary := filepath.Join(dir, "app.txt"), filepath.Join(dir, "summary.json")
			if err := os.WriteFile(expect, []byte("app output\n"+tt.expect+"checksum 0123\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--exit-after", "1", "--patch", "--programs", objs, "--target", "*", "--lanes", "4096",
				"--ring-slots", "4096", "--expect", expect, "--summary", summary}
			if tt.racy {
				args = append(args, "--racy-thread-counts")
			}
			socket, stop := startDumpRC(t, args...)
			s, err := agent.Dial(socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "sim"})
			if err != nil {
				t.Fatal(err)
			}
			a, err := s.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: samplePTX(t, "kAffinePTX")}, 10*time.Second)
			if err != nil {
				t.Fatalf("PATCH: %v", err)
			}
			if len(a.Kernels) != 1 || a.Kernels[0].Name != "ptx_affine" {
				t.Fatalf("patched kernels %+v, want ptx_affine", a.Kernels)
			}
			simulate(t, s, launches, tt.fault)
			s.Close()
			out, code := stop()
			var sum struct {
				Sessions []sessionSummary `json:"sessions"`
				Failed   int              `json:"failed_checks"`
			}
			b, err := os.ReadFile(summary)
			if err != nil {
				t.Fatalf("summary: %v\n%s", err, out)
			}
			if err := json.Unmarshal(b, &sum); err != nil || len(sum.Sessions) != 1 {
				t.Fatalf("summary %s: %v", b, err)
			}
			got := map[string]bool{}
			for _, c := range sum.Sessions[0].Checks {
				got[c.Name] = c.OK
			}
			for _, name := range []string{"launch counts", "kernels patched", "device windows per launch", "exit records (exits)",
				"per-thread counts (thread_runs)", "per-block counts (block_threads)"} {
				ok, ran := got[name]
				want := !contains(tt.fail, name)
				if !ran || ok != want {
					t.Errorf("check %q: ran %v ok %v, want ok %v\n%s", name, ran, ok, want, out)
				}
			}
			if wantCode := map[bool]int{true: 3, false: 0}[len(tt.fail) > 0]; code != wantCode || sum.Failed != len(tt.fail) {
				t.Errorf("exit code %d with %d failed checks, want %d and %d\n%s", code, sum.Failed, wantCode, len(tt.fail), out)
			}
			captured := 0
			if tt.fault == faultCapturedRecord {
				captured = 1
			}
			if s := sum.Sessions[0]; s.Captured != captured || s.Launches["ptx_affine"] != 4 || s.ExitRecords == 0 {
				t.Errorf("summary: captured %d, launches %v, exit records %d; want %d, 4, > 0", s.Captured, s.Launches, s.ExitRecords, captured)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// startDumpRC is startDump that also returns agent-dump's exit code.
func startDumpRC(t *testing.T, args ...string) (string, func() (string, int)) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	dumpStop = make(chan struct{})
	stopCh := dumpStop
	var out, errb strings.Builder
	done := make(chan int)
	go func() { done <- runAgentDump(append([]string{"--socket", socket}, args...), &out, &errb) }()
	waitListening(t, socket, done, &errb)
	return socket, func() (string, int) {
		var code int
		select {
		case code = <-done:
		case <-time.After(10 * time.Second):
			close(stopCh)
			code = <-done
		}
		return out.String() + errb.String(), code
	}
}

// TestAgentDumpPatchesSamples: every configuration of scripts/gpu/samples.sh
// patches every kernel of the samples 3-5 (testdata/cuda/samples, PTX from
// nvcc 11.8 here, as the GPU machine's nvcc embeds it), and ptxas accepts
// each patched module for sm_90. Needs nvcc, ptxas and clang.
func TestAgentDumpPatchesSamples(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed: %v", err)
	}
	build := func(name string) []byte {
		p := fatbintest.Build(t, fatbintest.Source(t, "samples/"+name+".cu"), name+".ptx", "-ptx", "-arch=sm_90")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, 0)
	}
	images := []struct {
		name    string
		ptx     []byte
		kernels []string // as the sample prints them
	}{
		{"multistream", build("multistream"), []string{"_Z9stencil2dPKjPjii", "_ZN2gp6cube3dILi3EEEvPjiii", "ms_digest", "ms_mix1d"}},
		{"graph", build("graph"), []string{"_Z6blur2dPKjPjii", "g_fold", "g_never", "g_scale"}}, // g_never: patched, never launched
		{"ptxload affine", samplePTX(t, "kAffinePTX"), []string{"ptx_affine"}},
		{"ptxload grid2d (sm_52)", samplePTX(t, "kGridPTX"), []string{"ptx_grid2d"}},
	}
	configs := []struct {
		name string
		args []string
	}{
		{"kernel_phases", nil},
		{"kernelretsnoop", []string{"--programs", bpftest.Object(t, "kernelretsnoop"), "--target", "*"}},
		{"threadhist", []string{"--probes", "", "--programs", bpftest.Object(t, "threadhist"), "--target", "*"}},
		{"launchlate", []string{"--probes", "", "--programs", bpftest.Object(t, "launchlate"), "--target", "*"}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			socket, stop := startDumpRC(t, append([]string{"--exit-after", "1", "--patch", "--ring-slots", "1024", "--lanes", "1024"}, c.args...)...)
			s, err := agent.Dial(socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "samples"})
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range images {
				a, err := s.Patch(agentwire.PatchRequest{ID: 1, Arch: 90, API: agentwire.APIModule, Image: im.ptx}, 30*time.Second)
				if err != nil {
					t.Errorf("%s: PATCH: %v", im.name, err)
					continue
				}
				var got []string
				for _, k := range a.Kernels {
					got = append(got, k.Name)
				}
				sort.Strings(got)
				if strings.Join(got, " ") != strings.Join(im.kernels, " ") {
					t.Errorf("%s: patched %v, want %v", im.name, got, im.kernels)
				}
				f := filepath.Join(t.TempDir(), "patched.ptx")
				if err := os.WriteFile(f, bytes.TrimRight(a.Image, "\x00"), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(ptxas, "-arch=sm_90", "-o", f+".cubin", f).CombinedOutput(); err != nil {
					t.Errorf("%s: ptxas on the patched module: %v\n%s", im.name, err, out)
				}
			}
			s.Close()
			// No launches: the warp check fails (3), nothing else may.
			if out, code := stop(); code != 0 && code != 3 {
				t.Errorf("agent-dump exit %d\n%s", code, out)
			}
		})
	}
}

// TestAgentDumpLaunchlate: with launchlate, launch_clock (a kernel map of
// the host half) gets no region, and the delay histogram check passes
// exactly when the histogram is empty.
func TestAgentDumpLaunchlate(t *testing.T) {
	obj := bpftest.Object(t, "launchlate")
	for _, tt := range []struct {
		name   string
		bucket int // -1: none
		want   string
	}{{"empty", -1, "launchlate histogram (delay_log2_ns): ok"}, {"one delay", 7, "launchlate histogram (delay_log2_ns): FAIL 1 delays"}} {
		t.Run(tt.name, func(t *testing.T) {
			socket, stop := startDumpRC(t, "--exit-after", "1", "--patch", "--probes=", "--programs", obj, "--target", "*")
			s, err := agent.Dial(socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "launchlate"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: samplePTX(t, "kAffinePTX")}, 10*time.Second); err != nil {
				t.Fatalf("PATCH: %v", err)
			}
			if s.Region(agentwire.RoleMap, "launch_clock") != nil {
				t.Error("launch_clock got a region; it is a kernel map agent-dump cannot provide")
			}
			if tt.bucket >= 0 {
				a, err := shm.NewArray(s.Region(agentwire.RoleMap, "delay_log2_ns"))
				if err != nil {
					t.Fatal(err)
				}
				a.AddUint64(uint64(tt.bucket), 0, 1)
			}
			s.Close()
			if out, _ := stop(); !strings.Contains(out, "agent-dump: check "+tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}
