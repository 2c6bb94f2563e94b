package procres

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuild(t *testing.T) {
	const cid = "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff"
	base := Process{PID: 4242, Start: 98765, ExePath: "/usr/bin/python3.12", ExeName: "pt_main_thread",
		Cgroup: "0::/kubepods.slice/cri-containerd-" + cid + ".scope\n", HostName: "gpu-node-7"}
	facts := map[string]any{"process.pid": int64(4242), "process.executable.name": "python3.12",
		"process.executable.path": "/usr/bin/python3.12", "container.id": cid, "host.name": "gpu-node-7"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range facts {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name string
		edit func(*Process)
		want map[string]any // service.instance.id checked apart
		errs []string
	}{
		{"no variables", func(*Process) {}, with("service.name", "unknown_service:python3.12"), nil},
		{"OTEL_SERVICE_NAME", func(p *Process) { p.EnvServiceName = "trainer" }, with("service.name", "trainer"), nil},
		{"service.name in the attributes", func(p *Process) { p.EnvResAttrs = "service.name=from-attrs,service.version=1.2" },
			with("service.name", "from-attrs", "service.version", "1.2"), nil},
		{"OTEL_SERVICE_NAME wins over the attributes", func(p *Process) {
			p.EnvServiceName, p.EnvResAttrs = "trainer", "service.name=from-attrs"
		}, with("service.name", "trainer"), nil},
		{"the operator's name wins", func(p *Process) {
			p.ServiceOverride, p.EnvServiceName, p.EnvResAttrs = "fleet", "trainer", "service.name=x"
		}, with("service.name", "fleet"), nil},
		{"claimed pod dropped, other attributes kept", func(p *Process) {
			p.EnvResAttrs = "k8s.pod.name=train-0,k8s.namespace.name=ml,deployment.environment.name=prod"
		}, with("service.name", "unknown_service:python3.12", "deployment.environment.name", "prod"), nil},
		{"collector's facts are not the client's to say", func(p *Process) {
			p.EnvResAttrs = "process.pid=1,container.id=abc,host.name=elsewhere,process.executable.name=sshd,process.executable.path=/sbin/init,team=a,service.instance.id=x"
		}, with("service.name", "unknown_service:python3.12", "team", "a"), nil},
		{"bad attributes discarded whole", func(p *Process) { p.EnvServiceName, p.EnvResAttrs = "trainer", "team=a,evil=%1B[2J" },
			with("service.name", "trainer"), []string{`OTEL_RESOURCE_ATTRIBUTES: pair 2: value of "evil": control character U+001B`}},
		{"bad service name discarded", func(p *Process) { p.EnvServiceName, p.EnvResAttrs = "a\x00b", "service.name=attrs" },
			with("service.name", "attrs"), []string{"OTEL_SERVICE_NAME: control character U+0000 at byte 1"}},
		{"omitted by the shim", func(p *Process) { p.ServiceOmitted, p.ResAttrsOmitted = true, true },
			with("service.name", "unknown_service:python3.12"),
			[]string{"OTEL_SERVICE_NAME: longer than the 256 bytes", "OTEL_RESOURCE_ATTRIBUTES: longer than the 4096 bytes"}},
		{"exe unreadable: comm", func(p *Process) { p.ExePath = "" },
			with("service.name", "unknown_service:pt_main_thread", "process.executable.name", "pt_main_thread",
				"process.executable.path", nil), nil},
		{"nothing known", func(p *Process) { *p = Process{Session: 3} }, map[string]any{"service.name": "unknown_service"}, nil},
		{"exe path invalid UTF-8", func(p *Process) { p.ExePath = "/opt/\xffapp" },
			with("service.name", "unknown_service:\uFFFDapp", "process.executable.name", "\uFFFDapp",
				"process.executable.path", "/opt/\uFFFDapp"), nil},
		{"pod uid from the cgroup, not the client", func(p *Process) {
			p.Cgroup = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod3b3c5d7e_1f2a_4b6c_8d9e_0a1b2c3d4e5f.slice/cri-containerd-" + cid + ".scope\n"
			p.EnvResAttrs = "k8s.pod.uid=00000000-0000-4000-8000-000000000000,k8s.pod.name=victim"
		}, with("service.name", "unknown_service:python3.12", "k8s.pod.uid", "3b3c5d7e-1f2a-4b6c-8d9e-0a1b2c3d4e5f"), nil},
		{"no container", func(p *Process) { p.Cgroup = "0::/user.slice/session-1.scope\n" },
			with("service.name", "unknown_service:python3.12", "container.id", nil), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base
			tc.edit(&p)
			m, errs := Build(p)
			got := m.AsRaw()
			if id, _ := got["service.instance.id"].(string); p.Session+p.PID != 0 && !uuid5.MatchString(id) {
				t.Errorf("service.instance.id %q is not a version 5 UUID", id)
			}
			delete(got, "service.instance.id")
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("attributes (-want +got):\n%s", d)
			}
			if len(errs) != len(tc.errs) {
				t.Fatalf("errors %v, want %d", errs, len(tc.errs))
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.errs[i]) {
					t.Errorf("error %d: %v, want %q", i, e, tc.errs[i])
				}
			}
		})
	}
}

var uuid5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestInstanceID: service.instance.id is the same for every connection of
// a process, differs between processes (a pid reused later has another
// start time), and is not the application's to choose.
func TestInstanceID(t *testing.T) {
	id := func(p Process) string {
		m, _ := Build(p)
		v, _ := m.Get("service.instance.id")
		return v.Str()
	}
	a := Process{PID: 10, Start: 500, HostName: "h", Session: 1}
	again := a
	again.Session = 7
	if id(a) != id(again) {
		t.Errorf("two sessions of one process: %s and %s", id(a), id(again))
	}
	reused, other := a, a
	reused.Start, other.HostName = 900, "h2"
	if id(a) == id(reused) || id(a) == id(other) {
		t.Errorf("distinct processes share %s", id(a))
	}
	unknown, unknown2 := Process{HostName: "h", Session: 1}, Process{HostName: "h", Session: 2}
	if id(unknown) == id(unknown2) {
		t.Errorf("processes of unknown pid share %s", id(unknown))
	}
	claimed := a
	claimed.EnvResAttrs = "service.instance.id=" + id(other)
	if got := id(claimed); got != id(a) {
		t.Errorf("a process claiming another's instance id got %q, want its own %q", got, id(a))
	}
	if got := id(Process{PID: 10, HostName: "h"}); got != "" {
		t.Errorf("a process known by its pid alone: instance id %q, want none", got)
	}
}
