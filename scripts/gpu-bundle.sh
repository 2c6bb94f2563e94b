#!/usr/bin/env bash
# gpu-bundle.sh OUT.tar.gz: packs what `make gpu-test` needs on the GPU
# machine (which has no Go): the prebuilt binaries, the testdata objects and
# CUDA sources, the conformance data, the Makefile and the scripts (shell and
# Python); and gpuprobe.h with the example programs. On the GPU machine:
#   tar xzf OUT.tar.gz && cd gpuprobe && make gpu-test
# (or bash scripts/gpu-test.sh where make is missing).
set -euo pipefail

cd "$(dirname "$0")/.."
dst=${1:?usage: gpu-bundle.sh OUT.tar.gz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/gpuprobe
mkdir -p "$b/bin" "$b/scripts" "$b/testdata"

# gpuprobe, gpuprobe-harness, the shim and gpuprobe-gpucheck are needed by
# gpu-test's parts (inject, samples, bench, e2e, graphnode); the collector,
# the shim's test binary and the self-timing shim (launch-cost.sh) are
# optional.
for f in bin/gpuprobe bin/gpuprobe-harness bin/libgpuprobe.so bin/gpuprobe-gpucheck bin/otelcol-gpuprobe bin/shim.test \
	bin/libgpuprobe-selftime.so bin/ptx-gpu.test; do
	[[ -e "$f" ]] && cp "$f" "$b/bin/"
done
for f in gpuprobe gpuprobe-harness libgpuprobe.so gpuprobe-gpucheck; do
	[[ -e "$b/bin/$f" ]] || { echo "gpu-bundle: bin/$f missing (make bin/gpuprobe bin/gpuprobe-harness bin/libgpuprobe.so bin/gpuprobe-gpucheck)" >&2; exit 1; }
done
# The objects the inject and compat parts load (compat: every
# testdata/bpf/compat/*.c, gpuprobe-gpucheck -compat), and those of the
# examples part (scripts/gpu/examples.sh; bad/directrun.o its refusal).
compat=$(ls testdata/bpf/compat/*.c | sed 's/\.c$//; s#^testdata/bpf/##')
[[ -n "$compat" ]] || { echo "gpu-bundle: no testdata/bpf/compat/*.c" >&2; exit 1; }
examples="cudacounter kerneltrace kernelshared launchlate_ks shardcount smhist smhash threadtime launchcount bad/directrun"
for f in kernelretsnoop threadhist sasshist launchlate memcount hostcall_rt $compat $examples; do
	[[ -e "testdata/bpf/$f.o" ]] || { echo "gpu-bundle: testdata/bpf/$f.o missing (make -f testdata/bpf/bpf.mk bpf-objects)" >&2; exit 1; }
done
cp Makefile "$b/"
cp scripts/gpu-test.sh "$b/scripts/"
# the checks gpu-test runs (shell and Python: lib_traces.py,
# programs_check.py, ...)
cp -r scripts/gpu "$b/scripts/"
# the Python span processor and the OpenTelemetry SDK stand-in of its
# tests (gpu/inference_server.py imports them from here)
mkdir -p "$b/python"
cp -r python/gpuprobe_otel "$b/python/"
find "$b/python" -name __pycache__ -prune -exec rm -rf {} +
# testdata: eBPF objects and sources, CUDA samples (testdata/cuda/samples,
# shim, inject), the CUDA C models (testdata/cuda/model, scripts/gpu/bench.sh's
# part model), SASS-comparison twins,
# the conformance data, the default config.
cp -r testdata/. "$b/testdata/"
# The GPU programs' header and the examples (testdata/bpf links to three
# of them): what a user writes probes with on the GPU machine.
mkdir -p "$b/jit/include"
cp jit/include/gpuprobe.h "$b/jit/include/"
cp -r examples "$b/"
# gpu/counters.sh builds the PM sampler and its ABI check from source.
mkdir -p "$b/counters"
cp -r counters/src "$b/counters/"
# gpu/hostprobes.sh (run by hand, as root) builds the host probes'
# stand-in CUDA libraries from their sources.
mkdir -p "$b/gpuprobe/hostprobe/testdata"
cp -r gpuprobe/hostprobe/testdata/standin "$b/gpuprobe/hostprobe/testdata/"
if [[ ! -d "$b/testdata/conformance/tests" ]]; then
	for c in ../shared/conformance shared/conformance; do
		[[ -d "$c/tests" ]] && { cp -r "$c" "$b/conformance"; break; }
	done
fi

mkdir -p "$(dirname "$dst")"
tar -C "$stage" -czf "$dst" gpuprobe
echo "gpu-bundle: $dst ($(du -h "$dst" | cut -f1))"
# The device tool carries at most 64 MiB of working tree a call.
size=$(stat -c %s "$dst")
if ((size > 60 << 20)); then
	echo "gpu-bundle: $dst is $((size >> 20)) MiB, over the 60 MiB the GPU machine's carry allows with room to spare" >&2
	exit 1
fi
