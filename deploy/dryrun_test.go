package deploy

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

var nsGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs a server for the test's lifetime, its output in dir/name.log.
func start(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

// admissionConfig makes the API server as strict as a hardened cluster:
// Pod Security enforces baseline in every namespace whose labels say
// nothing (a stock cluster's default is privileged), and pods of the
// system priority classes need a quota that admits them, as on clusters
// that keep those classes to kube-system.
const admissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: baseline
        enforce-version: latest
        audit: baseline
        audit-version: latest
        warn: baseline
        warn-version: latest
      exemptions: {usernames: [], runtimeClasses: [], namespaces: []}
  - name: ResourceQuota
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ResourceQuotaConfiguration
      limitedResources:
        - resource: pods
          matchScopes:
            - scopeName: PriorityClass
              operator: In
              values: [system-node-critical, system-cluster-critical]
`

// apiServer starts etcd and kube-apiserver on loopback ports and returns
// a client configuration for a system:masters token. Its admission is
// admissionConfig's.
func apiServer(t *testing.T, kas, etcd string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	client, peer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	start(t, dir, "etcd", etcd, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peer))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	tokens := filepath.Join(dir, "tokens.csv")
	admission := filepath.Join(dir, "admission.yaml")
	for name, data := range map[string][]byte{keyFile: pemKey, tokens: []byte("dryrun-token,admin,1,system:masters\n"),
		admission: []byte(admissionConfig)} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start(t, dir, "kube-apiserver", kas, "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(secure), "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile, "--service-cluster-ip-range", "10.0.0.0/24",
		// No controller-manager makes the default ServiceAccounts.
		"--disable-admission-plugins", "ServiceAccount",
		"--enable-admission-plugins", "PodSecurity,Priority,ResourceQuota", "--admission-control-config-file", admission)

	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", secure), BearerToken: "dryrun-token",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		body, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return cfg
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 90 s: %v %s", err, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// warnings collects the API server's warnings (Pod Security's among them).
type warnings struct {
	mu   sync.Mutex
	text []string
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// take returns the warnings so far and forgets them.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.text
	w.text = nil
	return t
}

// cluster creates objects on the API server.
type cluster struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
	dyn    *dynamic.DynamicClient
	warns  *warnings
}

func newCluster(t *testing.T, cfg *rest.Config) *cluster {
	t.Helper()
	c := &cluster{warns: &warnings{}}
	cfg.WarningHandlerWithContext = c.warns
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// create creates o, with server-side dry-run (admitted, never stored) if
// dryRun, and strict field validation.
func (c *cluster) create(o obj, dryRun bool) error {
	u := &unstructured.Unstructured{Object: o}
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if ns := u.GetNamespace(); ns != "" {
		ri = c.dyn.Resource(m.Resource).Namespace(ns)
	}
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Create(context.Background(), u, opts)
	return err
}

// prerequisite reports whether o must exist for real before the other
// objects are admitted: their namespace, the pods' priority class.
func prerequisite(o obj) bool {
	return o["kind"] == "Namespace" || o["kind"] == "PriorityClass"
}

// podOf returns the pod the DaemonSet's controller makes from its
// template, in namespace ns: Pod Security enforces on pods, and only
// warns about the workloads that make them.
func podOf(ds obj, ns string) obj {
	tmpl := runtime.DeepCopyJSON(get(ds, "spec", "template").(map[string]any))
	md, _ := tmpl["metadata"].(map[string]any)
	if md == nil {
		md = obj{}
	}
	md["name"], md["namespace"] = str(ds, "metadata", "name")+"-pod", ns
	return obj{"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": tmpl["spec"]}
}

// inNamespace returns a copy of o in namespace ns.
func inNamespace(o obj, ns string) obj {
	c := runtime.DeepCopyJSON(o)
	c["metadata"].(map[string]any)["namespace"] = ns
	return c
}

// TestServerDryRun has a real kube-apiserver (with etcd) admit every
// object of the manifests and of the chart, with server-side dry-run:
// schema, defaulting, validation and admission, nothing stored; and the
// pods the DaemonSets make. Pod Security enforces baseline where a
// namespace's labels say nothing (admissionConfig): the kit's namespaces
// lift it, and the test shows what baseline refuses without them.
// GPUPROBE_KUBE_APISERVER and GPUPROBE_ETCD name the binaries
// (make deploy-dryrun builds and caches them).
func TestServerDryRun(t *testing.T) {
	kas, etcd := os.Getenv("GPUPROBE_KUBE_APISERVER"), os.Getenv("GPUPROBE_ETCD")
	if kas == "" || etcd == "" {
		t.Skip("GPUPROBE_KUBE_APISERVER and GPUPROBE_ETCD are not set (make deploy-dryrun sets them)")
	}
	c := newCluster(t, apiServer(t, kas, etcd))
	manifest := parseObjects(t, "gpuprobe.yaml", readFile(t, "kubernetes/gpuprobe.yaml"))
	demo := parseObjects(t, "gpu-pod.yaml", readFile(t, "kubernetes/gpu-pod.yaml"))
	// The chart's namespace as docs/kubernetes.md has it made: with the
	// manifest's Pod Security labels.
	chartNS := runtime.DeepCopyJSON(find(t, manifest, "Namespace", "gpuprobe"))
	chartNS["metadata"].(map[string]any)["name"] = "monitoring"
	chart := append([]obj{chartNS}, render(t, "gpuprobe-chart", "monitoring", nil)...)
	sets := []struct {
		name string
		objs []obj
	}{{"gpuprobe.yaml", manifest}, {"gpu-pod.yaml", demo}, {"chart", chart}}

	for _, set := range sets {
		for _, o := range slices.DeleteFunc(slices.Clone(set.objs), func(o obj) bool { return !prerequisite(o) }) {
			if err := c.create(o, false); err != nil {
				t.Fatalf("%s: %v %s: %v", set.name, o["kind"], str(o, "metadata", "name"), err)
			}
		}
	}
	for _, set := range sets {
		for _, o := range slices.DeleteFunc(slices.Clone(set.objs), prerequisite) {
			admit(t, c, set.name, o)
			if o["kind"] == "DaemonSet" {
				admit(t, c, set.name, podOf(o, str(o, "metadata", "namespace")))
			}
		}
	}
	t.Run("baseline", func(t *testing.T) { testBaselineRefuses(t, c, manifest, demo) })
	t.Run("system-priority", func(t *testing.T) { testSystemPriorityRefused(t, c, manifest) })
}

// admit has the API server admit o (dry run), or fails.
func admit(t *testing.T, c *cluster, set string, o obj) {
	t.Helper()
	if err := c.create(o, true); err != nil {
		t.Errorf("%s: %v %s: %v", set, o["kind"], str(o, "metadata", "name"), err)
		return
	}
	t.Logf("%s: %v %s admitted (dry run); warnings %q", set, o["kind"], str(o, "metadata", "name"), c.warns.take())
}

// testBaselineRefuses: in namespace default, which enforces baseline, the
// collector's pod and the GPU pod are refused for what the kit's
// namespaces are labelled privileged for; the DaemonSet itself is
// admitted with a warning (Pod Security only warns about workloads), and
// would make no pod.
func testBaselineRefuses(t *testing.T, c *cluster, manifest, demo []obj) {
	ds := find(t, manifest, "DaemonSet", "gpuprobe")
	for _, tc := range []struct {
		what string
		pod  obj
		want []string
	}{
		{"collector", podOf(ds, "default"), []string{"hostPID=true", "hostPath volumes", "non-default capabilities"}},
		{"GPU pod", inNamespace(ofKind(t, demo, "Pod"), "default"), []string{"hostPath volumes"}},
	} {
		err := c.create(tc.pod, true)
		if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) {
			t.Errorf("%s's pod in namespace default: %v, want refused by Pod Security at baseline", tc.what, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s's pod in namespace default: %v: does not name %q", tc.what, err, w)
			}
		}
		t.Logf("%s's pod in namespace default: %v", tc.what, err)
	}
	c.warns.take()
	if err := c.create(inNamespace(ds, "default"), true); err != nil {
		t.Errorf("DaemonSet in namespace default: %v, want admitted with a warning", err)
	}
	if w := c.warns.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, `would violate PodSecurity "baseline:latest"`) }) {
		t.Errorf("DaemonSet in namespace default: warnings %q, want Pod Security's baseline warning", w)
	}
}

// testSystemPriorityRefused: the collector's pod with system-node-critical
// in the kit's namespace is refused where quota keeps the system classes
// to kube-system; the kit's own class is what it runs with.
func testSystemPriorityRefused(t *testing.T, c *cluster, manifest []obj) {
	pod := podOf(find(t, manifest, "DaemonSet", "gpuprobe"), "gpuprobe")
	pod["spec"].(map[string]any)["priorityClassName"] = "system-node-critical"
	err := c.create(pod, true)
	if err == nil || !strings.Contains(err.Error(), "insufficient quota") {
		t.Errorf("collector's pod with system-node-critical in namespace gpuprobe: %v, want refused for lack of quota", err)
		return
	}
	t.Logf("collector's pod with system-node-critical: %v", err)
}
