package procres

// Attributes that name what the application runs on or as are not the
// application's to say: the collector measures them (process.pid,
// process.executable.*, container.id, k8s.pod.uid, host.name,
// service.instance.id) or the pipeline's processors add them
// (k8s_attributes: k8s.* and container.image.*; resource_detection:
// host.*, cloud.*, k8s.node.*, k8s.cluster.*). Those processors never
// replace an attribute a resource already has, so an application that set
// k8s.pod.name could pass for another pod; its attributes of these keys
// are dropped before the resource is built. docs/security.md ("Resource
// claims") lists them for operators.

// protected holds the keys an application may not set, each with every
// key under it (hence the final "." of each): the first words that name
// the host, its cloud, a Kubernetes object or a container, or facts about
// the receiver itself (gpuprobe.*, otelcol.*: the collector's own
// namespaces); the process's identity as the kernel knows it (pid,
// parent, leaders, executable, owner, user and group ids: the collector
// measures some, and none is the application's word); and
// service.instance.id, which with service.name makes a series' identity
// in Prometheus (job, instance), so that a process that could choose it
// could write into another's series. The process's other attributes, such
// as process.runtime.name or process.command_line, are the application's
// to say. The set holds the keys folded (foldKey), as they are compared.
var protected = foldAll(
	"k8s.", "host.", "container.", "cloud.", "gpuprobe.", "otelcol.",
	"process.pid.", "process.parent_pid.", "process.group_leader.pid.", "process.session_leader.pid.",
	"process.executable.", "process.owner.", "process.user.", "process.real_user.", "process.saved_user.",
	"process.group.", "process.real_group.", "process.saved_group.",
	"service.instance.id.",
)

// Protected says whether key, a decoded attribute key of the
// application's, names something only the collector or its processors may
// set: it is, or is under, a key of the protected set. Keys are compared
// folded (foldKey), so that "K8S.pod.name", "k8s_pod_name" and
// " k8s.pod.name" are protected like "k8s.pod.name": backends that fold
// case or map "." to "_" (Prometheus labels) would show them as the same
// attribute.
func Protected(key string) bool {
	k := foldKey(key)
	for i := range len(k) {
		if k[i] == '.' && protected[k[:i]] {
			return true
		}
	}
	return protected[k]
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
