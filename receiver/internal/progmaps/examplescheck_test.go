package progmaps

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// exampleRun is a simulated run of testdata/cuda/samples/progs.cu for
// scripts/gpu/examples.sh: n threads in 256-thread blocks, iters launches.
type exampleRun struct{ n, iters uint64 }

// exampleCase is one bpftime example as examples_check.py checks it: the
// object (testdata/bpf/<obj>.c), its map seeds, what the GPU leaves in its
// maps (fill), one value off that must fail the check (off), the log
// records, the collector log and the user examples.sh ran as, and the
// result wanted ("" for ok).
type exampleCase struct {
	name, obj string
	seeds     map[string]map[string]any
	fill, off func(t *testing.T, in *Instance, r exampleRun)
	logs      func(r exampleRun) []string
	log       string
	uid       int
	want      string
}

// add adds v to key (lane) of map m, failing the test on error.
func add(t *testing.T, in *Instance, m string, key, lane, v uint64) {
	t.Helper()
	if _, err := in.Array(m).AddUint64(key, lane, v); err != nil {
		t.Fatalf("%s[%d][%d]: %v", m, key, lane, err)
	}
}

// hashAdd adds v to the value of u32 key k of GPU hash map m, inserting
// it first, as the GPU programs do.
func hashAdd(t *testing.T, in *Instance, m string, k uint32, v uint64) {
	t.Helper()
	var d *Def
	for _, a := range in.arrays {
		if a.def.Name == m {
			d = a.def
		}
	}
	if d == nil || d.hash == nil {
		t.Fatalf("no hash map %s", m)
	}
	l, elem := jit.GPUHashLayout(d.hash), tableElem(in.Array(m))
	key := binary.LittleEndian.AppendUint32(nil, k)
	es, err := l.Entries(d.hash, elem)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if string(e.Key) == string(key) {
			v += binary.LittleEndian.Uint64(e.Value)
		}
	}
	if err := l.Put(d.hash, elem, key, binary.LittleEndian.AppendUint64(nil, v)); err != nil {
		t.Fatal(err)
	}
}

var exampleCases = []exampleCase{
	{name: "gpu_shared_map", obj: "compat/gpuhash", fill: func(t *testing.T, in *Instance, r exampleRun) {
		w := r.n / 32
		for k := range uint32(32) {
			hashAdd(t, in, "gh_count", k, 32*(w/32+b2u(uint64(k) < w%32))*r.iters)
		}
		for k, v := range map[uint64]uint64{0: 32, 1: r.n*r.iters - 32, 4: 4 * r.iters, 5: 4 * r.iters, 6: 1} {
			add(t, in, "gh_res", k, 0, v)
		}
		for k := range uint32(4) {
			hashAdd(t, in, "gh_small", k+1, uint64(k+101))
		}
	}, off: func(t *testing.T, in *Instance, r exampleRun) { hashAdd(t, in, "gh_count", 7, 1) }},
	{name: "host_map_test", obj: "compat/hostmaps", fill: func(t *testing.T, in *Instance, r exampleRun) {
		for g := range r.n {
			add(t, in, "hm_thread", 0, g, r.iters)
			add(t, in, "hm_thread", 1, g, 1)
			add(t, in, "hm_thread", 2, g, g)
			add(t, in, "hm_shared", g%256%10, 0, r.iters)
		}
		add(t, in, "hm_shared", 10, 0, 42)
	}, off: func(t *testing.T, in *Instance, r exampleRun) { add(t, in, "hm_thread", 0, 5, 1) }},
	{name: "threadscheduling_dynamic_hook", obj: "smhash", fill: func(t *testing.T, in *Instance, r exampleRun) {
		for g := uint64(0); g < r.n; g += 32 {
			hashAdd(t, in, "smh_threads", uint32(g/256%132)<<8|uint32(g/32%8), 32*r.iters)
		}
	}, off: func(t *testing.T, in *Instance, r exampleRun) { add(t, in, "smh_err", 0, 0, 1) }},
	{name: "cuda-counter", obj: "cudacounter", fill: func(t *testing.T, in *Instance, r exampleRun) {
		add(t, in, "cc_stats", 0, 0, r.iters)
		add(t, in, "cc_stats", 1, 0, r.n*r.iters)
		add(t, in, "cc_stats", 2, 0, 5000*r.iters)
	}, off: func(t *testing.T, in *Instance, r exampleRun) { add(t, in, "cc_stats", 0, 0, 1) }, logs: func(r exampleRun) []string {
		var l []string
		for range r.iters {
			l = append(l, "Entered vectorAdd", "Exited vectorAdd duration=5000 ns")
		}
		return l
	}},
	{name: "atomizer", obj: "compat/seeded",
		seeds: map[string]map[string]any{"sd_cfg": {"0": 1, "1": 256, "2": 3}, "sd_acc": {"0": 1000}},
		fill: func(t *testing.T, in *Instance, r exampleRun) {
			add(t, in, "sd_acc", 0, 0, 3*r.n/256*r.iters)
			add(t, in, "sd_acc", 1, 0, r.n/256*r.iters)
		},
		off: func(t *testing.T, in *Instance, r exampleRun) { add(t, in, "sd_acc", 0, 0, 1) }},
	// The host half refused: the check stops before the maps (any object).
	{name: "launchlate", obj: "shardcount", uid: 1000, want: "skip", log: hostRefused},
	{name: "launchlate", obj: "shardcount", uid: 0, want: "FAIL", log: hostRefused},
}

