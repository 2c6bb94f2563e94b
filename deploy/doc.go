// Package deploy holds the Kubernetes manifests (kubernetes/), the Helm
// chart (helm/gpuprobe), the container image builder (image/) and the
// Grafana dashboard (grafana/) of gpuprobe, and the tests that check them
// without a cluster (docs/kubernetes.md). It is a module of its own so that Helm's and
// go-containerregistry's dependencies stay out of the collector's build.
package deploy
