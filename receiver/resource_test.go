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

// ownValue marks a key of which the collector sets a value of its own that
// the test does not spell out.
const ownValue = "(the collector's own)"

// TestPeerDropsProtected: whichever protected key a client sets in its
// OTEL_RESOURCE_ATTRIBUTES, its resource does not carry the client's
// value (the collector's own value, where it has one, stays), while its
// ordinary attributes pass through; every drop is counted.
func TestPeerDropsProtected(t *testing.T) {
	const cid = "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff"
	const uid = "3b3c5d7e-1f2a-4b6c-8d9e-0a1b2c3d4e5f"
	cgroup := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
		strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + cid + ".scope\n"
	ordinary := map[string]any{"service.name": "trainer", "service.version": "2.1",
		"deployment.environment": "prod", "deployment.environment.name": "prod", "team": "ml"}
	tests := []struct {
		key  string
		kept any // the collector's value of key (nil: none)
	}{
		{"k8s.pod.name", nil},
		{"k8s.namespace.name", nil},
		{"k8s.pod.uid", uid},
		{"k8s.node.name", nil},
		{"k8s.container.name", nil},
		{"k8s.deployment.name", nil},
		{"k8s.cluster.name", nil},
		{"container.id", cid},
		{"container.name", nil},
		{"container.image.name", nil},
		{"host.name", "node-7"},
		{"host.id", nil},
		{"host.ip", nil},
		{"cloud.region", nil},
		{"cloud.account.id", nil},
		{"process.pid", int64(4242)},
		{"process.parent_pid", nil},
		{"process.owner", nil},
		{"process.user.id", nil},
		{"process.executable.name", "python3"},
		{"process.executable.path", "/usr/bin/python3"},
		{"service.instance.id", ownValue},
		{"gpuprobe.receiver.version", nil},
		{"otelcol.component.id", nil},
		{"K8S.pod.name", nil},
		{"k8s_pod_name", nil},
		{"k8s%2Epod%2Ename", nil},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			rs := &resources{hostName: "node-7"}
			p := &agent.Peer{PID: 4242, Session: 1, Proc: agent.ProcInfo{Start: 99, ExePath: "/usr/bin/python3", Cgroup: cgroup},
				Hello: agentwire.Hello{Flags: agentwire.HelloResource, ServiceName: "trainer",
					ResAttrs: tc.key + "=victim,service.version=2.1,deployment.environment=prod,deployment.environment.name=prod,team=ml"}}
			core, logs := observer.New(zap.DebugLevel)
			res := rs.peer(p, "", zap.New(core)).Resource
			for k, v := range res.All() {
				if v.AsString() == "victim" {
					t.Errorf("resource %s = victim, from the client's %s: %v", k, tc.key, res.AsRaw())
				}
			}
			decoded := strings.ReplaceAll(tc.key, "%2E", ".")
			switch v, ok := res.Get(decoded); {
			case tc.kept == nil && ok:
				t.Errorf("resource has %s = %v", decoded, v.AsRaw())
			case tc.kept == ownValue && !ok:
				t.Errorf("resource has no %s of the collector's", decoded)
			case tc.kept != nil && tc.kept != ownValue && v.AsRaw() != tc.kept:
				t.Errorf("resource %s = %v, want the collector's %v", decoded, v.AsRaw(), tc.kept)
			}
			for k, want := range ordinary {
				if v, _ := res.Get(k); v.AsRaw() != want {
					t.Errorf("ordinary %s = %v, want %v", k, v.AsRaw(), want)
				}
			}
			if got := rs.dropped.Load(); got != 1 {
				t.Errorf("dropped %d, want 1", got)
			}
			if got := rs.rejected.Load(); got != 0 {
				t.Errorf("rejected %d, want 0", got)
			}
			if n := logs.FilterLevelExact(zapcore.DebugLevel).Len(); n != 1 {
				t.Errorf("%d debug logs, want 1", n)
			}
		})
	}
}

// TestClaimLogBounded: a client reconnecting with claims is counted every
// time but logged within the rate limit, and the next report says how
// many were left out.
func TestClaimLogBounded(t *testing.T) {
	rs := &resources{hostName: "node-7"}
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	p := &agent.Peer{PID: 7, Hello: agentwire.Hello{Flags: agentwire.HelloResource, ResAttrs: "k8s.pod.name=victim,bad=%0A"}}
	const n = 1000
	for range n {
		rs.peer(p, "", log)
	}
	if got := rs.rejected.Load(); got != n {
		t.Errorf("rejected %d, want %d", got, n)
	}
	if got := logs.Len(); got > stateLogBurst+2 {
		t.Errorf("%d log entries for %d connections, want at most %d", got, n, stateLogBurst+2)
	}
	// A second later a report is let through, saying what was left out.
	rs.logs.lim.last = rs.logs.lim.last.Add(-stateLogEvery)
	logs.TakeAll()
	rs.peer(p, "", log)
	entries := logs.FilterMessage("gpuprobe: a client's resource variable is discarded").All()
	if len(entries) != 1 {
		t.Fatalf("after a second: %d warnings, want 1", len(entries))
	}
	if got, _ := entries[0].ContextMap()["reports_suppressed"].(int64); got != n-stateLogBurst {
		t.Errorf("reports_suppressed %v, want %d", entries[0].ContextMap()["reports_suppressed"], n-stateLogBurst)
	}
}
