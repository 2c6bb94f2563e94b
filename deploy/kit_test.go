package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ofKind returns the one object of kind in objs, or fails.
func ofKind(t *testing.T, objs []obj, kind string) obj {
	t.Helper()
	var found []obj
	for _, o := range objs {
		if o["kind"] == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s, got %d", kind, len(found))
	}
	return found[0]
}

// deprecatedExporters maps the exporter aliases the collector warns about
// at every start to their names (collector v0.161.0's otlpexporter and
// otlphttpexporter metadata).
var deprecatedExporters = map[string]string{"otlp": "otlp_grpc", "otlphttp": "otlp_http"}

// checkExporters checks that no exporter goes by a deprecated alias.
func checkExporters(t *testing.T, c obj) {
	t.Helper()
	exporters, _ := get(c, "exporters").(map[string]any)
	for id := range exporters {
		typ, _, _ := strings.Cut(id, "/")
		if name, ok := deprecatedExporters[typ]; ok {
			t.Errorf("exporters::%s: %s is a deprecated alias: name it %s", id, typ, name)
		}
	}
}

// portOf returns the number after the last colon of a host:port endpoint.
func portOf(endpoint string) float64 {
	var p float64
	if i := strings.LastIndex(endpoint, ":"); i >= 0 {
		fmt.Sscan(endpoint[i+1:], &p)
	}
	return p
}

// containerPort resolves a probe's or a Service's port (a name or a
// number) to the container's port number.
func containerPort(ctr any, port any) float64 {
	if n, ok := port.(float64); ok {
		return n
	}
	p, _ := get(byName(list(ctr, "ports"), fmt.Sprint(port)), "containerPort").(float64)
	return p
}

// checkHealthProbes checks that the health_check extension is on, listens
// where the kubelet reaches it (the pod's address, not loopback), and that
// the liveness and readiness probes ask it.
func checkHealthProbes(t *testing.T, c obj, ctr any) {
	t.Helper()
	if !slices.Contains(list(c, "service", "extensions"), any("health_check")) {
		t.Errorf("service::extensions %v: want health_check", list(c, "service", "extensions"))
	}
	ep := str(c, "extensions", "health_check", "endpoint")
	if ep == "" || strings.HasPrefix(ep, "localhost:") || strings.HasPrefix(ep, "127.") {
		t.Errorf("extensions::health_check::endpoint %q: the kubelet probes the pod's address: want ${env:POD_IP}:<port>", ep)
	}
	path := str(c, "extensions", "health_check", "path")
	if path == "" {
		path = "/"
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		h := get(ctr, probe, "httpGet")
		if str(h, "path") != path || containerPort(ctr, get(h, "port")) != portOf(ep) {
			t.Errorf("otelcol: %s %v: want httpGet %s on health_check's port %v", probe, get(ctr, probe), path, portOf(ep))
		}
	}
}

// scrapePorts returns the ports Prometheus must scrape on each collector:
// the prometheus exporter's and the collector's own telemetry's.
func scrapePorts(c obj) []float64 {
	ports := []float64{portOf(str(c, "exporters", "prometheus", "endpoint"))}
	for _, r := range list(c, "service", "telemetry", "metrics", "readers") {
		if p, ok := get(r, "pull", "exporter", "prometheus", "port").(float64); ok {
			ports = append(ports, p)
		}
	}
	return ports
}

