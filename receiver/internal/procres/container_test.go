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

func TestPodUID(t *testing.T) {
	const id = "8f2d3c1b0a9e8d7c6b5a49382716051f4e3d2c1b0a99887766554433221100ff"
	const uid = "3b3c5d7e-1f2a-4b6c-8d9e-0a1b2c3d4e5f"
	sd := strings.ReplaceAll(uid, "-", "_")
	tests := []struct {
		name, cgroup, want string
	}{
		{"containerd, systemd driver, burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + sd +
			".slice/cri-containerd-" + id + ".scope\n", uid},
		{"CRI-O, systemd driver, besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + sd +
			".slice/crio-" + id + ".scope\n", uid},
		{"guaranteed, systemd driver", "0::/kubepods.slice/kubepods-pod" + sd + ".slice/cri-containerd-" + id + ".scope\n", uid},
		{"cgroupfs driver, v1", "11:cpuset:/kubepods/burstable/pod" + uid + "/" + id + "\n10:memory:/kubepods/burstable/pod" + uid + "/" + id + "\n", uid},
		{"cgroupfs driver, guaranteed, v2", "0::/kubepods/pod" + uid + "/" + id, uid},
		{"seen from the collector's cgroup namespace", "0::/../../kubepods-besteffort-pod" + sd + ".slice/cri-containerd-" + id + ".scope\n", uid},
		{"pod cgroup itself", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + sd + ".slice\n", uid},
		{"static pod: manifest hash", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6d3a7f0e6b33b5a0c5e1b6b8e1e2d0f4.slice/cri-containerd-" + id + ".scope\n", ""},
		{"not under kubepods", "0::/system.slice/pod" + uid + "/x\n", ""},
		{"uppercase", "0::/kubepods/pod" + strings.ToUpper(uid) + "/" + id, ""},
		{"docker", "0::/system.slice/docker-" + id + ".scope\n", ""},
		{"podman pod", "0::/machine.slice/machine-libpod_pod_" + id + ".slice/libpod-" + id + ".scope\n", ""},
		{"cgroup namespace", "0::/\n", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodUID(tc.cgroup); got != tc.want {
				t.Errorf("PodUID(%q) = %q, want %q", tc.cgroup, got, tc.want)
			}
		})
	}
}
