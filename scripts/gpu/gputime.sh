#!/usr/bin/env bash
# gputime.sh: GPU time per process on a time-sliced GPU, on the GPU machine
# from prebuilt bin/ (gpuprobe, libgpuprobe.so, otelcol-gpuprobe); needs
# python3 with torch. Measures each tenant kernel's solo duration with CUDA
# events (scripts/gpu/gputime_tenant.py solo), then runs three mixes, each
# GT_SECONDS (default 11) under `gpuprobe run` against one collector:
# three (bf16 GEMM 90%, fp32 GEMM 50%, elementwise 30%: the issue's), long
# (kernels of 10 ms and more) and eight tenants. Prints per tenant truth
# (launches × solo duration) against gpu.cuda.process.time as shares of
# wall time and the error in points, and attributed sum against wall
# (scripts/gpu/gputime_check.py: fails over 2 points or over wall).
# Environment: GT_OUT (default build/gpu-gputime), GT_SECONDS.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${GT_OUT:-$PWD/build/gpu-gputime}
secs=${GT_SECONDS:-11}
mkdir -p "$out"
status=0
source scripts/gpu/lib_collector.sh
tenant=scripts/gpu/gputime_tenant.py
declare -A solo
for k in bf16gemm fp32gemm elementwise long mid; do
	solo[$k]=$(python3 $tenant solo $k | python3 -c 'import json,sys; print(json.load(sys.stdin)["solo_ms"])') ||
		{ echo "gputime: solo $k failed"; exit 1; }
	echo "gputime: solo $k ${solo[$k]} ms"
done
mix() {
	local name=$1 dir=$out/$1
	shift
	mkdir -p "$dir"
	rm -f "$dir"/*.jsonl "$dir"/*.json
	start_collector "$dir" "" metrics || { echo "gputime $name: the collector did not start"; return 1; }
	local pids=() t0 t1 kind duty
	t0=$(date +%s.%N)
	for spec in "$@"; do
		kind=${spec%:*} duty=${spec#*:}
		bin/gpuprobe run --socket "$dir/agent.sock" --shim bin/libgpuprobe.so -- \
			python3 $tenant run "$kind" "$duty" "$secs" "${solo[$kind]}" >>"$dir/tenants.jsonl" 2>>"$dir/tenants.err" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || { echo "gputime $name: a tenant failed"; status=1; }; done
	t1=$(date +%s.%N)
	sleep 4 # the attribution settles 2 s behind now
	kill -TERM "$col"
	wait "$col"
	python3 scripts/gpu/gputime_check.py "$name" "$dir/tenants.jsonl" "$dir/metrics.json" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" || status=1
}
mix three bf16gemm:0.9 fp32gemm:0.5 elementwise:0.3
mix long long:0.8 mid:0.5 elementwise:0.4
mix eight bf16gemm:0.9 fp32gemm:0.5 elementwise:0.3 mid:0.6 long:0.25 elementwise:0.8 fp32gemm:0.4 long:0.2
exit $status
