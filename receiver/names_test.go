package receiver

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// TestLongKernelNames: a name longer than a launch-ring slot arrives whole
// through the names ring; one cut by a producer without it is marked and
// counted.
func TestLongKernelNames(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	traces := new(consumertest.TracesSink)
	tr, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, traces)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "names"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	launches, err := shm.NewRing(sess.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	names, err := shm.NewRing(sess.Region(RoleNameRing, "names"))
	if err != nil {
		t.Fatal(err)
	}
	if names.MaxPayload() < record.MaxKernelNameSize {
		t.Fatalf("names ring payload %d < %d", names.MaxPayload(), record.MaxKernelNameSize)
	}
	// ns::xxx…x(float*) with a 300-byte identifier
	long := "_ZN2ns" + "300" + strings.Repeat("x", 300) + "EPf"
	if len(long) <= launches.MaxPayload() {
		t.Fatalf("test name of %d bytes fits a launch slot", len(long))
	}
	pid := uint32(os.Getpid())
	whole := (&record.KernelName{Function: 1, PID: pid, Name: long}).AppendFit(nil, names.MaxPayload())
	if r := names.Produce(uint32(record.TypeKernelName), whole); r != shm.Published {
		t.Fatal(r)
	}
	cut := (&record.KernelName{Function: 2, PID: pid, Name: long}).AppendFit(nil, launches.MaxPayload())
	if r := launches.Produce(uint32(record.TypeKernelName), cut); r != shm.Published {
		t.Fatal(r)
	}
	now := monoNow(t)
	for fn := range uint64(2) {
		l := &record.Launch{LaunchID: fn + 1, PID: pid, EnqueueNS: now, ReturnNS: now + 100, Function: fn + 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
		launches.Produce(uint32(record.TypeLaunch), l.Append(nil))
		c := &record.Completion{LaunchID: fn + 1, CompleteNS: now + 200}
		launches.Produce(uint32(record.TypeCompletion), c.Append(nil))
	}
	waitFor(t, "six spans", func() bool { return traces.SpanCount() >= 6 })
	got := map[string]string{} // span name → mangled_name attribute
	for _, td := range traces.AllTraces() {
		ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
		for i := range ss.Len() {
			if v, ok := ss.At(i).Attributes().Get("cuda.kernel.mangled_name"); ok {
				got[ss.At(i).Name()] = v.Str()
			}
		}
	}
	wantWhole := "ns::" + strings.Repeat("x", 300)
	if got[wantWhole] != long {
		t.Errorf("whole name: spans %v", got)
	}
	var marked bool
	for name, mangled := range got {
		if strings.HasSuffix(name, translate.TruncatedMarker) && strings.HasPrefix(long, strings.TrimSuffix(mangled, translate.TruncatedMarker)) {
			marked = true
		}
	}
	if !marked {
		t.Errorf("no span with a marked truncated name: %v", got)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := tr.(*handle).r
	if n := r.sh.counters().NamesTruncated; n != 1 {
		t.Errorf("truncated names counted %d, want 1", n)
	}
}

// TestNameBeforeLaunch: a kernel's name published after a poll read the
// names ring, and its launch published after that (a shim thread running
// between the two reads), is still read before the launch: the launch
// waits for the next poll instead of being named by its handle.
func TestNameBeforeLaunch(t *testing.T) {
	f := NewFactory()
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = false
	traces := new(consumertest.TracesSink)
	tr, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, traces)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hooked := make(chan struct{})
	testHookNamesRead = func(s *source) {
		once.Do(func() {
			pid := uint32(os.Getpid())
			k := (&record.KernelName{Function: 7, PID: pid, Name: "_Z4racev"}).Append(nil)
			s.names.ring.Produce(uint32(record.TypeKernelName), k)
			now := monoNow(t)
			l := &record.Launch{LaunchID: 1, PID: pid, EnqueueNS: now, ReturnNS: now + 100, Function: 7,
				Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
			s.launch.ring.Produce(uint32(record.TypeLaunch), l.Append(nil))
			c := &record.Completion{LaunchID: 1, CompleteNS: now + 200}
			s.launch.ring.Produce(uint32(record.TypeCompletion), c.Append(nil))
			close(hooked)
		})
	}
	defer func() { testHookNamesRead = func(*source) {} }()
	if err := tr.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "race"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	<-hooked
	waitFor(t, "three spans", func() bool { return traces.SpanCount() >= 3 })
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, td := range traces.AllTraces() {
		ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
		for i := range ss.Len() {
			if _, ok := ss.At(i).Attributes().Get("cuda.kernel.mangled_name"); ok {
				names = append(names, ss.At(i).Name())
			}
		}
	}
	if len(names) != 1 || names[0] != "race" {
		t.Errorf("launch spans %q, want one named race", names)
	}
}
