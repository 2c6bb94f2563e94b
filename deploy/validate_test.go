package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeKubeconfig points the processors' API clients at a closed port:
// `validate` builds the pipelines (clients included) but starts nothing.
const fakeKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

// validate runs `otelcol-gpuprobe validate` on a collector configuration,
// with the socket moved into a temporary directory (the receiver checks
// that its directory exists) and the API clients on a kubeconfig (outside
// a pod there is no service account).
func validate(t *testing.T, otelcol, name, config string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, config)
	config = strings.ReplaceAll(config, cfg.socket, filepath.Join(dir, "agent.sock"))
	config = strings.ReplaceAll(config, "auth_type: serviceAccount", "auth_type: kubeConfig")
	config = strings.ReplaceAll(config, "\n    k8s_api:\n", "\n    k8s_api:\n      auth_type: kubeConfig\n")
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cmd := exec.Command(otelcol, "validate", "--config", write("config.yaml", config))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+write("kubeconfig", fakeKubeconfig),
		"K8S_NODE_NAME=node-1", "POD_IP=127.0.0.1", "OTLP_ENDPOINT=127.0.0.1:4317")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: otelcol-gpuprobe validate: %v\n%s", name, err, out)
	}
}

// TestCollectorAcceptsConfigs needs the collector (GPUPROBE_OTELCOL, set by
// make deploy-check).
func TestCollectorAcceptsConfigs(t *testing.T) {
	otelcol := os.Getenv("GPUPROBE_OTELCOL")
	if otelcol == "" {
		t.Skip("GPUPROBE_OTELCOL is not set (make deploy-check sets it)")
	}
	validate(t, otelcol, "kubernetes/config.yaml", readFile(t, "kubernetes/config.yaml"))
	objs := render(t, "gpuprobe", "gpuprobe", nil)
	validate(t, otelcol, "chart", str(find(t, objs, "ConfigMap", "gpuprobe"), "data", "config.yaml"))
}
