package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

// obj is one Kubernetes object as decoded YAML.
type obj = map[string]any

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseObjects decodes a multi-document manifest, skipping empty documents.
func parseObjects(t *testing.T, name, text string) []obj {
	t.Helper()
	var out []obj
	for i, doc := range docSep.Split(text, -1) {
		var o obj
		if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

// get walks o along keys (map keys, or decimal indexes of lists).
func get(o any, keys ...string) any {
	for _, k := range keys {
		switch v := o.(type) {
		case map[string]any:
			o = v[k]
		case []any:
			var i int
			if _, err := fmt.Sscan(k, &i); err != nil || i >= len(v) {
				return nil
			}
			o = v[i]
		default:
			return nil
		}
	}
	return o
}

func str(o any, keys ...string) string {
	s, _ := get(o, keys...).(string)
	return s
}

func list(o any, keys ...string) []any {
	l, _ := get(o, keys...).([]any)
	return l
}

// find returns the object of that kind and name, or fails.
func find(t *testing.T, objs []obj, kind, name string) obj {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s %q", kind, name)
	return nil
}

// byName returns the element of l whose "name" is name.
func byName(l []any, name string) any {
	for _, e := range l {
		if str(e, "name") == name {
			return e
		}
	}
	return nil
}

var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}

// checkObjects checks the fields every object needs to be applied.
func checkObjects(t *testing.T, name string, objs []obj) {
	t.Helper()
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", name)
	}
	for i, o := range objs {
		where := fmt.Sprintf("%s: object %d (%v %v)", name, i, o["kind"], get(o, "metadata", "name"))
		if str(o, "apiVersion") == "" || str(o, "kind") == "" || str(o, "metadata", "name") == "" {
			t.Errorf("%s: apiVersion, kind and metadata.name are required", where)
		}
		if ns := str(o, "metadata", "namespace"); slices.Contains(clusterScoped, str(o, "kind")) != (ns == "") {
			t.Errorf("%s: metadata.namespace %q: wrong for a %s", where, ns, o["kind"])
		}
	}
}

// collectorConfig is what the checks need of the collector's configuration.
type collectorConfig struct {
	socket    string
	gids      []any
	patchMem  float64
	limiterMB float64
	raw       obj
}

func parseConfig(t *testing.T, text string) collectorConfig {
	t.Helper()
	var c obj
	if err := yaml.UnmarshalStrict([]byte(text), &c); err != nil {
		t.Fatalf("collector config: %v", err)
	}
	agent := get(c, "receivers", "gpuprobe", "agent")
	pm, _ := get(agent, "max_patch_memory").(float64)
	lm, _ := get(c, "processors", "memory_limiter", "limit_mib").(float64)
	cc := collectorConfig{socket: str(agent, "socket"), gids: list(agent, "allowed_gids"), patchMem: pm, limiterMB: lm, raw: c}
	checkAssociation(t, c)
	// passthrough: true would only tag the peer's IP, adding no pod
	// attributes; the pod's must come from the processor's lookup.
	if pt, ok := get(c, "processors", "k8s_attributes", "passthrough").(bool); !ok || pt {
		t.Errorf("k8s_attributes::passthrough: want false, set explicitly, got %v", get(c, "processors", "k8s_attributes", "passthrough"))
	}
	return cc
}

// associationSources are the resource attributes k8s_attributes finds the
// pod by, in order: both are what the receiver reads itself from the
// process's cgroup, never the application's word.
var associationSources = []string{"k8s.pod.uid", "container.id"}

// checkAssociation checks that k8s_attributes is authoritative for the
// pod: it associates on associationSources alone, one rule each, and
// every pipeline that runs it takes data from the gpuprobe receiver
// alone. The processor never replaces an attribute already set, so
// another receiver's clients (OTLP's) would keep the k8s.* they set
// themselves; the gpuprobe receiver drops them.
func checkAssociation(t *testing.T, c obj) {
	t.Helper()
	assoc := list(c, "processors", "k8s_attributes", "pod_association")
	ok := len(assoc) == len(associationSources)
	for i, name := range associationSources {
		n := strconv.Itoa(i)
		ok = ok && len(list(assoc, n, "sources")) == 1 &&
			str(assoc, n, "sources", "0", "from") == "resource_attribute" && str(assoc, n, "sources", "0", "name") == name
	}
	if !ok {
		t.Errorf("k8s_attributes::pod_association: want one rule on each resource_attribute of %v, in order, got %v",
			associationSources, assoc)
	}
	pipelines, _ := get(c, "service", "pipelines").(map[string]any)
	for name, p := range pipelines {
		if !slices.Contains(list(p, "processors"), any("k8s_attributes")) {
			continue
		}
		if rs := list(p, "receivers"); len(rs) != 1 || rs[0] != "gpuprobe" {
			t.Errorf("service::pipelines::%s runs k8s_attributes on data of receivers %v: want gpuprobe alone "+
				"(the processor keeps the k8s.* attributes other receivers' clients set)", name, rs)
		}
	}
}

