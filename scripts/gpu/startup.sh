#!/usr/bin/env bash
# startup.sh: what patching costs an application's start, on the GPU
# machine, from prebuilt bin/otelcol-gpuprobe, bin/gpuprobe and
# bin/libgpuprobe.so. It writes and builds (nvcc, sm_90 SASS + compute_90
# PTX, like cuda-samples) a program whose one module carries KERNELS
# template instantiations of a reduction (default 160), which launches
# each once, then sleeps SETTLE_MS and launches each again. It times the
# whole program plainly and under `gpuprobe run` with the shim's default
# (GPUPROBE_PATCH_WAIT_MS unset: patching off the application's threads),
# twice, and from the collector's traces counts the launches with device
# phases from the probes (cuda.launch.window "inline_ptx") and those
# without. Both starts share the shim's
# cache of compiled patched images (GPUPROBE_CACHE_DIR, emptied first):
# from the shim's trace it counts cache hits and the patch thread's JIT
# time. Prints one table row per run.
# Checks: output identical to plain; first start <= plain + 100 ms
# (LIMIT_MS); the second round of launches has device phases; the first
# start has no cache hit, the second at least one.
# Environment: NVCC, KERNELS, SETTLE_MS (default 3000), LIMIT_MS (100),
# STARTUP_OUT (default build/gpu-startup).
set -uo pipefail
export GPUPROBE_PATCH=1
unset GPUPROBE_PATCH_WAIT_MS # the default: never block a load
cd "$(dirname "$0")/../.."
out=${STARTUP_OUT:-$PWD/build/gpu-startup}
kernels=${KERNELS:-160}
settle=${SETTLE_MS:-3000}
limit=${LIMIT_MS:-100}
mkdir -p "$out"
{
	cat <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
#include <unistd.h>
template <int N>
__global__ void reduce(const float *in, float *out, int n)
{
	__shared__ float s[256];
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	s[threadIdx.x] = i < n ? in[i] * (float)(N + 1) : 0.f;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k >>= 1) {
		if (threadIdx.x < k)
			s[threadIdx.x] += s[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		atomicAdd(out, s[0]);
}
typedef void (*kfn)(const float *, float *, int);
CU
	printf 'static kfn ks[] = {'
	for ((i = 0; i < kernels; i++)); do printf 'reduce<%d>, ' "$i"; done
	printf '};\n'
	cat <<'CU'
int main(int argc, char **argv)
{
	int settle = argc > 1 ? atoi(argv[1]) : 0, n = 1 << 16, nk = sizeof ks / sizeof ks[0];
	float *in, *out, h = 0;
	cudaMalloc(&in, n * sizeof(float));
	cudaMalloc(&out, sizeof(float));
	cudaMemset(in, 0, n * sizeof(float));
	cudaMemset(out, 0, sizeof(float));
	for (int round = 0; round < 2; round++) {
		for (int k = 0; k < nk; k++)
			ks[k]<<<n / 256, 256>>>(in, out, n);
		cudaDeviceSynchronize();
		if (round == 0 && settle > 0)
			usleep(settle * 1000);
	}
	cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost);
	printf("startup: kernels=%d launches=%d sum=%g err=%s\n", nk, 2 * nk, h, cudaGetErrorString(cudaGetLastError()));
	return 0;
}
CU
} >"$out/startup.cu"
"${NVCC:-nvcc}" -O3 -cudart shared -gencode arch=compute_90,code=[sm_90,compute_90] -o "$out/startup" "$out/startup.cu" \
	>"$out/nvcc.txt" 2>&1 || { echo "gpu-startup: nvcc failed: $(tail -3 "$out/nvcc.txt")"; exit 1; }
. scripts/gpu/lib_collector.sh

# ms CMD...: runs CMD, its stdout to $out/last.txt; prints the wall time in ms.
ms() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >"$out/last.txt" 2>>"$out/stderr.txt"
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

status=0
cache=$out/cache
rm -rf "$cache"
mkdir -p "$cache"
chmod 1777 "$cache"
export GPUPROBE_CACHE_DIR=$cache
# The wall time of a start is the program's, minus the settle sleep that
# lets the swap happen before the second round.
plain=$(ms "$out/startup" 0)
cp "$out/last.txt" "$out/plain.txt"
printf '%-34s %8s %10s %10s %6s %8s\n' "startup|run" "ms" "phased" "unphased" "hits" "jit_ms"
printf '%-34s %8d %10s %10s %6s %8s\n' "startup|plain" "$plain" - - - -
for run in first second; do
	start_traces_collector "$out" || { echo "gpu-startup: collector did not start (see $out/collector.log)"; exit 1; }
	rm -f "$out/shim-$run.log"
	t=$(GPUPROBE_TRACE="$out/shim-$run.log" ms timeout 300 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- "$out/startup" "$settle")
	t=$((t - settle))
	cmp -s "$out/plain.txt" "$out/last.txt" || { echo "gpu-startup: $run: output differs (diff $out/plain.txt $out/last.txt)"; status=1; }
	sleep 1.5 # the receiver's grace and poll
	kill -TERM "$col"
	wait "$col"
	cp "$out/traces.json" "$out/traces-$run.json"
	read -r phased unphased < <(python3 - "$out/traces-$run.json" <<'PY'
import sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
spans, children = load(sys.argv[1])
ls = launch_spans(spans)
# Device phases from the probes: the span's window is the probes' own
# (cuda.launch.window "inline_ptx"); the driver's windows give every
# launch cuda.executing, so that span says nothing of the swap.
p = sum(1 for s, at in ls if at.get("cuda.launch.window", {}).get("stringValue") == "inline_ptx")
print(p, len(ls) - p)
PY
)
	# The shim's trace: "cache: hit NAME" per module loaded from the cache,
	# "swapped in (N kernels; collector X ms, JIT Y ms)" per module.
	hits=$(grep -c 'cache: hit ' "$out/shim-$run.log" 2>/dev/null)
	jit=$(sed -n 's/.*swapped in .*JIT \([0-9.]*\) ms).*/\1/p' "$out/shim-$run.log" 2>/dev/null | awk '{s += $1} END {printf "%.1f", s}')
	printf '%-34s %8d %10s %10s %6s %8s\n' "startup|gpuprobe run ($run start)" "$t" "${phased:-?}" "${unphased:-?}" "${hits:-0}" "${jit:-?}"
	if [[ $run == first ]] && ((${hits:-0} != 0)); then
		echo "gpu-startup: FAIL: first start: ${hits} cache hits in an emptied cache"
		status=1
	fi
	if [[ $run == second ]] && ((${hits:-0} < 1)); then
		echo "gpu-startup: FAIL: second start: no cache hit (see $out/shim-second.log, $cache)"
		status=1
	fi
	if [[ $run == first ]] && ((t > plain + limit)); then
		echo "gpu-startup: FAIL: first start ${t} ms > plain ${plain} ms + ${limit} ms"
		status=1
	fi
	if ((${phased:-0} < kernels)); then
		echo "gpu-startup: FAIL: $run: ${phased:-0} launches with device phases, want >= $kernels (the second round, after the swap)"
		status=1
	fi
done
((status == 0)) && echo "gpu-startup: PASS (plain ${plain} ms, limit +${limit} ms; second start from the cache)"
exit $status
