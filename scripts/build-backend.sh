#!/usr/bin/env bash
# build-backend.sh NAME VERSION: builds a real backend from its Go module
# source and prints the path of the cached binary.
#
#   NAME     jaeger (github.com/jaegertracing/jaeger, ./cmd/jaeger),
#            prometheus (github.com/prometheus/prometheus, ./cmd/prometheus),
#            etcd (go.etcd.io/etcd/server/v3, .) or
#            kube-apiserver (k8s.io/kubernetes, ./cmd/kube-apiserver)
#   VERSION  the module version, e.g. v1.76.0, v0.315.0, v3.6.16, v1.34.4
#
# `go install` refuses these modules (their go.mod has replace directives), so
# the script downloads the module with `go mod download -json`, copies it to a
# writable temporary directory and runs `go build` there. The binary is cached
# as $GPUPROBE_CACHE/backends/NAME-VERSION (default cache: ~/.cache/gpuprobe),
# so a warm machine reuses it. GOWORK=off: Prometheus ships a go.work that names
# modules its module zip leaves out. A lock file serialises concurrent builds of the
# same binary (the e2e test and .ci/run may both ask for it).
set -euo pipefail

name=${1:?usage: build-backend.sh jaeger|prometheus VERSION}
version=${2:?usage: build-backend.sh jaeger|prometheus VERSION}

case "$name" in
jaeger)
	module=github.com/jaegertracing/jaeger
	pkg=./cmd/jaeger
	;;
prometheus)
	module=github.com/prometheus/prometheus
	pkg=./cmd/prometheus
	;;
etcd)
	module=go.etcd.io/etcd/server/v3
	pkg=.
	;;
kube-apiserver)
	module=k8s.io/kubernetes
	pkg=./cmd/kube-apiserver
	;;
*)
	echo "build-backend.sh: unknown backend \"$name\" (want jaeger, prometheus, etcd or kube-apiserver)" >&2
	exit 2
	;;
esac

cache=${GPUPROBE_CACHE:-$HOME/.cache/gpuprobe}/backends
mkdir -p "$cache"
out="$cache/$name-$version"

exec 9>"$out.lock"
flock 9

if [[ -x "$out" ]]; then
	echo "$out"
	exit 0
fi

start=$(date +%s)
json=$(go mod download -json "$module@$version")
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [[ -z "$dir" || ! -d "$dir" ]]; then
	echo "build-backend.sh: go mod download $module@$version gave no module directory:" >&2
	printf '%s\n' "$json" >&2
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuprobe-$name-XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$dir/." "$work/"
chmod -R u+w "$work"

# etcd's and Kubernetes' go.mod replace their sibling modules with paths
# outside the module zip (../api, ./staging/src/k8s.io/...): take the
# published releases instead. The staging modules k8s.io/X are published as
# v0.N.M for Kubernetes v1.N.M and required as v0.0.0, so their version is
# set too; etcd's siblings are required at the release's own version.
local_replaces() {
	grep -v FORBIDDEN_DEPENDENCY go.mod |
		sed -n -E 's/^(replace)?[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\.?\/[^[:space:]]+$/\2/p'
}
# -mod=mod lets go build record the releases' sums in the copy's go.sum.
gobuild_flags=""
case "$name" in
etcd)
	(cd "$work" && for m in $(local_replaces); do go mod edit -dropreplace "$m"; done) >&2
	gobuild_flags=-mod=mod
	;;
kube-apiserver)
	(cd "$work" && for m in $(local_replaces); do go mod edit -dropreplace "$m" -require "$m@v0.${version#v1.}"; done) >&2
	gobuild_flags=-mod=mod
	;;
esac

# Jaeger's and Prometheus's release builds strip debug info; so do we (smaller
# cache, faster link). -trimpath keeps the binary independent of $work.
(cd "$work" && GOWORK=off GOFLAGS=${gobuild_flags:-${GOFLAGS:-}} go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$out.tmp" "$pkg") >&2
mv "$out.tmp" "$out"
echo "build-backend.sh: built $name $version in $(($(date +%s) - start))s" >&2
echo "$out"