// quantity parses the Mi/Gi memory quantities the manifests use.
func quantity(t *testing.T, q string) float64 {
	t.Helper()
	var n float64
	for suf, mul := range map[string]float64{"Mi": 1 << 20, "Gi": 1 << 30} {
		if v, ok := strings.CutSuffix(q, suf); ok {
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n * mul
			}
		}
	}
	t.Fatalf("memory quantity %q: want <n>Mi or <n>Gi", q)
	return 0
}

// checkDaemonSet checks that the DaemonSet and its configuration agree:
// socket directory, group, memory, RBAC subject, probes, scrape targets.
func checkDaemonSet(t *testing.T, objs []obj, name, ns string) collectorConfig {
	t.Helper()
	cm := find(t, objs, "ConfigMap", name)
	cfg := parseConfig(t, str(cm, "data", "config.yaml"))
	ds := find(t, objs, "DaemonSet", name)
	spec := get(ds, "spec", "template", "spec")
	if get(spec, "hostPID") != true {
		t.Error("DaemonSet: hostPID must be true (SO_PEERCRED pids and /proc/PID of the clients)")
	}
	if str(spec, "serviceAccountName") != name {
		t.Errorf("DaemonSet: serviceAccountName %q, want %q", str(spec, "serviceAccountName"), name)
	}
	find(t, objs, "ServiceAccount", name)
	// Cluster-scoped objects carry the namespace in their name: two
	// installs in two namespaces must not share them.
	cluster := name + "-" + ns
	crb := find(t, objs, "ClusterRoleBinding", cluster)
	if str(crb, "subjects", "0", "name") != name || str(crb, "subjects", "0", "namespace") != ns ||
		str(crb, "roleRef", "name") != cluster {
		t.Errorf("ClusterRoleBinding: subject %v, role %v, want %s/%s and %s", get(crb, "subjects"), get(crb, "roleRef", "name"), ns, name, cluster)
	}
	checkRBAC(t, find(t, objs, "ClusterRole", cluster))

	ctr := byName(list(spec, "containers"), "otelcol")
	if ctr == nil {
		t.Fatal("DaemonSet: no container otelcol")
	}
	dir := path.Dir(cfg.socket)
	vol := mountedVolume(spec, ctr, dir)
	if str(vol, "hostPath", "path") != dir {
		t.Errorf("DaemonSet: %s (agent::socket's directory) must be a hostPath of the same path, got volume %v", dir, vol)
	}
	gid, _ := get(ctr, "securityContext", "runAsGroup").(float64)
	if get(ctr, "securityContext", "runAsUser") != float64(0) || !slices.Contains(cfg.gids, any(gid)) {
		t.Errorf("otelcol: runs as %v:%v, want root with a group of agent::allowed_gids %v",
			get(ctr, "securityContext", "runAsUser"), gid, cfg.gids)
	}
	limit := quantity(t, str(ctr, "resources", "limits", "memory"))
	bound := cfg.patchMem + 512<<20 // docs/security.md, "Stated bounds"
	if cfg.patchMem == 0 || limit <= bound || cfg.limiterMB*(1<<20) <= bound || cfg.limiterMB*(1<<20) >= limit {
		t.Errorf("memory: want max_patch_memory + 512 MiB (%v MiB) < memory_limiter (%v MiB) < limit (%v MiB)",
			bound/(1<<20), cfg.limiterMB, limit/(1<<20))
	}
	if env := byName(list(ctr, "env"), "K8S_NODE_NAME"); str(env, "valueFrom", "fieldRef", "fieldPath") != "spec.nodeName" {
		t.Error("otelcol: K8S_NODE_NAME must come from spec.nodeName (k8s_attributes' node filter)")
	}
	checkExporters(t, cfg.raw)
	checkHealthProbes(t, cfg.raw, ctr)
	checkScrape(t, objs, ds, ctr, cfg.raw)
	checkPriority(t, objs, spec)
	return cfg
}

