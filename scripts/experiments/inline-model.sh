#!/usr/bin/env bash
# inline-model.sh (experiment): on the GPU machine, builds testdata/cuda/model/kp_model.cu
# (kernel_phases' logic in CUDA C around vectorAdd: plain, inlined, called,
# and a ticket-based variant) and testdata/cuda/model/kp_variants.cu (other
# designs of the per-block protocol, and the floor of its exit and fold) and
# runs each RUNS times (default 3); each run prints the medians and ratios to
# the plain kernel, measured in the same run. Environment: NVCC, GPU_ARCH (default from nvidia-smi), RUNS, MODEL_OUT
# (default build/gpu-inline-model).
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=${MODEL_OUT:-build/gpu-inline-model}
if [[ -z ${GPU_ARCH:-} ]]; then
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
	GPU_ARCH=sm_$cap
fi
mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for m in kp_model kp_variants; do
	"$nvcc" -O3 -arch="$GPU_ARCH" -o "$out/$m" "testdata/cuda/model/$m.cu"
	echo "$m on $gpu"
	for _ in $(seq "${RUNS:-3}"); do timeout 120 "$out/$m"; done
done
