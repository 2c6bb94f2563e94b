package adversarial

// Resource claims: a client whose OTEL_RESOURCE_ATTRIBUTES names another
// pod, namespace, node, container, host and process, beside an honest
// client, against the real collector (docs/security.md, "Resource
// claims").

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/e2e"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// claimedAttrs are what the claiming client says of itself: every value
// of a key only the collector or its processors may set holds "victim",
// and ordinary keys (claimKept) must pass through.
var claimedAttrs = []string{
	"k8s.pod.name=victim-0", "k8s.namespace.name=victim-ns", "k8s.pod.uid=victim-uid",
	"k8s.node.name=victim-node", "k8s.container.name=victim-ctr", "k8s.deployment.name=victim-deploy",
	"container.id=victim-cid", "container.image.name=victim-image", "host.name=victim-host",
	"host.id=victim-hostid", "cloud.region=victim-region", "process.pid=1",
	"process.executable.name=victim-exe", "process.owner=victim-owner", "process.user.id=victim-uid0",
	"service.instance.id=victim-instance", "gpuprobe.tenant=victim-tenant",
	"K8S.pod.name=victim-upper", "k8s_namespace_name=victim-underscore", "k8s%2Epod%2Ename=victim-encoded",
}

// claimKept are the claiming client's ordinary attributes, as the
// Prometheus exporter's target_info labels them.
var claimKept = map[string]string{"deployment_environment_name": "claims", "team": "claims-team"}

const claimKernel = "claimant_kernel"

// TestResourceClaims: a client that claims another pod's identity (and
// the host's, the container's, the process's and the receiver's) keeps
// being served beside an honest client, reconnecting at will; its
// exported resource (target_info) holds none of the claimed values, its
// process.pid is its own, its ordinary attributes are kept, and every
// claim is counted in the self-metrics.
func TestResourceClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: the suite builds the collector with ocb and runs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: the adversarial suite runs as root (the collector's model is a root daemon)")
	}
	s := &suite{otelcol: find(t, e2e.ToolOtelcolLean), harness: find(t, e2e.ToolHarness)}
	col := s.start(t)
	settled(t, col)
	base, err := Fds(col.Proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), Duration)
	defer cancel()
	dials := make(chan int, 1)
	claimant := make(chan error, 1)
	go func() { claimant <- claimLaunches(ctx, col.Socket) }()
	go func() { dials <- claimDials(ctx, col.Socket) }()
	pause(ctx, 500*time.Millisecond)
	honest, herr := RunHonest(t.Context(), s.harness, col.Socket, "honest_claims", 120, 30)
	<-ctx.Done()
	if err := <-claimant; err != nil {
		t.Fatalf("claiming client: %v", err)
	}
	n := 1 + <-dials // connections that sent the claims
	if herr != nil {
		t.Errorf("honest client beside the claims: %v", herr)
	} else if err := honest.Accounted(t.Context(), col.Exporter, accountWait); err != nil {
		t.Errorf("honest client beside the claims not accounted: %v", err)
	}
	if err := e2e.Eventually(t.Context(), 5*time.Second, 250*time.Millisecond, checkClaimResource(col.Exporter)); err != nil {
		t.Error(err)
	}
	// Every claimed key of every connection is counted (k8s%2Epod%2Ename
	// decodes to a later pair of k8s.pod.name, which wins: one key).
	want := float64(n * (len(claimedAttrs) - 1))
	err = e2e.Eventually(t.Context(), 5*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		fams, err := e2e.Scrape(ctx, col.Self)
		if err != nil {
			return err
		}
		got, _ := Counter(fams, "otelcol_gpuprobe_receiver_resource_attributes_dropped", nil)
		if got < want {
			return fmt.Errorf("otelcol_gpuprobe_receiver_resource_attributes_dropped = %v, want ≥ %v (%d connections)", got, want, n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	t.Logf("%d claiming connections", n)
	s.checkFds(t, col, base)
}

// claimHello is the claiming client's HELLO: its OTEL_RESOURCE_ATTRIBUTES
// carry the claims and its ordinary attributes.
func claimHello() agentwire.Hello {
	h := hello("claims")
	h.Flags |= agentwire.HelloResource
	h.ServiceName = "claimant"
	h.ResAttrs = strings.Join(claimedAttrs, ",") + ",deployment.environment.name=claims,team=claims-team"
	return h
}

// claimLaunches holds one claiming session and writes a launch of
// claimKernel every 10 ms until ctx ends.
func claimLaunches(ctx context.Context, socket string) error {
	s, err := agent.DialTimeout(socket, claimHello(), 5*time.Second)
	if err != nil {
		return err
	}
	defer s.Close()
	ring, err := shm.NewRing(s.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		return err
	}
	p := &producer{ring: ring, pid: uint32(os.Getpid()), buf: make([]byte, 0, 256)}
	p.put(&record.KernelName{Function: 1, PID: p.pid, Name: claimKernel})
	for i := uint64(1); ctx.Err() == nil; i++ {
		now := monoNS()
		p.put(&record.Launch{LaunchID: i, PID: p.pid, EnqueueNS: now, ReturnNS: now + 100, Function: 1,
			Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
		p.put(&record.Completion{LaunchID: i, CompleteNS: now + 200})
		pause(ctx, 10*time.Millisecond)
	}
	return nil
}

// claimDials reconnects with the claims every 20 ms until ctx ends (each
// connection's claims are dropped, counted and, within the rate limit,
// logged) and returns how many connections were welcomed.
func claimDials(ctx context.Context, socket string) int {
	n := 0
	for ctx.Err() == nil {
		if s, err := agent.DialTimeout(socket, claimHello(), 2*time.Second); err == nil {
			n++
			_ = s.Close()
		}
		pause(ctx, 20*time.Millisecond)
	}
	return n
}

// checkClaimResource checks the claiming process's resource as the
// Prometheus exporter shows it: the target_info of the instance whose
// series counts claimKernel.
func checkClaimResource(exporter string) func(context.Context) error {
	return func(ctx context.Context) error {
		fams, err := e2e.Scrape(ctx, exporter)
		if err != nil {
			return err
		}
		series := e2e.FindMetric(fams, "gpu_cuda_kernel_launches", map[string]string{"cuda_kernel_name": claimKernel})
		series = append(series, e2e.FindMetric(fams, "gpu_cuda_kernel_launches_total", map[string]string{"cuda_kernel_name": claimKernel})...)
		if len(series) == 0 {
			return fmt.Errorf("no gpu_cuda_kernel_launches series for %s", claimKernel)
		}
		instance := e2e.Labels(series[0])["instance"]
		infos := e2e.FindMetric(fams, "target_info", map[string]string{"instance": instance})
		if len(infos) != 1 {
			return fmt.Errorf("%d target_info series of instance %q, want 1", len(infos), instance)
		}
		got := e2e.Labels(infos[0])
		var bad []string
		for k, v := range got {
			if strings.Contains(v, "victim") {
				bad = append(bad, k+"="+v)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("the claiming client's resource carries its claims %v (target_info %v)", bad, got)
		}
		if pid := got["process_pid"]; pid != strconv.Itoa(os.Getpid()) {
			return fmt.Errorf("target_info process_pid %q, want the client's own %d", pid, os.Getpid())
		}
		for k, want := range claimKept {
			if got[k] != want {
				return fmt.Errorf("target_info %s = %q, want the client's ordinary %q (target_info %v)", k, got[k], want, got)
			}
		}
		return nil
	}
}