// mountedVolume returns the volume that ctr mounts at dir.
func mountedVolume(spec, ctr any, dir string) any {
	for _, m := range list(ctr, "volumeMounts") {
		if str(m, "mountPath") == dir {
			return byName(list(spec, "volumes"), str(m, "name"))
		}
	}
	return nil
}

// checkRBAC checks what k8s_attributes and resource_detection read.
func checkRBAC(t *testing.T, role obj) {
	t.Helper()
	need := map[string][]string{"pods": {"list", "watch"}, "namespaces": {"list", "watch"}, "nodes": {"get"}, "replicasets": {"list", "watch"}}
	for res, verbs := range need {
		ok := false
		for _, r := range list(role, "rules") {
			if !slices.Contains(list(r, "resources"), any(res)) {
				continue
			}
			ok = true
			for _, v := range verbs {
				ok = ok && slices.Contains(list(r, "verbs"), any(v))
			}
		}
		if !ok {
			t.Errorf("ClusterRole: %s needs %v", res, verbs)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestManifests(t *testing.T) {
	objs := parseObjects(t, "gpuprobe.yaml", readFile(t, "kubernetes/gpuprobe.yaml"))
	checkObjects(t, "gpuprobe.yaml", objs)
	find(t, objs, "Namespace", "gpuprobe")
	cfg := checkDaemonSet(t, objs, "gpuprobe", "gpuprobe")

	// The ConfigMap carries config.yaml as it is.
	if got, want := str(find(t, objs, "ConfigMap", "gpuprobe"), "data", "config.yaml"), readFile(t, "kubernetes/config.yaml"); got != want {
		t.Errorf("gpuprobe.yaml's ConfigMap differs from kubernetes/config.yaml: copy the file in, indented by 4")
	}

	checkPodSecurity(t, find(t, objs, "Namespace", "gpuprobe"))

	pod := parseObjects(t, "gpu-pod.yaml", readFile(t, "kubernetes/gpu-pod.yaml"))
	checkObjects(t, "gpu-pod.yaml", pod)
	app := ofKind(t, pod, "Pod")
	checkGPUPod(t, app, cfg)
	checkPodSecurity(t, find(t, pod, "Namespace", str(app, "metadata", "namespace")))
	checkImages(t, append(objs, pod...))
}

// checkGPUPod checks the shim's wiring in a GPU pod: an init container
// installs the shim into a volume the application preloads it from, and
// the application sees the collector's socket and may connect to it.
func checkGPUPod(t *testing.T, pod obj, cfg collectorConfig) {
	t.Helper()
	spec := get(pod, "spec")
	init := list(spec, "initContainers")
	if len(init) != 1 || !slices.Contains(list(init[0], "command"), any("install-shim")) {
		t.Fatalf("GPU pod: want one init container running gpuprobe install-shim, got %v", init)
	}
	cmd := list(init[0], "command")
	shimDir := cmd[len(cmd)-1].(string)
	shimVol := mountedVolume(spec, init[0], shimDir)
	if shimVol == nil {
		t.Fatalf("GPU pod: the init container installs into %s, which is no volume", shimDir)
	}
	app := list(spec, "containers")[0]
	env := list(app, "env")
	preload := str(byName(env, "LD_PRELOAD"), "value")
	if preload != shimDir+"/libgpuprobe.so" {
		t.Errorf("GPU pod: LD_PRELOAD %q, want %s/libgpuprobe.so", preload, shimDir)
	}
	if v := mountedVolume(spec, app, path.Dir(preload)); str(v, "name") != str(shimVol, "name") {
		t.Errorf("GPU pod: the application does not mount the shim's volume at %s", path.Dir(preload))
	}
	sock := str(byName(env, "GPUPROBE_SOCKET"), "value")
	if sock != cfg.socket {
		t.Errorf("GPU pod: GPUPROBE_SOCKET %q, want agent::socket %q", sock, cfg.socket)
	}
	if v := mountedVolume(spec, app, path.Dir(sock)); str(v, "hostPath", "path") != path.Dir(cfg.socket) {
		t.Errorf("GPU pod: %s must be the hostPath %s, got %v", path.Dir(sock), path.Dir(cfg.socket), v)
	}
	groups := list(spec, "securityContext", "supplementalGroups")
	if !slices.ContainsFunc(groups, func(g any) bool { return slices.Contains(cfg.gids, g) }) {
		t.Errorf("GPU pod: supplementalGroups %v has none of agent::allowed_gids %v", groups, cfg.gids)
	}
}

const chartDir = "helm/gpuprobe"

// render renders the chart with Helm's own engine as `helm template` does.
func render(t *testing.T, name, ns string, vals map[string]any) []obj {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: ns, IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	var objs []obj
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range names {
		if filepath.Ext(f) == ".yaml" {
			objs = append(objs, parseObjects(t, f, files[f])...)
		}
	}
	return objs
}

func TestChartLint(t *testing.T) {
	l := lint.All(chartDir, nil, "gpuprobe", false)
	for _, m := range l.Messages {
		t.Log(m)
	}
	if l.HighestSeverity >= support.WarningSev {
		t.Errorf("helm lint: %d messages, worst severity %d", len(l.Messages), l.HighestSeverity)
	}
}

// TestChartDefaults: with its defaults, the chart renders the static
// manifest's objects (less the config checksum annotation, and the
// Namespace: a chart cannot own the namespace its release lives in, so
// docs/kubernetes.md has it created and labelled first).
func TestChartDefaults(t *testing.T) {
	got := render(t, "gpuprobe", "gpuprobe", nil)
	checkObjects(t, "chart", got)
	checkDaemonSet(t, got, "gpuprobe", "gpuprobe")
	want := parseObjects(t, "gpuprobe.yaml", readFile(t, "kubernetes/gpuprobe.yaml"))
	want = slices.DeleteFunc(want, func(o obj) bool { return o["kind"] == "Namespace" })
	for _, w := range want {
		g := find(t, got, w["kind"].(string), str(w, "metadata", "name"))
		if ann, ok := get(g, "spec", "template", "metadata", "annotations").(map[string]any); ok {
			delete(ann, "checksum/config")
			if len(ann) == 0 {
				delete(get(g, "spec", "template", "metadata").(map[string]any), "annotations")
			}
		}
		if w["kind"] == "ConfigMap" {
			// Same configuration, comments aside.
			g, w = parseConfig(t, str(g, "data", "config.yaml")).raw, parseConfig(t, str(w, "data", "config.yaml")).raw
		}
		gy, _ := yaml.Marshal(g)
		wy, _ := yaml.Marshal(w)
		if string(gy) != string(wy) {
			t.Errorf("chart's %v %v differs from gpuprobe.yaml's:\n--- chart\n%s\n--- gpuprobe.yaml\n%s", w["kind"], str(w, "metadata", "name"), gy, wy)
		}
	}
	if len(got) != len(want) {
		t.Errorf("chart renders %d objects, gpuprobe.yaml has %d besides the Namespace", len(got), len(want))
	}
}

// TestChartValues: the values move every place that names them.
func TestChartValues(t *testing.T) {
	got := render(t, "probe", "monitoring", map[string]any{
		"socketDir": "/var/run/gp", "clientGroup": 4242, "shimHostDir": "", "privileged": true,
		"maxPatchMemory": 128 << 20, "memoryLimiterMiB": 700,
		"resources": map[string]any{"limits": map[string]any{"memory": "768Mi"}},
	})
	checkObjects(t, "chart", got)
	cfg := checkDaemonSet(t, got, "probe", "monitoring")
	if cfg.socket != "/var/run/gp/agent.sock" || !slices.Equal(cfg.gids, []any{float64(4242)}) {
		t.Errorf("config: socket %q, gids %v", cfg.socket, cfg.gids)
	}
	ds := find(t, got, "DaemonSet", "probe")
	spec := get(ds, "spec", "template", "spec")
	if list(spec, "initContainers") != nil || byName(list(spec, "volumes"), "shim") != nil {
		t.Error("shimHostDir \"\": no install-shim init container and no shim volume expected")
	}
	sc := get(list(spec, "containers")[0], "securityContext")
	if get(sc, "privileged") != true || get(sc, "capabilities") != nil {
		t.Errorf("privileged: true: securityContext %v", sc)
	}
}
