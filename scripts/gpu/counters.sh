#!/usr/bin/env bash
# counters.sh: gpuprobe-counters (counters/src, the per-node PM sampler) on
# the GPU machine, from source: gcc, g++, nvcc and ncu there, no Go.
#   abi      counters/src/cupti_pm.h against this toolkit's CUPTI headers
#            (counters/src/abi_check.cc: offsets, sizes, enum values, entry
#            points declared)
#   build    the sampler with gcc -Werror; testdata/cuda/counters/phases.cu
#            with nvcc
#   list     the chip's PM-sampling metrics and the default set as chosen
#            ($out/list.txt)
#   sample   phases.cu's four kernels (sgemm, hgemm on the tensor cores,
#            a 1 GiB copy, an FMA loop), PHASE_MS each, back to back, once
#            plain and once while the sampler runs in its own process at
#            INTERVAL_NS; meanwhile a second sampler on the same device
#            must step aside (exit 5, naming the PM sampling call refused)
#   cost     the sampled phases again at each of COST_INTERVALS: the
#            sampler's CPU and the workload's launch rate against plain
#   ncu      the same kernels under ncu with the sampler's metrics
#            (--cache-control none --clock-control none: warm caches and
#            free clocks, as in the sampled run)
#   check    scripts/gpu/counters_check.py: clock mapping, the sampler's
#            cost, whether it sees the other process's kernels, and one row
#            per kernel and metric: sampler vs ncu, ratio
# Environment: COUNTERS_OUT (default build/gpu-counters; copied to $OUT when
# set), CUDA (/usr/local/cuda), GPU_ARCH (sm_90), PHASE_MS (2500),
# INTERVAL_NS (100000), COST_INTERVALS ("20000 1000000"). Logs: $out/*.log, the table in $out/check.txt,
# samples in $out/samples.json.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${COUNTERS_OUT:-$PWD/build/gpu-counters}
mkdir -p "$out"
CUDA=${CUDA:-/usr/local/cuda}
arch=${GPU_ARCH:-sm_90}
phase_ms=${PHASE_MS:-2500}
interval=${INTERVAL_NS:-100000}
export PATH=$CUDA/bin:$PATH
rows=()
nfail=0

# row NAME PASS|FAIL DETAIL
row() {
	rows+=("$(printf '%-28s %-5s %s' "$1" "$2" "$3")")
	[[ $2 == FAIL ]] && nfail=$((nfail + 1))
	printf 'counters %-28s %-5s %s\n' "$1" "$2" "$3"
}

