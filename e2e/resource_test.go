package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// resourceClient is one application process of TestResourcesPerProcess.
type resourceClient struct {
	service string
	attrs   string // OTEL_RESOURCE_ATTRIBUTES
	env     string // deployment.environment.name it must carry ("": none)
	vecs    int    // app basic N: N+1 vecAdd and 2 gemm launches
	cg      ContainerCgroup
	pid     int
}

// launches counts c's kernel launches by kernel name.
func (c *resourceClient) launches() map[string]int {
	return map[string]int{"vecAdd": c.vecs + 1, "gemm": 2}
}

// roots counts the root spans c's run makes by name: its launches, its
// one cuStreamSynchronize and its one copy.
func (c *resourceClient) roots() map[string]int {
	m := c.launches()
	m["cuda.sync"], m["cuda.memcpy"] = 1, 1
	return m
}

// TestResourcesPerProcess: two processes with different
// OTEL_SERVICE_NAMEs, in different container cgroups, launching on the same
// device 0 through the real shim, are two resources: in Jaeger each span's
// process has its own service.name, process.pid, container.id and
// service.instance.id (and the extra attribute of the one that set it); in
// Prometheus each has its own launch counter series (job, instance) with its
// own counts, and its own target_info.
func TestResourcesPerProcess(t *testing.T) {
	otelcol, shim := need(t, ToolOtelcol), need(t, ToolShim)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 5*time.Minute)
	parent, cgs, err := NewContainerCgroups(2)
	if err != nil {
		t.Fatalf("%v\nthis test puts each application in a cgroup v2 of its own: it must run as root with a writable cgroup2 hierarchy (as CI does)", err)
	}
	t.Cleanup(func() {
		if err := RemoveCgroups(parent); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	app, err := BuildMockApp(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := startBackends(t, ctx)

	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	receivers := `  gpuprobe:
    agent:
      socket: ` + socket + `
      socket_mode: "0600"
    # Every launch's trace is checked: no head bound.
    sampling:
      traces_per_second_per_kernel: 0
      traces_per_second_per_process: 0
      traces_per_second_per_node: 0
    poll_interval: 5ms
    metrics_interval: 1s`
	cfg := fmt.Sprintf(exportConfig(b, ports[0], ports[1]), receivers, "gpuprobe", "gpuprobe")
	promExporter := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"
	col, err := StartCollector(ctx, otelcol, dir, cfg, func(ctx context.Context) error {
		if _, err := os.Stat(socket); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
		_, err := Scrape(ctx, promExporter)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	track(t, col)

	tag := rand.Uint32()
	clients := []*resourceClient{
		{service: fmt.Sprintf("e2e-trainer-%d", tag), attrs: "deployment.environment.name=test", env: "test", vecs: 5, cg: cgs[0]},
		{service: fmt.Sprintf("e2e-evaluator-%d", tag), vecs: 9, cg: cgs[1]},
	}
	runClients(t, ctx, app, shim, socket, clients)

	instances := map[string]string{} // service -> service.instance.id
	t.Run("jaeger", func(t *testing.T) {
		for _, c := range clients {
			instances[c.service] = checkJaegerResource(t, ctx, b.jaeger, c)
		}
		services, err := b.jaeger.Services(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clients {
			if !slices.Contains(services, c.service) {
				t.Errorf("jaeger services %v lack %q", services, c.service)
			}
		}
		a, z := instances[clients[0].service], instances[clients[1].service]
		if a == "" || a == z {
			t.Errorf("service.instance.id %q and %q, want two distinct ids", a, z)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		for _, c := range clients {
			checkPromResource(t, ctx, b.prom, c, instances[c.service])
		}
	})
}

// runClients runs the application once per client, all at once, each in
// its cgroup on device 0, and waits for them to exit.
func runClients(t *testing.T, ctx context.Context, app MockApp, shim, socket string, clients []*resourceClient) {
	t.Helper()
	type started struct {
		c    *resourceClient
		wait func() error
		out  *tailBuffer
	}
	var all []started
	for _, c := range clients {
		fd, err := os.Open(c.cg.Path)
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"OTEL_SERVICE_NAME=" + c.service, "OTEL_RESOURCE_ATTRIBUTES=" + c.attrs,
			"MOCK_DEVICE_COUNT=1", "MOCK_CURRENT_DEVICE=0"}
		cmd := app.Command(ctx, shim, socket, fd, env, "cudart", "basic", strconv.Itoa(c.vecs))
		out := &tailBuffer{max: maxLogBytes}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Start()
		fd.Close()
		if err != nil {
			t.Fatalf("starting %s in %s: %v", c.service, c.cg.Path, err)
		}
		c.pid = cmd.Process.Pid
		all = append(all, started{c, cmd.Wait, out})
	}
	for _, s := range all {
		if err := s.wait(); err != nil {
			t.Fatalf("%s (pid %d): %v\n%s", s.c.service, s.c.pid, err, s.out)
		}
		t.Logf("%s: pid %d, container %s", s.c.service, s.c.pid, s.c.cg.ID)
	}
}

// checkJaegerResource checks c's spans in Jaeger: exactly its launches, on
// device 0, every span's process being c's resource. It returns the
// service.instance.id of that resource.
func checkJaegerResource(t *testing.T, ctx context.Context, j *Jaeger, c *resourceClient) string {
	t.Helper()
	want := c.roots()
	var traces []JaegerTrace
	err := Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		ts, err := j.Traces(ctx, c.service, 1000)
		if err != nil {
			return err
		}
		if got := rootNames(ts); !maps.Equal(got, want) {
			return fmt.Errorf("%s: root spans by name %v, want %v", c.service, got, want)
		}
		traces = ts
		return nil
	})
	if err != nil {
		t.Error(err)
		return ""
	}
	instance := ""
	for _, tr := range traces {
		for _, s := range tr.Spans {
			p, ok := tr.Processes[s.ProcessID]
			if !ok {
				t.Errorf("%s: span %s has process %q, not in its trace", c.service, s.OperationName, s.ProcessID)
				continue
			}
			if p.ServiceName != c.service {
				t.Errorf("%s: span %s: service.name %q", c.service, s.OperationName, p.ServiceName)
			}
			checkTag(t, c.service, p, "process.pid", float64(c.pid))
			checkTag(t, c.service, p, "container.id", c.cg.ID)
			if c.env != "" {
				checkTag(t, c.service, p, "deployment.environment.name", c.env)
			} else if v, ok := p.Tag("deployment.environment.name"); ok {
				t.Errorf("%s: deployment.environment.name = %v, want none", c.service, v)
			}
			id, _ := p.Tag("service.instance.id")
			if sid, _ := id.(string); sid == "" || instance != "" && sid != instance {
				t.Errorf("%s: service.instance.id %v, want one id for every span (first %q)", c.service, id, instance)
			} else {
				instance = sid
			}
			if _, launch := c.launches()[s.OperationName]; launch && s.Parent() == "" {
				if v, ok := s.Tag("cuda.device.index"); !ok || v != float64(0) {
					t.Errorf("%s: span %s: cuda.device.index = %v (present %v), want 0", c.service, s.OperationName, v, ok)
				}
			}
		}
	}
	return instance
}

// checkTag checks that resource attribute key of p is want.
func checkTag(t *testing.T, service string, p JaegerProcess, key string, want any) {
	t.Helper()
	if v, ok := p.Tag(key); !ok || v != want {
		t.Errorf("%s: resource %s = %v (present %v), want %v", service, key, v, ok, want)
	}
}

// rootNames counts the root spans of traces by name.
func rootNames(traces []JaegerTrace) map[string]int {
	n := map[string]int{}
	for _, tr := range traces {
		for _, s := range tr.Spans {
			if s.Parent() == "" {
				n[s.OperationName]++
			}
		}
	}
	return n
}

// checkPromResource checks c's series in Prometheus: one launch counter
// series per kernel, all of job c.service and instance (c's
// service.instance.id), with c's counts; and one target_info of that job and
// instance with c's container.id, pid and extra attribute.
func checkPromResource(t *testing.T, ctx context.Context, p *Prometheus, c *resourceClient, instance string) {
	t.Helper()
	q := fmt.Sprintf(`sum by (job, instance, cuda_kernel_name) (gpu_cuda_kernel_launches_total{job=%q})`, c.service)
	err := Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		s, err := p.Query(ctx, q)
		if err != nil {
			return err
		}
		got := map[string]int{}
		for _, x := range s {
			if x.Metric["instance"] != instance {
				return fmt.Errorf("%s: series %v, want instance %q (the spans' service.instance.id)", q, x.Metric, instance)
			}
			got[x.Metric["cuda_kernel_name"]] += int(x.Value)
		}
		if len(s) != len(c.launches()) || !maps.Equal(got, c.launches()) {
			return fmt.Errorf("%s = %+v, want one series per kernel with %v", q, s, c.launches())
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	q = fmt.Sprintf(`target_info{job=%q}`, c.service)
	err = Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		s, err := p.Query(ctx, q)
		if err != nil {
			return err
		}
		if len(s) != 1 {
			return fmt.Errorf("%s = %+v, want one series", q, s)
		}
		want := map[string]string{"instance": instance, "container_id": c.cg.ID,
			"process_pid": strconv.Itoa(c.pid), "deployment_environment_name": c.env}
		for k, v := range want {
			if s[0].Metric[k] != v {
				return fmt.Errorf("%s: %s = %q, want %q (labels %v)", q, k, s[0].Metric[k], v, s[0].Metric)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