// hostRefused is the collector's log line when it cannot load host programs.
const hostRefused = "2026-12-02T08:00:00.000Z\terror\treceiver/hostprobes.go:105\tgpuprobe: host programs not loaded; " +
	"their GPU halves see their kernel maps as absent\t{\"error\": \"operation not permitted\"}\n"

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestExamplesCheckReadsProgmaps runs scripts/gpu/examples_check.py, the
// checks of scripts/gpu/examples.sh, on what progmaps exports for simulated
// runs of bpftime's examples with our real objects (hash map keys,
// host-backed per-thread arrays, seeded arrays, log records): each passes
// exactly, one value off fails it, and an example whose host programs did
// not load says skip (not root) or FAIL (root).
func TestExamplesCheckReadsProgmaps(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	root := repoRoot(t)
	r := exampleRun{n: 1024, iters: 3}
	for _, tc := range exampleCases {
		for _, off := range []bool{false, true} {
			if off && tc.off == nil {
				continue
			}
			want, name := tc.want, tc.name
			switch {
			case off:
				want, name = "FAIL", name+" one off"
			case want == "":
				want = "ok"
			case tc.uid == 0:
				name += " as root"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				obj := filepath.Join(dir, "prog.o")
				cmd := exec.Command("clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I",
					filepath.Join(root, "jit", "include"), "-c", filepath.Join(root, "testdata", "bpf", tc.obj+".c"), "-o", obj)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("clang %s.c: %v\n%s", tc.obj, err, b)
				}
				defs, err := loadFiles([]config.ProgramConfig{{Path: obj, MapValues: tc.seeds}}, Options{MaxThreads: uint32(r.n)})
				if err != nil {
					t.Fatal(err)
				}
				in, err := NewInstance(defs, 42, 1, "progs", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				defer in.Close()
				if tc.fill != nil {
					tc.fill(t, in, r)
				}
				if off {
					tc.off(t, in, r)
				}
				writeExampleExport(t, dir, in, r, tc)
				cmd = exec.Command(py, filepath.Join(root, "scripts", "gpu", "examples_check.py"), tc.name, dir)
				cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
				b, _ := cmd.CombinedOutput()
				got, _, _ := strings.Cut(string(b), "\t")
				t.Logf("examples_check.py: %s", b)
				if got != want {
					t.Fatalf("%s: result %q, want %q:\n%s", tc.name, got, want, b)
				}
			})
		}
	}
}

// writeExampleExport writes in dir what examples.sh leaves there for the
// checker: run.json, the maps' metrics as progmaps makes them, the log
// records, an empty trace file and the collector log.
func writeExampleExport(t *testing.T, dir string, in *Instance, r exampleRun, tc exampleCase) {
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	NewCollector(CollectorOptions{MaxMapKeys: 16384}).AppendMetrics(sm, []*Instance{in}, time.Now())
	mj, err := (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if tc.logs != nil {
		for _, s := range tc.logs(r) {
			recs = append(recs, map[string]any{"body": map[string]string{"stringValue": s}})
		}
	}
	lj, _ := json.Marshal(map[string]any{"resourceLogs": []any{map[string]any{"scopeLogs": []any{map[string]any{"logRecords": recs}}}}})
	run := map[string]any{"n": r.n, "iters": r.iters, "block": 256, "gemm_n": 256, "t0_ns": 1, "t1_ns": int64(time.Second),
		"uid": tc.uid}
	rj, _ := json.Marshal(run)
	for name, b := range map[string][]byte{"metrics.json": append(mj, '\n'), "logs.json": append(lj, '\n'),
		"traces.json": nil, "collector.log": []byte(tc.log), "run.json": rj} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
