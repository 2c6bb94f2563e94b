package progmaps

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// progsRun is what a GPU run of testdata/cuda/samples/progs.cu leaves in
// the maps of threadhist.o and kernelretsnoop.o: n threads in 256-thread
// blocks, iters launches, every exit record offered to the ring.
type progsRun struct{ n, iters uint64 }

// fill writes the run into in's maps the way the GPU programs do.
func (r progsRun) fill(t *testing.T, in *Instance) {
	runs, blocks, exits := in.Array("thread_runs"), in.Array("block_threads"), in.Ring("exits")
	for g := range r.n {
		if _, err := runs.AddUint64(0, g, r.iters); err != nil {
			t.Fatal(err)
		}
		if b := g / 256; b < 1024 {
			if _, err := blocks.AddUint64(b, 0, r.iters); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec := make([]byte, 64) // struct exit_event
	for it := range r.iters {
		for g := range r.n {
			put64(rec, 0, g/256)                                       // block_x
			put64(rec, 24, g%256)                                      // thread_x
			put64(rec, 48, 1000*it+g)                                  // timestamp_ns
			binary.LittleEndian.PutUint32(rec[56:], uint32(g/256%132)) // sm_id
			binary.LittleEndian.PutUint32(rec[60:], uint32(g%32))      // lane_id
			exits.Produce(0, rec)
		}
	}
}

// writeProgsExport writes, in dir, what the collector's file exporters and
// log would hold after the run: the maps' metrics and ring spans as
// progmaps makes them, and the receiver's launch spans and self-metrics
// that scripts/gpu/programs.sh reads (their names as in receiver.go), dropped
// dropped records reported.
func writeProgsExport(t *testing.T, dir string, c *Collector, in *Instance, r progsRun, dropped uint64) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	sm := rm.ScopeMetrics().AppendEmpty().Metrics()
	c.AppendMetrics(sm, []*Instance{in}, time.Now())
	for name, v := range map[string]uint64{"gpuprobe.receiver.records.dropped": dropped,
		"gpuprobe.receiver.modules.patched": 1, "gpuprobe.receiver.patch.failures": 0} {
		m := sm.AppendEmpty()
		m.SetName(name)
		buildSum(m)
		m.Sum().DataPoints().AppendEmpty().SetIntValue(int64(v))
	}
	td := c.TakeTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	for i := range r.iters {
		l := ss.AppendEmpty()
		l.SetName("vectorAdd(float const*, float const*, float*)")
		l.SetSpanID(pcommon.SpanID{1, byte(i)})
		l.Attributes().PutInt("cuda.launch.id", int64(i+1))
		e := ss.AppendEmpty()
		e.SetName("cuda.executing")
		e.SetParentSpanID(l.SpanID())
		e.SetSpanID(pcommon.SpanID{2, byte(i)})
	}
	mj, err := (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	tj, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	log := "2026-11-27T08:00:00.000Z\tdebug\treceiver/patch.go:120\tgpuprobe: module patched\t" +
		`{"otelcol.component.id": "gpuprobe", "pid": 42, "arch": 90, "kernels": 1, "took": "3ms"}` + "\n"
	for name, b := range map[string][]byte{"metrics.json": append(mj, '\n'), "traces.json": append(tj, '\n'),
		"collector.log": []byte(log)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProgramsCheckReadsProgmaps runs scripts/gpu/programs_check.py, the GPU
// script scripts/gpu/programs.sh's checks, on what progmaps exports for a simulated
// run of progs.cu with the real threadhist.o and kernelretsnoop.o: every
// check passes, and a wrong block count or drop count fails its check.
func TestProgramsCheckReadsProgmaps(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	var objs []config.ProgramConfig
	for _, name := range []string{"threadhist", "kernelretsnoop"} {
		obj := filepath.Join(dir, name+".o")
		cmd := exec.Command("clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", filepath.Join(root, "jit", "include"),
			"-c", filepath.Join(root, "testdata", "bpf", name+".c"), "-o", obj)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("clang %s.c: %v\n%s", name, err, b)
		}
		objs = append(objs, config.ProgramConfig{Path: obj})
	}
	r := progsRun{n: 1100 * 256, iters: 2} // blocks beyond threadhist's 1024 too
	tests := []struct {
		name     string
		blockAdd uint64 // added to block 5's count
		dropAdj  int64  // added to the dropped count
		failing  []string
	}{
		{name: "exact"},
		{name: "a block off by one", blockAdd: 1, failing: []string{"threadhist per-block counts"}},
		{name: "a drop not counted", dropAdj: -1, failing: []string{"kernelretsnoop delivered + dropped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defs, err := loadFiles(objs, Options{MaxThreads: uint32(r.n)})
			if err != nil {
				t.Fatal(err)
			}
			in, err := NewInstance(defs, 42, 1, "progs", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			r.fill(t, in)
			if tt.blockAdd > 0 {
				if _, err := in.Array("block_threads").AddUint64(5, 0, tt.blockAdd); err != nil {
					t.Fatal(err)
				}
			}
			c := NewCollector(CollectorOptions{MaxMapKeys: 1024})
			read := c.ReadRings(in, time.Now(), 1<<16)
			if st := in.Ring("exits").Stats(); read == 0 || uint64(read)+st.Dropped != r.n*r.iters {
				t.Fatalf("ring: %d read + %d dropped, want %d", read, st.Dropped, r.n*r.iters)
			}
			out := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			writeProgsExport(t, out, c, in, r, uint64(int64(c.Counters().Dropped)+tt.dropAdj))
			cmd := exec.Command(py, filepath.Join(root, "scripts", "gpu", "programs_check.py"),
				filepath.Join(out, "traces.json"), filepath.Join(out, "metrics.json"), filepath.Join(out, "collector.log"),
				fmt.Sprint(r.n), fmt.Sprint(r.iters), "256")
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no scripts/gpu/__pycache__
			b, err := cmd.CombinedOutput()
			var failing []string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Split(line, "\t")
				if len(f) != 3 {
					t.Fatalf("programs_check.py printed %q: want check<TAB>result<TAB>detail\n%s", line, b)
				}
				if f[1] == "FAIL" {
					failing = append(failing, f[0])
				}
			}
			t.Logf("programs_check.py:\n%s", b)
			if fmt.Sprint(failing) != fmt.Sprint(tt.failing) || (err != nil) != (len(tt.failing) > 0) {
				t.Fatalf("failing checks %q (exit %v), want %q:\n%s", failing, err, tt.failing, b)
			}
		})
	}
}
