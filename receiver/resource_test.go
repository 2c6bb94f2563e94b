package receiver

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// clientRun is what one client of runClient exported: the resource of
// its spans and of its metrics, and the receiver's self-metrics.
type clientRun struct {
	spanRes, metricRes pcommon.Map
	self               map[string]int64
}

// runClient starts the receiver with logs at level into core, connects a
// client with hello, has it launch one kernel, and waits until the
// launch's span and metric and the self-metric named by wait (at least 1)
// have been exported.
func runClient(t *testing.T, level zapcore.Level, hello agentwire.Hello, wait string) (clientRun, *observer.ObservedLogs) {
	t.Helper()
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	core, logs := observer.New(level)
	set := receivertest.NewNopSettings(f.Type())
	set.Logger = zap.New(core)
	tr, mr, traces, metrics := startBothWith(t, set, cfg)
	t.Cleanup(func() {
		_ = mr.Shutdown(context.Background())
		_ = tr.Shutdown(context.Background())
	})

	sess, err := agent.Dial(cfg.Agent.Socket, hello)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	ring, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
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
	run := clientRun{self: map[string]int64{}}
	waitFor(t, "the span and metric resources and "+wait, func() bool {
		for _, td := range traces.AllTraces() {
			if td.ResourceSpans().Len() > 0 {
				run.spanRes = td.ResourceSpans().At(0).Resource().Attributes()
			}
		}
		for _, md := range metrics.AllMetrics() {
			for i := range md.ResourceMetrics().Len() {
				rm := md.ResourceMetrics().At(i)
				ms := rm.ScopeMetrics().At(0).Metrics()
				for j := range ms.Len() {
					switch m := ms.At(j); {
					case m.Name() == "gpu.cuda.kernel.launches":
						run.metricRes = rm.Resource().Attributes()
					case strings.HasPrefix(m.Name(), SelfMetricPrefix) && m.Type() == pmetric.MetricTypeSum:
						run.self[m.Name()] = m.Sum().DataPoints().At(0).IntValue()
					}
				}
			}
		}
		return run.spanRes != (pcommon.Map{}) && run.metricRes != (pcommon.Map{}) && run.self[wait] >= 1
	})
	for name, res := range map[string]pcommon.Map{"span": run.spanRes, "metric": run.metricRes} {
		if res == (pcommon.Map{}) {
			t.Fatalf("no %s resource", name)
		}
	}
	return run, logs
}

// TestProcessResource: a client's spans and metrics carry one resource
// built from /proc (pid, executable) and its HELLO (service name); a
// malformed OTEL_RESOURCE_ATTRIBUTES is discarded whole, logged with its
// name and counted.
func TestProcessResource(t *testing.T) {
	run, logs := runClient(t, zap.WarnLevel, agentwire.Hello{PID: 1, Flags: agentwire.HelloResource, Name: "liar",
		ServiceName: "trainer", ResAttrs: "team=ml,process.pid=1,bad=%0A"}, "gpuprobe.receiver.resource.rejected")
	exe, _ := os.Executable()
	hostName, _ := os.Hostname()
	want := map[string]any{"process.pid": int64(os.Getpid()), "process.executable.path": exe, "service.name": "trainer",
		"host.name": hostName}
	for name, res := range map[string]pcommon.Map{"span": run.spanRes, "metric": run.metricRes} {
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
	if got := run.self["gpuprobe.receiver.resource.rejected"]; got != 1 {
		t.Errorf("gpuprobe.receiver.resource.rejected = %d, want 1", got)
	}
	entries := logs.FilterMessage("gpuprobe: a client's resource variable is discarded").All()
	if len(entries) != 1 || !strings.Contains(entries[0].ContextMap()["error"].(string), `OTEL_RESOURCE_ATTRIBUTES: pair 3: value of "bad"`) {
		t.Errorf("log entries %v", entries)
	}
}

// TestClaimedPodDropped: a client whose OTEL_RESOURCE_ATTRIBUTES names
// another pod, namespace, pod uid, node, container and host exports under
// its own resource (its pid, its instance id, the collector's host name)
// without any of the claimed attributes, so that k8s_attributes (which
// never replaces an attribute already set) finds the client's own pod by
// its container.id; its other attributes are kept, the dropped ones
// counted and listed in a debug log.
func TestClaimedPodDropped(t *testing.T) {
	const claimedCID = "ff00000000000000000000000000000000000000000000000000000000000000"
	claims := "k8s.pod.name=victim-0,k8s.namespace.name=prod,k8s.pod.uid=3b3c5d7e-1f2a-4b6c-8d9e-0a1b2c3d4e5f," +
		"K8S.node.name=node-9,container.id=" + claimedCID + ",host.name=elsewhere,cloud.region=us-east-1"
	run, logs := runClient(t, zap.DebugLevel, agentwire.Hello{PID: 1, Flags: agentwire.HelloResource, Name: "liar",
		ServiceName: "trainer", ResAttrs: claims + ",team=ml,service.version=1.2"}, "gpuprobe.receiver.resource.attributes_dropped")
	hostName, _ := os.Hostname()
	for name, res := range map[string]pcommon.Map{"span": run.spanRes, "metric": run.metricRes} {
		want := map[string]any{"process.pid": int64(os.Getpid()), "host.name": hostName, "service.name": "trainer",
			"team": "ml", "service.version": "1.2"}
		for k, v := range want {
			if got, _ := res.Get(k); got.AsRaw() != v {
				t.Errorf("%s resource %s = %v, want %v", name, k, got.AsRaw(), v)
			}
		}
		for _, k := range []string{"k8s.pod.name", "k8s.namespace.name", "k8s.pod.uid", "K8S.node.name", "k8s.node.name", "cloud.region"} {
			if v, ok := res.Get(k); ok {
				t.Errorf("%s resource has the claimed %s = %q: %v", name, k, v.AsString(), res.AsRaw())
			}
		}
		if v, _ := res.Get("container.id"); v.Str() == claimedCID {
			t.Errorf("%s resource has the claimed container.id", name)
		}
		if id, _ := res.Get("service.instance.id"); id.Str() == "" {
			t.Errorf("%s resource has no service.instance.id", name)
		}
	}
	if got := run.self["gpuprobe.receiver.resource.attributes_dropped"]; got != 7 {
		t.Errorf("gpuprobe.receiver.resource.attributes_dropped = %d, want 7", got)
	}
	if got := run.self["gpuprobe.receiver.resource.rejected"]; got != 0 {
		t.Errorf("gpuprobe.receiver.resource.rejected = %d, want 0: dropping a claim discards nothing else", got)
	}
	entries := logs.FilterMessage("gpuprobe: a client's resource attributes that the collector sets are ignored").All()
	if len(entries) != 1 || entries[0].Level != zapcore.DebugLevel {
		t.Fatalf("log entries %v, want one at debug level", entries)
	}
	keys, _ := entries[0].ContextMap()["keys"].([]any)
	if len(keys) != 7 || keys[0] != "k8s.pod.name" {
		t.Errorf("logged keys %v", keys)
	}
}
