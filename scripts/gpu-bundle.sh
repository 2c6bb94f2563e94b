#!/usr/bin/env bash
# gpu-bundle.sh OUT.tar.gz: packs what `make gpu-test` needs on the GPU
# machine (which has no Go): the prebuilt binaries, the testdata objects and
# CUDA sources, the conformance data, the Makefile and the scripts. On the GPU
# machine: tar xzf OUT.tar.gz && cd gpuprobe && make gpu-test
# (or bash scripts/gpu-test.sh where make is missing).
set -euo pipefail

cd "$(dirname "$0")/.."
dst=${1:?usage: gpu-bundle.sh OUT.tar.gz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/gpuprobe
mkdir -p "$b/bin" "$b/scripts" "$b/testdata"

for f in bin/gpuprobe bin/otelcol-gpuprobe; do
	[[ -x "$f" ]] && cp "$f" "$b/bin/"
done
[[ -x "$b/bin/gpuprobe" ]] || { echo "gpu-bundle: bin/gpuprobe missing (make build)" >&2; exit 1; }
cp Makefile "$b/"
cp scripts/*.sh "$b/scripts/"
for d in testdata/bpf testdata/cuda; do
	[[ -d "$d" ]] && cp -r "$d" "$b/testdata/"
done
[[ -f testdata/config.yaml ]] && cp testdata/config.yaml "$b/testdata/"
for c in conformance shared/conformance ../shared/conformance; do
	if [[ -d "$c/tests" ]]; then
		cp -r "$c" "$b/conformance"
		break
	fi
done
[[ -d "$b/conformance" ]] || echo "gpu-bundle: warning: no conformance data found" >&2

mkdir -p "$(dirname "$dst")"
tar -C "$stage" -czf "$dst" gpuprobe
echo "gpu-bundle: $dst ($(du -h "$dst" | cut -f1))"