// selects reports whether a Service's selector picks the pods of labels.
func selects(svc obj, labels any) bool {
	sel, _ := get(svc, "spec", "selector").(map[string]any)
	for k, v := range sel {
		if get(labels, k) != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkScrape checks that a Service over the DaemonSet's pods carries
// every port of scrapePorts, annotated for Prometheus with no
// prometheus.io/port (which would narrow the scrape to one of them), and
// that the pods carry no scrape annotation of their own (two jobs would
// scrape them twice).
func checkScrape(t *testing.T, objs []obj, ds, ctr any, c obj) {
	t.Helper()
	labels := get(ds, "spec", "template", "metadata", "labels")
	if get(ds, "spec", "template", "metadata", "annotations", "prometheus.io/scrape") != nil {
		t.Error("DaemonSet: the pods carry prometheus.io/scrape: the Service is what Prometheus scrapes")
	}
	var svc obj
	for _, o := range objs {
		if o["kind"] == "Service" && selects(o, labels) {
			svc = o
		}
	}
	if svc == nil {
		t.Fatal("no Service selects the DaemonSet's pods (Prometheus finds the collectors through it)")
	}
	if str(svc, "metadata", "annotations", "prometheus.io/scrape") != "true" || get(svc, "metadata", "annotations", "prometheus.io/port") != nil {
		t.Errorf("Service %s: annotations %v: want prometheus.io/scrape \"true\" and no prometheus.io/port",
			str(svc, "metadata", "name"), get(svc, "metadata", "annotations"))
	}
	for _, want := range scrapePorts(c) {
		if !slices.ContainsFunc(list(svc, "spec", "ports"), func(p any) bool { return containerPort(ctr, get(p, "targetPort")) == want }) {
			t.Errorf("Service %s: no port targets the collector's %v", str(svc, "metadata", "name"), want)
		}
	}
}

// maxUserPriority is the highest value a PriorityClass outside the
// system's may have.
const maxUserPriority = 1_000_000_000

// checkPriority checks that the pods' priority class is one of the
// manifest's own, not a system class (which quota may keep to kube-system).
func checkPriority(t *testing.T, objs []obj, spec any) {
	t.Helper()
	name := str(spec, "priorityClassName")
	if strings.HasPrefix(name, "system-") {
		t.Errorf("DaemonSet: priorityClassName %s: clusters that keep system classes to kube-system refuse it", name)
		return
	}
	pc := find(t, objs, "PriorityClass", name)
	if v, _ := get(pc, "value").(float64); v <= 0 || v > maxUserPriority || get(pc, "globalDefault") == true {
		t.Errorf("PriorityClass %s: value %v, globalDefault %v: want 0 < value <= %d, not the default", name, v, get(pc, "globalDefault"), maxUserPriority)
	}
}

// checkPodSecurity checks a namespace's Pod Security labels: privileged
// enforced (hostPID, hostPath volumes and capabilities are each refused at
// baseline), baseline warned about and audited.
func checkPodSecurity(t *testing.T, ns obj) {
	t.Helper()
	want := map[string]string{"enforce": "privileged", "warn": "baseline", "audit": "baseline"}
	for mode, level := range want {
		if got := str(ns, "metadata", "labels", "pod-security.kubernetes.io/"+mode); got != level {
			t.Errorf("Namespace %s: pod-security.kubernetes.io/%s %q, want %q", str(ns, "metadata", "name"), mode, got, level)
		}
	}
}

// makeVar matches a `NAME ?= value` line of the Makefile.
var makeVar = regexp.MustCompile(`(?m)^([A-Z_]+) \?= (.*)$`)

// makeImage returns the Makefile's default IMAGE_TAG, its variables
// expanded.
func makeImage(t *testing.T) string {
	t.Helper()
	vars := map[string]string{}
	for _, m := range makeVar.FindAllStringSubmatch(readFile(t, "../Makefile"), -1) {
		vars[m[1]] = m[2]
	}
	ref := vars["IMAGE_TAG"]
	for k, v := range vars {
		ref = strings.ReplaceAll(ref, "$("+k+")", v)
	}
	return ref
}

// checkImages checks that every container of the gpuprobe image names
// the same reference, the one make image builds, with a registry: an
// unqualified name is pulled from Docker Hub, or refused where
// short names must be qualified.
func checkImages(t *testing.T, objs []obj) {
	t.Helper()
	want := makeImage(t)
	if host, _, _ := strings.Cut(want, "/"); !strings.ContainsAny(host, ".:") && host != "localhost" {
		t.Errorf("Makefile's IMAGE_TAG %q names no registry", want)
	}
	n := 0
	for _, o := range objs {
		spec := get(o, "spec")
		if o["kind"] == "DaemonSet" {
			spec = get(o, "spec", "template", "spec")
		}
		for _, c := range append(list(spec, "initContainers"), list(spec, "containers")...) {
			img := str(c, "image")
			if !strings.Contains(img, "/gpuprobe:") {
				continue
			}
			n++
			if img != want {
				t.Errorf("%v %v: container %s: image %q, want %q (make image's IMAGE_TAG)", o["kind"], str(o, "metadata", "name"), str(c, "name"), img, want)
			}
		}
	}
	if n == 0 {
		t.Error("no container runs the gpuprobe image")
	}
}

// TestChartTwoInstalls: releases of the same name in two namespaces share
// no cluster-scoped object.
func TestChartTwoInstalls(t *testing.T) {
	seen := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		for _, o := range render(t, "gpuprobe", ns, nil) {
			if !slices.Contains(clusterScoped, str(o, "kind")) {
				continue
			}
			id := str(o, "kind") + "/" + str(o, "metadata", "name")
			if other, ok := seen[id]; ok {
				t.Errorf("%s: rendered by the releases in %s and %s", id, other, ns)
			}
			seen[id] = ns
		}
	}
}

// TestChartPriorityClassName: a class named in the values replaces the
// chart's own; none at all leaves the pods at the cluster's default.
func TestChartPriorityClassName(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"priorityClassName": "system-node-critical"}, "system-node-critical"},
		{map[string]any{"priorityClass": map[string]any{"create": false}}, ""},
	} {
		objs := render(t, "gpuprobe", "kube-system", tc.vals)
		if slices.ContainsFunc(objs, func(o obj) bool { return o["kind"] == "PriorityClass" }) {
			t.Errorf("%v: the chart still renders its PriorityClass", tc.vals)
		}
		ds := find(t, objs, "DaemonSet", "gpuprobe")
		if got := str(ds, "spec", "template", "spec", "priorityClassName"); got != tc.want {
			t.Errorf("%v: priorityClassName %q, want %q", tc.vals, got, tc.want)
		}
	}
}

// TestChartServiceMonitor: the ServiceMonitor selects the Service and
// scrapes each of its ports.
func TestChartServiceMonitor(t *testing.T) {
	objs := render(t, "gpuprobe", "monitoring", map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
	})
	sm := find(t, objs, "ServiceMonitor", "gpuprobe")
	svc := find(t, objs, "Service", "gpuprobe")
	if str(sm, "metadata", "labels", "release") != "prom" {
		t.Errorf("ServiceMonitor: labels %v: want serviceMonitor.labels", get(sm, "metadata", "labels"))
	}
	sel, _ := get(sm, "spec", "selector", "matchLabels").(map[string]any)
	for k, v := range sel {
		if get(svc, "metadata", "labels", k) != v {
			t.Errorf("ServiceMonitor: selector %v does not select the Service (labels %v)", sel, get(svc, "metadata", "labels"))
		}
	}
	var ports, scraped []string
	for _, p := range list(svc, "spec", "ports") {
		ports = append(ports, str(p, "name"))
	}
	for _, e := range list(sm, "spec", "endpoints") {
		scraped = append(scraped, str(e, "port"))
	}
	if !slices.Equal(ports, scraped) {
		t.Errorf("ServiceMonitor: scrapes ports %v, the Service has %v", scraped, ports)
	}
}
