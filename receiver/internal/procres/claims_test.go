package procres

import (
	"reflect"
	"testing"
)

func TestProtected(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"k8s.pod.name", true},
		{"k8s.namespace.name", true},
		{"k8s.pod.uid", true},
		{"k8s.node.name", true},
		{"k8s.container.name", true},
		{"host.name", true},
		{"host.id", true},
		{"container.id", true},
		{"container.image.name", true},
		{"cloud.region", true},
		{"cloud.account.id", true},
		{"process.pid", true},
		{"process.executable.name", true},
		{"process.executable.path", true},
		{"service.instance.id", true},
		{"process.parent_pid", true},
		{"process.group_leader.pid", true},
		{"process.session_leader.pid", true},
		{"process.owner", true},
		{"process.user.id", true},
		{"process.user.name", true},
		{"process.real_user.id", true},
		{"process.saved_user.name", true},
		{"process.group.id", true},
		{"process.real_group.name", true},
		{"process.saved_group.id", true},
		{"process.executable", true},
		{"gpuprobe.receiver.version", true},
		{"otelcol.component.id", true},
		{"k8s.cluster.name", true},
		{"k8s.deployment.name", true},
		{"k8s.node.uid", true},
		{"host.arch", true},
		{"host.ip", true},
		{"cloud.provider", true},
		{"container.runtime", true},
		{"container.name", true},
		// Spelled as a backend that folds case or maps '.' to '_' would
		// show the protected attribute.
		{"K8S.pod.name", true},
		{"k8s_pod_name", true},
		{"k8s-pod-name", true},
		{"Host.Name", true},
		{"PROCESS.PID", true},
		{"process_executable_path", true},
		{" k8s.pod.name ", true},
		{"k8s..pod.name", true},
		{".k8s.pod.name", true},
		{"k8s", true},
		{"service.name", false},
		{"service.version", false},
		{"service.namespace", false},
		{"deployment.environment.name", false},
		{"team", false},
		{"process.runtime.name", false},
		{"process.command_line", false},
		{"process.pidfile", false},
		{"hostname", false},
		{"k8sx.pod.name", false},
		{"containers", false},
		{"cloudy.sky", false},
		{"my.k8s.pod.name", false},
		{"process.runtime.version", false},
		{"process.command_args", false},
		{"process.userdata", false},
		{"deployment.environment", false},
		{"service.instance", false},
		{"gpuprobes", false},
		{"os.type", false},
		{"telemetry.sdk.language", false},
	}
	for _, tc := range tests {
		if got := Protected(tc.key); got != tc.want {
			t.Errorf("Protected(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

// TestNewDropsClaims: the application's attributes of protected keys are
// left out of its resource and listed, as percent-decoded keys; the
// collector's facts stay; the application's other attributes are kept.
func TestNewDropsClaims(t *testing.T) {
	p := Process{PID: 7, Start: 1, HostName: "node-1", ExePath: "/usr/bin/python3",
		Cgroup: "0::/docker/" + "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff\n",
		EnvResAttrs: "k8s.pod.name=victim-0,k8s.namespace.name=prod,k8s.pod.uid=1234,team=ml," +
			"k8s%2Epod%2Ename=encoded,K8S.pod.name=upper,%20k8s_pod_name%20=spaced,cloud.region=us-east-1," +
			"container.id=" + "ff00000000000000000000000000000000000000000000000000000000000000" +
			",host.name=other,process.pid=1,process.executable.path=/sbin/init,service.version=2,service.name=trainer"}
	r := New(p)
	if len(r.Errs) != 0 {
		t.Fatal(r.Errs)
	}
	// k8s%2Epod%2Ename decodes to k8s.pod.name, a later pair of that key
	// (the last one wins), and %20 to a space kept in the key.
	wantDropped := []string{"k8s.namespace.name", "k8s.pod.uid", "k8s.pod.name", "K8S.pod.name", " k8s_pod_name ",
		"cloud.region", "container.id", "host.name", "process.pid", "process.executable.path"}
	if !reflect.DeepEqual(r.Dropped, wantDropped) {
		t.Errorf("dropped %q\nwant %q", r.Dropped, wantDropped)
	}
	got := r.Attrs.AsRaw()
	want := map[string]any{"process.pid": int64(7), "process.executable.name": "python3",
		"process.executable.path": "/usr/bin/python3", "host.name": "node-1",
		"container.id": "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff",
		"team":         "ml", "service.version": "2", "service.name": "trainer"}
	delete(got, "service.instance.id")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("attributes %v\nwant %v", got, want)
	}
}
