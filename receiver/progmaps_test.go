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
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// buildUserProg compiles testdata/userprog/<name>.c with clang (required).
func buildUserProg(t *testing.T, name string) string {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/userprog/%s.c: %v", name, err)
	}
	out := filepath.Join(t.TempDir(), name+".o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
		"-I", "../jit/include", "-c", "../testdata/userprog/"+name+".c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s.c: %v\n%s", name, err, b)
	}
	return out
}

// mapValue returns the latest value of metric name with attribute gpuprobe.map.key=key.
func mapValue(all []pmetric.Metrics, name string, key int64) (int64, bool) {
	var v int64
	found := false
	for _, md := range all {
		rm := md.ResourceMetrics()
		for i := range rm.Len() {
			sm := rm.At(i).ScopeMetrics().At(0).Metrics()
			for j := range sm.Len() {
				m := sm.At(j)
				if m.Name() != name || m.Type() != pmetric.MetricTypeSum {
					continue
				}
				for k := range m.Sum().DataPoints().Len() {
					dp := m.Sum().DataPoints().At(k)
					if a, ok := dp.Attributes().Get("gpuprobe.map.key"); ok && a.Int() == key {
						v, found = dp.IntValue(), true
					}
				}
			}
		}
	}
	return v, found
}

// TestUserMapsThroughAgent runs the receiver with a clang-built program,
// connects through the agent socket like the shim, writes into the map
// regions it was handed (as the GPU would) and checks spans and metrics.
func TestUserMapsThroughAgent(t *testing.T) {
	obj := buildUserProg(t, "usermaps")
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: obj}}
	cfg.Buffers.MaxThreads = 1024
	cfg.Probes.KernelPhases = false // its kp_exec region is TestPatchAndWarpRing's
	tr, mr, traces, metrics := startBoth(t, cfg)
	defer tr.Shutdown(context.Background())
	defer mr.Shutdown(context.Background())

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "trainer"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range sess.Regions {
		if r.Role == agentwire.RoleMap {
			names = append(names, r.Name)
		}
	}
	if strings.Join(names, ",") != "stats,runs,warp_work,phases,exits" {
		t.Fatalf("map regions %v", names)
	}
	stats, err := shm.NewArray(sess.Region(agentwire.RoleMap, "stats"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stats.AddUint64(9, 0, 123); err != nil { // calls of key 9
		t.Fatal(err)
	}
	launches, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	// A calibration that agrees with the host's clocks (the receiver
	// rejects one whose realtime − monotonic is off by more than 1 s).
	off, err := monoOffset()
	if err != nil {
		t.Fatal(err)
	}
	const gpu0 = uint64(5_000_000_000)
	real0 := uint64(1 + off)
	cal := (&record.Calibration{Device: 0, GPUNS: gpu0, MonoNS: 1, RealtimeNS: real0}).Append(nil)
	if r := launches.Produce(uint32(record.TypeCalibration), cal); r != shm.Published {
		t.Fatal(r)
	}
	// A copy whose record claims another process: its span carries the
	// connection's pid.
	mc := (&record.Memcpy{Bytes: 8, StartNS: 2, EndNS: 3, PID: 4242, Kind: record.MemcpyHostToDevice}).Append(nil)
	if r := launches.Produce(uint32(record.TypeMemcpy), mc); r != shm.Published {
		t.Fatal(r)
	}
	// The calibration must be read before the phases record below, which
	// a poll would otherwise read in the same pass (the consumer stores
	// its tail after handling what it read).
	waitFor(t, "the calibration and the copy read", func() bool { return launches.Stats().Tail >= 2 })
	phases, err := shm.NewRing(sess.Region(agentwire.RoleMap, "phases"))
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 32)
	binary.LittleEndian.PutUint64(rec[0:], gpu0+1000)
	binary.LittleEndian.PutUint64(rec[8:], gpu0+5000)
	binary.LittleEndian.PutUint32(rec[16:], 7)
	if r := phases.Produce(0, rec); r != shm.Published {
		t.Fatal(r)
	}

	waitFor(t, "the phases and memcpy spans", func() bool { return traces.SpanCount() >= 2 })
	waitFor(t, "gpuprobe.map.stats.calls{gpuprobe.map.key=9} at 123", func() bool {
		v, ok := mapValue(metrics.AllMetrics(), "gpuprobe.map.stats.calls", 9)
		return ok && v == 123
	})
	var span, copySpan bool
	for _, td := range traces.AllTraces() {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			ss := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range ss.Len() {
				s := ss.At(j)
				if s.Name() == translate.SpanMemcpy {
					copySpan = true
					if v, _ := rs.At(i).Resource().Attributes().Get("process.pid"); v.Int() != int64(os.Getpid()) {
						t.Errorf("memcpy span of pid %d, want the connection's %d", v.Int(), os.Getpid())
					}
				}
				if s.Name() != "phases" {
					continue
				}
				span = true
				if uint64(s.StartTimestamp()) != real0+1000 || uint64(s.EndTimestamp()) != real0+5000 {
					t.Errorf("phases span %d..%d, want %d..%d", s.StartTimestamp(), s.EndTimestamp(), real0+1000, real0+5000)
				}
				// The executable of the connection, not the HELLO's "trainer".
				if v, _ := rs.At(i).Resource().Attributes().Get("process.executable.name"); v.Str() != translate.ProcName(uint32(os.Getpid())) {
					t.Errorf("resource process.executable.name %q", v.Str())
				}
			}
		}
	}
	if !span || !copySpan {
		t.Fatalf("phases span %v, memcpy span %v", span, copySpan)
	}

	// The application goes away: its values are reported once more, then
	// the regions are released.
	stats.AddUint64(9, 0, 1)
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	r := tr.(*handle).r
	waitFor(t, "the last values of a gone application reported and its regions released", func() bool {
		r.mu.Lock()
		n := len(r.srcs.list) + len(r.maps.retired)
		r.mu.Unlock()
		v, _ := mapValue(metrics.AllMetrics(), "gpuprobe.map.stats.calls", 9)
		return n == 0 && v == 124
	})
}

func TestUserProgramErrorsFailStart(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Programs = []config.ProgramConfig{{Path: filepath.Join(t.TempDir(), "missing.o")}}
	r, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(context.Background(), componenttest.NewNopHost())
	if err == nil || !strings.Contains(err.Error(), "programs[0]::path") {
		t.Fatalf("err = %v", err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
