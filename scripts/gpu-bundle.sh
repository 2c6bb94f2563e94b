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
# testdata: eBPF objects and sources, CUDA samples, SASS-comparison twins,
# the conformance data, the default config.
cp -r testdata/. "$b/testdata/"
if [[ ! -d "$b/testdata/conformance/tests" ]]; then
	for c in ../shared/conformance shared/conformance; do
		[[ -d "$c/tests" ]] && { cp -r "$c" "$b/conformance"; break; }
	done
fi

mkdir -p "$(dirname "$dst")"
tar -C "$stage" -czf "$dst" gpuprobe
echo "gpu-bundle: $dst ($(du -h "$dst" | cut -f1))"
