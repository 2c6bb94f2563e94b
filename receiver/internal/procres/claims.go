package procres

import "strings"

// Attributes that name what the application runs on or as are not the
// application's to say: the collector measures them (process.pid,
// process.executable.*, container.id, k8s.pod.uid, host.name,
// service.instance.id) or the pipeline's processors add them
// (k8s_attributes: k8s.* and container.image.*; resource_detection:
// host.*, cloud.*, k8s.node.*, k8s.cluster.*). Those processors never
// replace an attribute a resource already has, so an application that set
// k8s.pod.name could pass for another pod; its attributes of these keys
// are dropped before the resource is built. docs/security.md ("Resource
// attributes") lists them for operators.

// protectedWords are the first words of the keys an application may not
// set: every attribute under them names the host, its cloud, a
// Kubernetes object or a container, or is a fact about the receiver
// itself (gpuprobe.*, otelcol.*: the collector's own namespaces).
var protectedWords = map[string]bool{"k8s": true, "host": true, "container": true, "cloud": true,
	"gpuprobe": true, "otelcol": true}

// protectedKeys, and protectedPrefixes with every key under them, are the
// process's identity as the kernel knows it (pid, parent,
// leaders, executable, owner and user and group ids: the collector
// measures some, and none is the application's word), and
// service.instance.id: with service.name it makes a series' identity in
// Prometheus (job, instance), so a process that could choose it could
// write into another's series. The process's other attributes, such as
// process.runtime.name or process.command_line, are the application's to
// say. Both are held folded (foldKey), as the keys they are compared with.
var (
	protectedKeys = foldAll("process.pid", "process.parent_pid", "process.group_leader.pid",
		"process.session_leader.pid", "process.owner", "service.instance.id")
	protectedPrefixes = foldAll("process.executable", "process.user", "process.real_user", "process.saved_user",
		"process.group", "process.real_group", "process.saved_group")
)

// Protected says whether key, a decoded attribute key of the
// application's, names something only the collector or its processors may
// set. Keys are compared folded (foldKey), so that "K8S.pod.name",
// "k8s_pod_name" and " k8s.pod.name" are protected like "k8s.pod.name":
// backends that fold case or map "." to "_" (Prometheus labels) would
// show them as the same attribute.
func Protected(key string) bool {
	k := foldKey(key)
	word, _, _ := strings.Cut(k, ".")
	if protectedWords[word] || protectedKeys[k] {
		return true
	}
	for p := range protectedPrefixes {
		if k == p || strings.HasPrefix(k, p+".") {
			return true
		}
	}
	return false
}

// foldAll is the set of keys, folded.
func foldAll(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[foldKey(k)] = true
	}
	return m
}

// foldKey is key with ASCII letters in lower case, each run of other
// bytes than letters and digits made one '.', and none at either end.
func foldKey(key string) string {
	b := make([]byte, 0, len(key))
	sep := false
	for i := range len(key) {
		c := key[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			sep = true
			continue
		}
		if sep && len(b) > 0 {
			b = append(b, '.')
		}
		sep = false
		b = append(b, c)
	}
	return string(b)
}
