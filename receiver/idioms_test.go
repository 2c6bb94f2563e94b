package receiver

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/receiver/internal/progmaps"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// buildIdioms compiles testdata/bpf/idioms.c, an object written as
// bpftime's GPU examples are, with clang (required).
func buildIdioms(t *testing.T) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/idioms.c: %v", err)
	}
	out := filepath.Join(t.TempDir(), "idioms.o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../jit/include",
		"-c", "../testdata/bpf/idioms.c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang idioms.c: %v\n%s", err, b)
	}
	return out
}

// TestTargetlessHostProgramWarnsOnce: a host program in a bare
// SEC("uprobe") is skipped with one warning naming it and the reason when
// selected, and silently left out when attach names only the GPU program.
func TestTargetlessHostProgramWarnsOnce(t *testing.T) {
	obj := buildIdioms(t)
	tests := []struct {
		attach []string
		warns  int
	}{
		{nil, 1},
		{[]string{"cuda__exit", "host_manual"}, 1},
		{[]string{"cuda__exit"}, 0},
	}
	for _, tt := range tests {
		core, logs := observer.New(zap.InfoLevel)
		h := &hostSide{log: zap.New(core), libs: map[string]string{}, cancel: func() {}}
		cfg := config.Default()
		cfg.Programs = []config.ProgramConfig{{Path: obj, Attach: tt.attach}}
		objs, err := progmaps.ReadObjects(cfg.Programs)
		if err != nil {
			t.Fatal(err)
		}
		h.loadPrograms(cfg, objs)
		if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
			t.Errorf("attach %v: %d errors: %v", tt.attach, n, logs.All())
		}
		warns := logs.FilterLevelExact(zap.WarnLevel).All()
		if len(warns) != tt.warns {
			t.Fatalf("attach %v: %d warnings, want %d: %v", tt.attach, len(warns), tt.warns, warns)
		}
		for _, w := range warns {
			f := w.ContextMap()
			if f["program"] != "host_manual" || !strings.Contains(f["error"].(string), "names no <binary>:<symbol>") {
				t.Errorf("attach %v: warning %q %v", tt.attach, w.Message, f)
			}
		}
		if err := h.close(); err != nil {
			t.Error(err)
		}
	}
}

// TestBpftimeIdiomsThroughAgent runs the receiver with an object written
// as bpftime's examples are (cuda__ program, bare SEC("uprobe"), 32-byte
// records in a ring declaring 1024 bytes) and with map_values and
// record_types: Start succeeds, the application's settings region arrives
// seeded, and a short record becomes an event with the named type's fields.
func TestBpftimeIdiomsThroughAgent(t *testing.T) {
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: buildIdioms(t),
		RecordTypes: map[string]string{"exits": "exit_small"},
		MapValues:   map[string]map[string]any{"settings": {"0": []any{1, 0xffffffff}}}}}
	cfg.Buffers.MaxThreads = 1024
	cfg.Probes.KernelPhases = false
	tr, mr, traces, _ := startBoth(t, cfg)
	defer tr.Shutdown(context.Background())
	defer mr.Shutdown(context.Background())

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "vec_add"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	settings, err := shm.NewArray(sess.Region(agentwire.RoleMap, "settings"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := settings.Value(0, 0)
	if err != nil || binary.LittleEndian.Uint64(v) != 1 || binary.LittleEndian.Uint64(v[8:]) != 0xffffffff {
		t.Fatalf("settings[0] = %x, %v; want the seeded 1, 0xffffffff", v, err)
	}
	exits, err := shm.NewRing(sess.Region(agentwire.RoleMap, "exits"))
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 32)
	binary.LittleEndian.PutUint32(rec[8:], 5)  // lane
	binary.LittleEndian.PutUint32(rec[24:], 3) // warp
	if r := exits.Produce(0, rec); r != shm.Published {
		t.Fatal(r)
	}
	var ev ptrace.SpanEvent
	waitFor(t, "an event from the exits ring", func() bool {
		var ok bool
		ev, ok = firstEvent(traces.AllTraces(), "exits")
		return ok
	})
	if w, _ := ev.Attributes().Get("warp"); w.Int() != 3 {
		t.Fatalf("event attributes %v, want warp 3", ev.Attributes().AsRaw())
	}
}

// firstEvent finds the first span event named name.
func firstEvent(all []ptrace.Traces, name string) (ptrace.SpanEvent, bool) {
	for _, td := range all {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			ss := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range ss.Len() {
				if evs := ss.At(j).Events(); evs.Len() > 0 && evs.At(0).Name() == name {
					return evs.At(0), true
				}
			}
		}
	}
	return ptrace.SpanEvent{}, false
}