finish() {
	[[ -f $out/samples.json ]] && gzip -f "$out/samples.json"
	echo
	echo "---- gpu-counters ----"
	printf '%s\n' "${rows[@]}"
	echo "$((${#rows[@]} - nfail)) passed, $nfail failed (gpu-counters)"
	[[ -n ${OUT:-} && -d ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
	exit $((nfail > 0))
}

inc=$(dirname "$(find "$CUDA"/ -name cupti_pmsampling.h 2>/dev/null | head -1)")
lib=$(find "$CUDA"/ -name 'libcupti.so' 2>/dev/null | head -1)
echo "counters: CUPTI headers $inc, library $lib, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
# libcupti loads libnvperf_host/target from its own directory.
[[ -n $lib ]] && export GPUPROBE_CUPTI=$lib LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- abi --------------------------------------------------------------------
if [[ -z $inc || $inc == . ]]; then
	row abi FAIL "no cupti_pmsampling.h under $CUDA (CUDA 12.6+ needed)"
elif g++ -std=c++17 -Wall -I"$CUDA/include" -I"$inc" -Icounters/src counters/src/abi_check.cc -o "$out/abi" >"$out/abi.log" 2>&1 &&
	"$out/abi" >>"$out/abi.log" 2>&1; then
	row abi PASS "$(tail -1 "$out/abi.log")"
else
	row abi FAIL "$(grep -c mismatch "$out/abi.log") lines; see abi.log"
	sed 's/^/    /' "$out/abi.log" | head -40
fi

# ---- build ------------------------------------------------------------------
sampler=$out/gpuprobe-counters
if ! gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o "$sampler" counters/src/*.c -ldl >"$out/build.log" 2>&1; then
	row build FAIL "gcc: $(head -3 "$out/build.log")"
	finish
fi
if ! nvcc -O3 -arch="$arch" -o "$out/phases" testdata/cuda/counters/phases.cu >>"$out/build.log" 2>&1; then
	row build FAIL "nvcc phases.cu: $(tail -3 "$out/build.log")"
	finish
fi
row build PASS "sampler (gcc) and phases.cu (nvcc -arch=$arch)"

# ---- list -------------------------------------------------------------------
if timeout 60 "$sampler" --list >"$out/list.txt" 2>"$out/list.log"; then
	row list PASS "$(grep -cE '^(counter|ratio|throughput) ' "$out/list.txt") base metrics; chosen: $(grep -c '^chosen' "$out/list.txt")"
	grep -E '^(chip|chosen|left-out)' "$out/list.txt" | sed 's/^/    /'
else
	row list FAIL "exit $?: $(tail -2 "$out/list.log")"
	finish
fi

# ---- sample -----------------------------------------------------------------
timeout 120 "$out/phases" phases "$phase_ms" >"$out/baseline.json" 2>"$out/baseline.log" ||
	row "phases plain" FAIL "$(tail -2 "$out/baseline.log")"
"$sampler" -i "$interval" -o "$out/samples.json" 2>"$out/sampler.log" &
spid=$!
# The header is written once sampling has started.
for _ in $(seq 300); do
	grep -q '"type":"meta"' "$out/samples.json" 2>/dev/null && break
	kill -0 $spid 2>/dev/null || break
	sleep 0.1
done
if ! grep -q '"type":"meta"' "$out/samples.json" 2>/dev/null; then
	wait $spid
	row sample FAIL "the sampler did not start (exit $?): $(tail -3 "$out/sampler.log")"
	finish
fi
timeout 30 "$sampler" -t 0.5 -o "$out/second.json" >"$out/second.log" 2>&1
code=$?
if ((code == 5)) && grep -q 'cuptiPmSampling' "$out/second.log"; then
	row "second sampler" PASS "exit 5: $(grep cuptiPmSampling "$out/second.log" | head -1 | cut -c1-120)"
else
	row "second sampler" FAIL "exit $code (want 5, naming a cuptiPmSampling call): $(tail -1 "$out/second.log" | cut -c1-160)"
fi
timeout 120 "$out/phases" phases "$phase_ms" >"$out/phases.json" 2>"$out/phases.log" ||
	row "phases sampled" FAIL "$(tail -2 "$out/phases.log")"
# stop_sampler PID: SIGINT, then at most 60 s for its last decode.
stop_sampler() {
	kill -INT "$1"
	(sleep 60 && kill -KILL "$1" 2>/dev/null) &
	local dog=$!
	wait "$1"
	local rc=$?
	kill $dog 2>/dev/null
	return $rc
}
stop_sampler $spid
code=$?
tail -1 "$out/sampler.log" | sed 's/^/    /'
if ((code == 0)); then
	row sample PASS "$(grep -c '"type":"sample"' "$out/samples.json") samples at $interval ns"
else
	row sample FAIL "sampler exit $code: $(tail -2 "$out/sampler.log")"
fi

# ---- cost ------------------------------------------------------------------
for iv in ${COST_INTERVALS-20000 1000000}; do
	"$sampler" -i "$iv" -o "$out/cost-$iv.json" 2>"$out/cost-$iv.log" &
	cpid=$!
	for _ in $(seq 300); do
		grep -q '"type":"meta"' "$out/cost-$iv.json" 2>/dev/null && break
		kill -0 $cpid 2>/dev/null || break
		sleep 0.1
	done
	timeout 120 "$out/phases" phases "$phase_ms" >"$out/cost-$iv-phases.json" 2>>"$out/cost-$iv.log"
	if stop_sampler $cpid && python3 scripts/gpu/counters_check.py cost "$out/cost-$iv.json" "$out/cost-$iv-phases.json" \
		"$out/baseline.json" >"$out/cost-$iv.txt" 2>&1; then
		row "cost at $iv ns" PASS "$(head -1 "$out/cost-$iv.txt" | cut -d: -f2- | cut -c1-150)"
		sed 's/^/    /' "$out/cost-$iv.txt"
	else
		row "cost at $iv ns" FAIL "$(tail -2 "$out/cost-$iv.log" | tr '\n' ' ' | cut -c1-160)"
	fi
	# Only the header and the end line are kept: the samples of a cost run
	# are not read.
	grep -v '"type":"sample"' "$out/cost-$iv.json" >"$out/cost-$iv.meta.json" && rm -f "$out/cost-$iv.json"
done

# ---- ncu --------------------------------------------------------------------
# ncu knows a "pmsampling:x" metric as x.
metrics=$(python3 -c 'import json,sys; print(",".join(m.split(":", 1)[-1] for m in json.loads(open(sys.argv[1]).readline())["metrics"]))' "$out/samples.json")
ncu_flags=(--csv --print-units base --cache-control none --clock-control none -k 'regex:^(sgemm|hgemm|copy|fmaloop)$')
if ! command -v ncu >/dev/null; then
	row ncu FAIL "ncu not on PATH ($CUDA/bin)"
elif timeout 180 ncu --metrics "$metrics" "${ncu_flags[@]}" "$out/phases" each 3 >"$out/ncu.csv" 2>"$out/ncu.log"; then
	row ncu PASS "$(grep -c '^"' "$out/ncu.csv") rows"
else
	# One metric ncu does not know fails the run: each on its own.
	echo "counters ncu: failed with all metrics ($(tail -1 "$out/ncu.log")); one at a time"
	: >"$out/ncu.csv"
	for m in ${metrics//,/ }; do
		timeout 60 ncu --metrics "$m" "${ncu_flags[@]}" "$out/phases" each 1 >"$out/ncu-one.csv" 2>>"$out/ncu.log" &&
			cat "$out/ncu-one.csv" >>"$out/ncu.csv" || echo "counters ncu: $m failed"
	done
	row ncu PASS "per metric: $(grep -c '^"[0-9]' "$out/ncu.csv") rows"
fi

# ---- check ------------------------------------------------------------------
if python3 scripts/gpu/counters_check.py "$out/samples.json" "$out/phases.json" "$out/baseline.json" "$out/ncu.csv" >"$out/check.txt" 2>&1; then
	row check PASS "$(grep '^counters vs ncu' "$out/check.txt")"
else
	row check FAIL "$(grep -E '^counters (vs ncu|visibility)' "$out/check.txt" | tr '\n' ' ' | cut -c1-200)"
fi
cat "$out/check.txt"
finish
