package receiver

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestProcessResource: a client's spans and metrics carry one resource
// built from /proc (pid, executable) and its HELLO (service name); a
// malformed OTEL_RESOURCE_ATTRIBUTES is discarded whole, logged with its
// name and counted.
func TestProcessResource(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	core, logs := observer.New(zap.WarnLevel)
	set := receivertest.NewNopSettings(f.Type())
	set.Logger = zap.New(core)
	tr, mr, traces, metrics := startBothWith(t, set, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())

	sess, err := agent.Dial(cfg.Agent.Socket, agent.Hello{PID: 1, Flags: agent.HelloResource, Name: "liar",
		ServiceName: "trainer", ResAttrs: "team=ml,process.pid=1,bad=%0A"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ring, err := shm.NewRing(sess.Region(agent.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	now := monoNow(t)
	for _, r := range []interface{ Append([]byte) []byte }{
		&record.KernelName{Function: 1, Name: "_Z4gemmPf"},
		&record.Launch{LaunchID: 1, PID: 1, EnqueueNS: now, ReturnNS: now + 100, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}},
		&record.Completion{LaunchID: 1, CompleteNS: now + 200},
	} {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatal(res)
		}
	}
	var spanRes, metricRes pcommon.Map
	var rejected int64 = -1
	waitFor(t, "the span and metric resources and the rejection count", func() bool {
		for _, td := range traces.AllTraces() {
			if td.ResourceSpans().Len() > 0 {
				spanRes = td.ResourceSpans().At(0).Resource().Attributes()
			}
		}
		for _, md := range metrics.AllMetrics() {
			for i := range md.ResourceMetrics().Len() {
				rm := md.ResourceMetrics().At(i)
				ms := rm.ScopeMetrics().At(0).Metrics()
				for j := range ms.Len() {
					switch ms.At(j).Name() {
					case "gpu.cuda.kernel.launches":
						metricRes = rm.Resource().Attributes()
					case "gpuprobe.receiver.resource.rejected":
						rejected = ms.At(j).Sum().DataPoints().At(0).IntValue()
					}
				}
			}
		}
		return spanRes != (pcommon.Map{}) && metricRes != (pcommon.Map{}) && rejected >= 1
	})
	exe, _ := os.Executable()
	hostName, _ := os.Hostname()
	want := map[string]any{"process.pid": int64(os.Getpid()), "process.executable.path": exe, "service.name": "trainer",
		"host.name": hostName}
	for name, res := range map[string]pcommon.Map{"span": spanRes, "metric": metricRes} {
		if res == (pcommon.Map{}) {
			t.Fatalf("no %s resource", name)
		}
		for k, v := range want {
			if got, _ := res.Get(k); got.AsRaw() != v {
				t.Errorf("%s resource %s = %v, want %v", name, k, got.AsRaw(), v)
			}
		}
		for _, k := range []string{"team", "bad"} {
			if _, ok := res.Get(k); ok {
				t.Errorf("%s resource has %s from the discarded variable: %v", name, k, res.AsRaw())
			}
		}
		if id, _ := res.Get("service.instance.id"); id.Str() == "" {
			t.Errorf("%s resource has no service.instance.id", name)
		}
	}
	if rejected != 1 {
		t.Errorf("gpuprobe.receiver.resource.rejected = %d, want 1", rejected)
	}
	entries := logs.FilterMessage("gpuprobe: a client's resource variable is discarded").All()
	if len(entries) != 1 || !strings.Contains(entries[0].ContextMap()["error"].(string), `OTEL_RESOURCE_ATTRIBUTES: pair 3: value of "bad"`) {
		t.Errorf("log entries %v", entries)
	}
}
