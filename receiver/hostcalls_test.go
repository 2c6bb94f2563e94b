package receiver

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// TestHostCallsThroughAgent: a client of a program with host calls
// (allhelpers: puts, printk, a hash map) gets a mailbox and the hash map's
// region in WELCOME, its patched module binds the mailbox global to it,
// and requests posted the way GPU code posts them are answered: puts and
// printk become log records, a hash update is seen by a later lookup.
func TestHostCallsThroughAgent(t *testing.T) {
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: filepath.Join("..", "testdata", "bpf", "allhelpers.o")}}
	cfg.Probes.KernelPhases = false
	f := NewFactory()
	set := receivertest.NewNopSettings(f.Type())
	logs := new(consumertest.LogsSink)
	lr, err := f.CreateLogs(context.Background(), set, cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	if err := lr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer lr.Shutdown(context.Background())

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	mbIdx := -1
	for i, reg := range sess.Regions {
		if reg.Role == agentwire.RoleMailbox {
			mbIdx = i
		}
	}
	hash := sess.Region(agentwire.RoleMap, "hash_map")
	if mbIdx < 0 || hash == nil {
		t.Fatalf("WELCOME has no mailbox or hash_map region: %+v", sess.Regions)
	}
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	img, err := os.ReadFile(fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: img}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bound := false
	for _, g := range a.Globals {
		bound = bound || (strings.HasSuffix(g.Name, "_mailbox") && g.Kind == agentwire.GlobalRegion && int(g.Region) == mbIdx)
	}
	if !bound {
		t.Fatalf("no mailbox global bound to region %d: %+v", mbIdx, a.Globals)
	}

	mb, err := shm.NewMailbox(sess.Region(agentwire.RoleMailbox, ""))
	if err != nil {
		t.Fatal(err)
	}
	// This requester is a goroutine on a loaded test machine (-race),
	// not a GPU thread: it waits longer than the receiver's 5 ms.
	mb.SetTimeout(5 * time.Second)
	call := func(h jit.HelperID, args [5]uint64, payload []byte) int64 {
		t.Helper()
		ret, err := mb.Call(uint32(h), args, payload, 3)
		if err != nil {
			t.Fatalf("helper %d: %v", h, err)
		}
		return ret
	}
	key := binary.LittleEndian.AppendUint32(nil, 9)
	val := binary.LittleEndian.AppendUint64(nil, 77)
	id := jit.HostMapID("hash_map")
	if r := call(jit.HelperMapUpdateElem, [5]uint64{0, 0, 0, 0, id}, append(key, val...)); r != 0 {
		t.Fatalf("update: %d", r)
	}
	off := call(jit.HelperMapLookupElem, [5]uint64{0, 0, 0, 0, id}, key)
	if off < shm.DataOffset || binary.LittleEndian.Uint64(hash.Bytes()[off:]) != 77 {
		t.Fatalf("lookup: offset %d does not hold 77 in the client's mapping", off)
	}
	call(jit.HelperPuts, [5]uint64{}, []byte("hello from the GPU\x00"))
	call(jit.HelperTracePrintk, [5]uint64{0, 10, 5}, []byte("thread %d\x00"))
	waitFor(t, "two log records", func() bool { return logs.LogRecordCount() >= 2 })
	var bodies []string
	for _, ld := range logs.AllLogs() {
		rl := ld.ResourceLogs()
		for i := 0; i < rl.Len(); i++ {
			lrs := rl.At(i).ScopeLogs().At(0).LogRecords()
			for j := 0; j < lrs.Len(); j++ {
				bodies = append(bodies, lrs.At(j).Body().Str())
			}
		}
	}
	if len(bodies) != 2 || bodies[0] != "hello from the GPU" || bodies[1] != "thread 5" {
		t.Fatalf("log bodies %q", bodies)
	}
}

// buildBad compiles testdata/bpf/bad/<name>.c with clang.
func buildBad(t *testing.T, name string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/bad/%s.c: %v", name, err)
	}
	out := filepath.Join(t.TempDir(), name+".o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-mcpu=v3", "-I", "../jit/include", "-c", "../testdata/bpf/bad/"+name+".c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s.c: %v\n%s", name, err, b)
	}
	return out
}

// TestUnsupportedMapTypeFailsStart: a GPU program with one of bpftime's
// other GPU map types is refused when the receiver starts, never at patch
// time, with the config key, the program, the map and its type.
func TestUnsupportedMapTypeFailsStart(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: buildBad(t, "badmaptype")}}
	r, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(context.Background(), componenttest.NewNopHost())
	for _, want := range []string{"programs[0]", `program "uses_odd_map"`, `map "odd" has type 1599`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start: %v; want it to say %q", err, want)
		}
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestUnverifiableProgramFailsStart: a GPU program the verifier refuses
// (a string helper reading past its 8-byte buffer) fails the receiver's
// start, naming the config key and the instruction, not a client's first
// patch.
func TestUnverifiableProgramFailsStart(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: buildBad(t, "strleak")}}
	r, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(context.Background(), componenttest.NewNopHost())
	for _, want := range []string{"programs[0] (object strleak.o", "verifier: insn ", "puts"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start: %v; want it to say %q", err, want)
		}
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
