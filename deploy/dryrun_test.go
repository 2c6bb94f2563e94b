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
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// apiServer starts etcd and kube-apiserver on loopback ports and returns
// a client configuration for a system:masters token.
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
	for name, data := range map[string][]byte{keyFile: pemKey, tokens: []byte("dryrun-token,admin,1,system:masters\n")} {
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
		"--disable-admission-plugins", "ServiceAccount")

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

// TestServerDryRun has a real kube-apiserver (with etcd) admit every
// object of the manifests and of the chart, with server-side dry-run:
// schema, defaulting, validation and admission, nothing stored.
// GPUPROBE_KUBE_APISERVER and GPUPROBE_ETCD name the binaries
// (make deploy-dryrun builds and caches them).
func TestServerDryRun(t *testing.T) {
	kas, etcd := os.Getenv("GPUPROBE_KUBE_APISERVER"), os.Getenv("GPUPROBE_ETCD")
	if kas == "" || etcd == "" {
		t.Skip("GPUPROBE_KUBE_APISERVER and GPUPROBE_ETCD are not set (make deploy-dryrun sets them)")
	}
	cfg := apiServer(t, kas, etcd)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	sets := map[string][]obj{
		"gpuprobe.yaml": parseObjects(t, "gpuprobe.yaml", readFile(t, "kubernetes/gpuprobe.yaml")),
		"gpu-pod.yaml":  parseObjects(t, "gpu-pod.yaml", readFile(t, "kubernetes/gpu-pod.yaml")),
		"chart":         render(t, "gpuprobe-chart", "monitoring", nil),
	}
	ctx := context.Background()
	// Namespaces are created for real: a dry-run object needs its namespace.
	for _, ns := range []string{"gpuprobe", "monitoring"} {
		u := &unstructured.Unstructured{Object: obj{"apiVersion": "v1", "kind": "Namespace", "metadata": obj{"name": ns}}}
		if _, err := dyn.Resource(nsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	for set, objs := range sets {
		for _, o := range objs {
			u := &unstructured.Unstructured{Object: o}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Errorf("%s: %s %s: %v", set, gvk.Kind, u.GetName(), err)
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if ns := u.GetNamespace(); ns != "" {
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			if gvk.Kind == "Namespace" {
				continue // created above
			}
			opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
			if _, err := ri.Create(ctx, u, opts); err != nil {
				t.Errorf("%s: %s %s: %v", set, gvk.Kind, u.GetName(), err)
			} else {
				t.Logf("%s: %s %s admitted (dry run)", set, gvk.Kind, u.GetName())
			}
		}
	}
}
