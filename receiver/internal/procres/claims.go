package procres

import "strings"

// Attributes that name what the application runs on or as are not the
// application's to say: the collector measures them (process.pid,
// process.executable.*, container.id, host.name, service.instance.id) or
// the pipeline's processors add them (k8s_attributes: k8s.* and
// container.image.*; resource_detection: host.*, cloud.*, k8s.node.*,
// k8s.cluster.*). Those processors never replace an attribute a resource
// already has, so an application that set k8s.pod.name could pass for
// another pod; its attributes of these keys are dropped before the
// resource is built.

// protectedWords are the first words of the keys an application may not
// set: every attribute under them names the host, its cloud, a
// Kubernetes object or a container.
var protectedWords = map[string]bool{"k8s": true, "host": true, "container": true, "cloud": true}

// protectedKeys and protectedPrefixes are the process's own identity as
// the collector measures it (its other process.* attributes, such as
// process.runtime.name, are the application's to say), and
// service.instance.id: with service.name it makes a series' identity in
// Prometheus (job, instance), so a process that could choose it could
// write into another's series.
var (
	protectedKeys     = map[string]bool{"process.pid": true, "service.instance.id": true}
	protectedPrefixes = []string{"process.executable."}
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
	for _, p := range protectedPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
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
