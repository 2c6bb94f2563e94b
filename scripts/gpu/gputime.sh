#!/usr/bin/env bash
# gputime.sh: GPU time per process on a time-sliced GPU, on the GPU machine
# from prebuilt bin/ (gpuprobe, libgpuprobe.so, otelcol-gpuprobe); needs
# python3 with torch. Measures each tenant kernel's solo duration with CUDA
# events (scripts/gpu/gputime_tenant.py solo), then runs three mixes, each
# GT_SECONDS (default 11) under `gpuprobe run` against one collector:
# three (bf16 GEMM 90%, fp32 GEMM 50%, elementwise 30%: the issue's), long
# (a ~15 ms and a ~9 ms GEMM) and eight tenants. Prints per tenant truth
# (launches × solo duration) against gpu.cuda.process.time (its last
# point, after the collector's SIGTERM settled everything) as shares of
# wall time and the error in points; the truth sum against the attributed
# sum and the GPU's union, what the attribution cut, and from the traces
# the windows' own sum, union and short hand-over overlaps (clocks of
# processes that disagree), and NVML's per-process SM utilisation
# integrated over the mix (scripts/gpu/gputime_nvml.py) as a measure
# independent of both (scripts/gpu/gputime_check.py: fails over 2
# points or over wall).
# Environment: GT_OUT (default build/gpu-gputime), GT_FIXTURE (a folder:
# the windows of each mix as a replay fixture, gputime_check.py), GT_SECONDS, GT_MIXES
# (default "solo three long eight"; solo: one tenant alone, its attributed
# time against its own CUDA-event total, within 1%), GT_LAG (gpu_time::lag, default the
# receiver's).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${GT_OUT:-$PWD/build/gpu-gputime}
secs=${GT_SECONDS:-11}
mixes=" ${GT_MIXES:-solo three long eight} "
extra=${GT_LAG:+$(printf '    gpu_time:\n      lag: %s' "$GT_LAG")}
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
	[[ $mixes == *" $name "* ]] || return 0
	mkdir -p "$dir"
	rm -f "$dir"/*.jsonl "$dir"/*.json
	start_collector "$dir" "$extra" metrics || { echo "gputime $name: the collector did not start"; return 1; }
	local pids=() t0 t1 kind duty nvml
	python3 scripts/gpu/gputime_nvml.py "$dir/nvml.json" &
	nvml=$!
	t0=$(date +%s.%N)
	for spec in "$@"; do
		kind=${spec%:*} duty=${spec#*:}
		bin/gpuprobe run --socket "$dir/agent.sock" --shim bin/libgpuprobe.so -- \
			python3 $tenant run "$kind" "$duty" "$secs" "${solo[$kind]}" >>"$dir/tenants.jsonl" 2>>"$dir/tenants.err" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || { echo "gputime $name: a tenant failed"; status=1; }; done
	t1=$(date +%s.%N)
	kill -TERM "$nvml"
	wait "$nvml" || echo "gputime $name: no NVML samples"
	# The shutdown's final flush reads every ring and settles every
	# window the lag still holds: its last point has all of the tenants'.
	sleep 1
	kill -TERM "$col"
	wait "$col"
	python3 scripts/gpu/gputime_check.py "$name" "$dir/tenants.jsonl" "$dir/metrics.json" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$dir/traces.json" || status=1
}
mix solo fp32gemm:0.5
mix three bf16gemm:0.9 fp32gemm:0.5 elementwise:0.3
mix long long:0.8 mid:0.5 elementwise:0.4
mix eight bf16gemm:0.9 fp32gemm:0.5 elementwise:0.3 mid:0.6 long:0.25 elementwise:0.8 fp32gemm:0.4 long:0.2
exit $status
