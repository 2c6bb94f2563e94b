package procres

import (
	"strings"
	"testing"
)

func TestContainerID(t *testing.T) {
	const id = "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff"
	const pod = "pod3b3c5d7e-1f2a-4b6c-8d9e-0a1b2c3d4e5f"
	tests := []struct {
		name, cgroup, want string
	}{
		{"docker, cgroup v2, systemd driver", "0::/system.slice/docker-" + id + ".scope\n", id},
		{"docker, cgroup v1", "12:pids:/docker/" + id + "\n11:memory:/docker/" + id + "\n1:name=systemd:/docker/" + id + "\n", id},
		{"docker, cgroup v1, systemd driver", "4:devices:/system.slice/docker-" + id + ".scope\n", id},
		{"containerd (CRI), cgroup v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-" +
			strings.ReplaceAll(pod, "-", "_") + ".slice/cri-containerd-" + id + ".scope\n", id},
		{"CRI-O, cgroup v2", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-" +
			strings.ReplaceAll(pod, "-", "_") + ".slice/crio-" + id + ".scope\n", id},
		{"kubelet cgroupfs driver, v1", "11:cpuset:/kubepods/burstable/" + pod + "/" + id + "\n" +
			"10:memory:/kubepods/burstable/" + pod + "/" + id + "\n", id},
		{"kubelet cgroupfs driver, v2", "0::/kubepods/besteffort/" + pod + "/" + id, id},
		{"podman, nested", "0::/machine.slice/libpod-" + id + ".scope/container\n", id},
		{"hybrid: v1 lines without, v2 with", "1:name=systemd:/user.slice\n0::/system.slice/docker-" + id + ".scope\n", id},
		{"cgroup namespace", "0::/\n", ""},
		{"host process", "0::/user.slice/user-1000.slice/session-2.scope\n", ""},
		{"systemd service", "0::/system.slice/nvidia-persistenced.service\n", ""},
		{"crio conmon", "0::/kubepods.slice/crio-conmon-" + id + ".scope\n", ""},
		{"short hex", "0::/docker/" + id[:32] + "\n", ""},
		{"uppercase hex", "0::/docker/" + strings.ToUpper(id) + "\n", ""},
		{"no colons", id + "\n", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ContainerID(tc.cgroup); got != tc.want {
				t.Errorf("ContainerID(%q) = %q, want %q", tc.cgroup, got, tc.want)
			}
		})
	}
}
