#!/usr/bin/env bash
# inject-check.sh: the injector's GPU check, on the GPU machine. Builds
# the samples of testdata/cuda/inject with nvcc (-ptx, for the GPU's arch),
# then runs bin/gpuprobe-gpucheck (built on a machine with Go:
# `go build -o bin/gpuprobe-gpucheck ./cmd/gpuprobe-gpucheck`), which patches
# them with kernel_phases and the testdata/bpf programs, checks the records
# and outputs exactly, times uninstrumented vs empty probe vs kernel_phases
# with the old (host) and the device-side ring reservation (-ringmode),
# and prints a short table last. Exit status non-zero if a check failed.
# Arguments go to gpuprobe-gpucheck: -compat runs only the compatibility
# suite (testdata/bpf/compat; gpu-test.sh's part compat).
#
# Environment: GPUCHECK_BIN (default bin/gpuprobe-gpucheck), NVCC (default
# nvcc, then /usr/local/cuda/bin/nvcc), GPU_ARCH (default from nvidia-smi),
# GPU_INJECT_OUT (default build/gpu-inject; copied to $OUT when set).
set -euo pipefail

cd "$(dirname "$0")/../.."
bin=${GPUCHECK_BIN:-bin/gpuprobe-gpucheck}
out=${GPU_INJECT_OUT:-build/gpu-inject}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$out"

if [[ -z "${GPU_ARCH:-}" ]]; then
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
	GPU_ARCH=sm_$cap
fi
echo "==> nvcc $("$nvcc" --version | tail -1) -> $GPU_ARCH"
for s in vectoradd gemm exits; do
	"$nvcc" -ptx -O3 -arch="$GPU_ARCH" -o "$out/$s.ptx" "testdata/cuda/inject/$s.cu"
done

status=0
"$bin" -ptx "$out" -bpf testdata/bpf "$@" 2>&1 | tee "$out/gpucheck.log" || status=$?
if [[ -n "${OUT:-}" ]]; then
	cp -r "$out" "$OUT/" || true
fi
exit "$status"
