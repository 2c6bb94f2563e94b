package procres

import "strings"

// ContainerID returns the id of the container a process runs in, from its
// /proc/PID/cgroup as the collector reads it; "" when none is found. Lines
// are "hierarchy-id:controllers:path" (cgroup v1: one per hierarchy; v2:
// the one line "0::path"). The id is the last path segment that is, or
// holds, 64 lowercase hex digits, as the runtimes name them:
//
//	0::/system.slice/docker-<id>.scope                         docker, systemd driver
//	12:memory:/docker/<id>                                     docker, cgroupfs driver
//	0::/kubepods.slice/.../cri-containerd-<id>.scope           containerd (CRI), systemd driver
//	0::/kubepods.slice/.../crio-<id>.scope                     CRI-O
//	11:cpuset:/kubepods/burstable/pod<uid>/<id>                kubelet, cgroupfs driver
//	0::/machine.slice/libpod-<id>.scope/container              podman
//
// A process that sees only its own cgroup namespace ("0::/") has none.
func ContainerID(cgroup string) string {
	for line := range strings.Lines(cgroup) {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id := idInPath(strings.TrimSpace(path)); id != "" {
			return id
		}
	}
	return ""
}

// Runtime prefixes of a scope's name ("docker-<id>.scope").
var idPrefixes = []string{"docker-", "cri-containerd-", "crio-", "libpod-", "containerd-"}

// idInPath returns the id in the last segment of a cgroup path that names
// a container.
func idInPath(path string) string {
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		s := strings.TrimSuffix(segs[i], ".scope")
		for _, p := range idPrefixes {
			if t, ok := strings.CutPrefix(s, p); ok {
				s = t
				break
			}
		}
		if isContainerID(s) {
			return s
		}
	}
	return ""
}

// isContainerID says whether s is 64 lowercase hex digits.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// PodUID returns the uid of the Kubernetes pod a process runs in, from
// its /proc/PID/cgroup as the collector reads it; "" when none is found.
// The kubelet names a pod's cgroup after its uid, under kubepods:
//
//	.../kubepods-burstable-pod<uid, '-' as '_'>.slice/...   systemd driver
//	.../kubepods/besteffort/pod<uid>/...                    cgroupfs driver
//	.../kubepods.slice/kubepods-pod<uid, '_'>.slice/...     Guaranteed, systemd
//
// Only a uid in the API server's form (a UUID) is taken: a static pod's
// cgroup carries the hash of its manifest instead, which is not the uid
// of its mirror pod.
func PodUID(cgroup string) string {
	for line := range strings.Lines(cgroup) {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.Contains(path, "kubepods") {
			continue
		}
		if uid := uidInPath(strings.TrimSpace(path)); uid != "" {
			return uid
		}
	}
	return ""
}

// uidInPath returns the pod uid named by the last segment of a kubepods
// cgroup path that names one.
func uidInPath(path string) string {
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		s := strings.TrimSuffix(segs[i], ".slice")
		if j := strings.LastIndex(s, "-pod"); j >= 0 {
			s = s[j+1:] // systemd: the last part of the slice's name
		}
		if u, ok := strings.CutPrefix(s, "pod"); ok {
			if u = strings.ReplaceAll(u, "_", "-"); isUUID(u) {
				return u
			}
		}
	}
	return ""
}

// isUUID says whether s is a UUID in lowercase hex, 8-4-4-4-12.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
