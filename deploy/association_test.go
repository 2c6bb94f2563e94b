package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// A container id as the receiver reads it from /proc/PID/cgroup.
const appContainerID = "3f1c9a2b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"

// TestPodAssociationOnContainerID runs config.yaml's k8s_attributes
// processor (the contrib release the distribution builds) against a real
// kube-apiserver that holds gpu-pod.yaml's pod with a running container,
// and feeds it a resource as the receiver makes one for a process of that
// container: no network peer, k8s.pod.uid and container.id from the
// cgroup, either alone or both.
func TestPodAssociationOnContainerID(t *testing.T) {
	kas, etcd := os.Getenv("GPUPROBE_KUBE_APISERVER"), os.Getenv("GPUPROBE_ETCD")
	if kas == "" || etcd == "" {
		t.Skip("GPUPROBE_KUBE_APISERVER and GPUPROBE_ETCD are not set (make deploy-dryrun sets them)")
	}
	cfg := apiServer(t, kas, etcd)
	podUID := createRunningPod(t, cfg, "node-1")

	t.Setenv("KUBECONFIG", writeKubeconfig(t, cfg))
	t.Setenv("K8S_NODE_NAME", "node-1")
	conf := parseConfig(t, readFile(t, "kubernetes/config.yaml")).raw
	section, _ := get(conf, "processors", "k8s_attributes").(map[string]any)
	section["auth_type"] = "kubeConfig"
	section["wait_for_metadata"] = true
	f := k8sattributesprocessor.NewFactory()
	pcfg := f.CreateDefaultConfig()
	if err := confmap.NewFromStringMap(section).Unmarshal(pcfg); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.MetricsSink)
	p, err := f.CreateMetrics(context.Background(), processortest.NewNopSettings(f.Type()), pcfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())

	pod := map[string]string{"k8s.pod.name": "cuda-app", "k8s.namespace.name": "gpu",
		"k8s.container.name": "app", "k8s.node.name": "node-1", "service.name": "cuda-app"}
	for _, tc := range []struct {
		podUID, containerID string
		want                map[string]string
	}{
		{"", appContainerID, pod},
		{podUID, appContainerID, pod},
		// Before the pod's status lists the container: the pod by its uid.
		{podUID, "", map[string]string{"k8s.pod.name": "cuda-app", "k8s.namespace.name": "gpu",
			"k8s.node.name": "node-1", "service.name": "cuda-app"}},
		// A process outside any pod: nothing to associate, nothing added.
		{"", "", map[string]string{"k8s.pod.name": "", "service.name": "cuda-app"}},
	} {
		md := pmetric.NewMetrics()
		res := md.ResourceMetrics().AppendEmpty().Resource().Attributes()
		res.PutStr("service.name", "cuda-app")
		res.PutInt("process.pid", 4242)
		if tc.containerID != "" {
			res.PutStr("container.id", tc.containerID)
		}
		if tc.podUID != "" {
			res.PutStr("k8s.pod.uid", tc.podUID)
		}
		md.ResourceMetrics().At(0).ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1)
		sink.Reset()
		if err := p.ConsumeMetrics(context.Background(), md); err != nil {
			t.Fatal(err)
		}
		got := sink.AllMetrics()[0].ResourceMetrics().At(0).Resource().Attributes()
		for k, want := range tc.want {
			s := ""
			if v, ok := got.Get(k); ok {
				s = v.AsString()
			}
			if s != want {
				t.Errorf("k8s.pod.uid %q, container.id %q: %s = %q, want %q (resource %v)", tc.podUID, tc.containerID, k, s, want, got.AsRaw())
			}
		}
	}
}

// createRunningPod stores gpu-pod.yaml's pod in namespace gpu on node,
// with the status a kubelet on containerd reports for its running app,
// and returns its uid.
func createRunningPod(t *testing.T, cfg *rest.Config, node string) string {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The manifest's namespace, Pod Security labels included: the API
	// server enforces baseline where they are missing.
	objs := parseObjects(t, "gpu-pod.yaml", readFile(t, "kubernetes/gpu-pod.yaml"))
	ns := &unstructured.Unstructured{Object: ofKind(t, objs, "Namespace")}
	ns.SetName("gpu")
	if _, err := dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &unstructured.Unstructured{Object: ofKind(t, objs, "Pod")}
	pod.SetNamespace("gpu")
	if err := unstructured.SetNestedField(pod.Object, node, "spec", "nodeName"); err != nil {
		t.Fatal(err)
	}
	pods := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("gpu")
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status := obj{
		"phase": "Running", "podIP": "10.1.2.3", "startTime": now,
		"containerStatuses": []any{obj{
			"name": "app", "ready": true, "restartCount": int64(0), "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
			"imageID": "sha256:" + strings.Repeat("ab", 32), "containerID": "containerd://" + appContainerID,
			"state": obj{"running": obj{"startedAt": now}},
		}},
	}
	if err := unstructured.SetNestedField(created.Object, status, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return string(created.GetUID())
}

// writeKubeconfig writes a kubeconfig for cfg's server and token.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	text := strings.NewReplacer("https://127.0.0.1:1", cfg.Host, "token: t", "token: "+cfg.BearerToken).Replace(fakeKubeconfig)
	text = strings.Replace(text, "{server: ", "{insecure-skip-tls-verify: true, server: ", 1)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
