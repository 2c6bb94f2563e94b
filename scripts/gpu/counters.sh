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
#   sweep    the same for each configuration of CT_SWEEP (space-separated
#            INTERVAL_NS:DECODE_MS:MAX_SAMPLES:HW_BUFFER_MB; default none),
#            one row each in $out/sweep.txt: samples and the share of the
#            run they cover, decodes, decode time (mean, longest call),
#            evaluation and writing per sample, overflows, the sampler's
#            CPU, RSS and image size, the launch rate against plain.
#            About 15 s of GPU time a configuration. To tell whether a
#            decode costs by the image's size (max samples) or by the
#            samples it decodes (interval x decode period):
#              CT_SWEEP="100000:20:4000:128 100000:20:500:128 100000:5:500:128
#                        1000000:100:500:128 20000:10:2000:512 100000:50:4000:512"
#            The first two decode ~200 samples into images of 4000 and 500;
#            the third ~50 into 500; the fourth ~100 at a 1 ms interval;
#            the last two ~500 each with a 512 MiB buffer, at 20 us into
#            2000 and at 100 us into 4000.
#   ncu      the same kernels under ncu with the sampler's metrics
#            (--cache-control none --clock-control none: warm caches and
#            free clocks, as in the sampled run)
#   check    scripts/gpu/counters_check.py: clock mapping, the sampler's
#            cost, whether it sees the other process's kernels, and one row
#            per kernel and metric: sampler vs ncu, ratio
# abi, build, list and a plain run of the phases always run; COUNTERS_PARTS
# picks among sample, cost, ncu, check and sweep (default all; ncu and
# check need sample), e.g. COUNTERS_PARTS=sweep CT_SWEEP="...".
# Environment: COUNTERS_OUT (default build/gpu-counters; copied to $OUT when
# set), CUDA (/usr/local/cuda), GPU_ARCH (sm_90), PHASE_MS (2500),
# INTERVAL_NS (100000), COST_INTERVALS ("20000 1000000"), COUNTERS_PARTS,
# CT_SWEEP. Logs: $out/*.log, the table in $out/check.txt, the sweep's in
# $out/sweep.txt, samples in $out/samples.json.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${COUNTERS_OUT:-$PWD/build/gpu-counters}
mkdir -p "$out"
CUDA=${CUDA:-/usr/local/cuda}
arch=${GPU_ARCH:-sm_90}
phase_ms=${PHASE_MS:-2500}
interval=${INTERVAL_NS:-100000}
export PATH=$CUDA/bin:$PATH
parts=,${COUNTERS_PARTS:-sample,cost,ncu,check,sweep},
for p in ${parts//,/ }; do
	[[ ,sample,cost,ncu,check,sweep, == *,$p,* ]] ||
		{ echo "counters: unknown part '$p' in COUNTERS_PARTS (have sample,cost,ncu,check,sweep)" >&2; exit 2; }
done
want() { [[ $parts == *,$1,* ]]; }
if { want ncu || want check; } && ! want sample; then
	echo "counters: COUNTERS_PARTS: ncu and check need sample (its metrics and samples)" >&2
	exit 2
fi
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

# ---- plain ------------------------------------------------------------------
# What the sampled runs' launch rates are measured against.
timeout 120 "$out/phases" phases "$phase_ms" >"$out/baseline.json" 2>"$out/baseline.log" ||
	row "phases plain" FAIL "$(tail -2 "$out/baseline.log")"

# wait_header PID FILE: until the sampler PID wrote its header to FILE
# (once sampling has started), it exited, or 30 s passed.
wait_header() {
	for _ in $(seq 300); do
		grep -q '"type":"meta"' "$2" 2>/dev/null && return
		kill -0 "$1" 2>/dev/null || return
		sleep 0.1
	done
}

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

# cost_run PREFIX ARGS...: the sampler with ARGS over the phases; PREFIX.log
# its stderr, PREFIX-phases.json the phases, PREFIX.meta.json its header
# and end line (the samples of a cost run are not read). Status: the
# sampler's.
cost_run() {
	local pre=$1 rc
	shift
	"$sampler" "$@" -o "$pre.json" 2>"$pre.log" &
	local cpid=$!
	wait_header $cpid "$pre.json"
	timeout 120 "$out/phases" phases "$phase_ms" >"$pre-phases.json" 2>>"$pre.log"
	stop_sampler $cpid
	rc=$?
	grep -v '"type":"sample"' "$pre.json" >"$pre.meta.json" && rm -f "$pre.json"
	return $rc
}

# ---- sample -----------------------------------------------------------------
if want sample; then
	"$sampler" -i "$interval" -o "$out/samples.json" 2>"$out/sampler.log" &
	spid=$!
	wait_header $spid "$out/samples.json"
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
	stop_sampler $spid
	code=$?
	tail -1 "$out/sampler.log" | sed 's/^/    /'
	if ((code == 0)); then
		row sample PASS "$(grep -c '"type":"sample"' "$out/samples.json") samples at $interval ns"
	else
		row sample FAIL "sampler exit $code: $(tail -2 "$out/sampler.log")"
	fi
fi

# ---- cost ------------------------------------------------------------------
want cost && for iv in ${COST_INTERVALS-20000 1000000}; do
	if cost_run "$out/cost-$iv" -i "$iv" && python3 scripts/gpu/counters_check.py cost "$out/cost-$iv.meta.json" \
		"$out/cost-$iv-phases.json" "$out/baseline.json" >"$out/cost-$iv.txt" 2>&1; then
		row "cost at $iv ns" PASS "$(head -1 "$out/cost-$iv.txt" | cut -d: -f2- | cut -c1-230)"
		sed 's/^/    /' "$out/cost-$iv.txt"
	else
		row "cost at $iv ns" FAIL "$(tail -2 "$out/cost-$iv.log" | tr '\n' ' ' | cut -c1-160)"
	fi
done

# ---- sweep ------------------------------------------------------------------
if want sweep && [[ -n ${CT_SWEEP:-} ]]; then
	python3 scripts/gpu/counters_check.py sweep-header >"$out/sweep.txt"
	for cfg in $CT_SWEEP; do
		IFS=: read -r iv dm ms hw extra <<<"$cfg"
		if [[ -n $extra || ! $iv =~ ^[0-9]+$ || ! $dm =~ ^[0-9]+$ || ! $ms =~ ^[0-9]+$ || ! $hw =~ ^[0-9]+$ ]]; then
			row "sweep $cfg" FAIL "not INTERVAL_NS:DECODE_MS:MAX_SAMPLES:HW_BUFFER_MB"
			continue
		fi
		pre=$out/sweep-$iv-$dm-$ms-$hw
		if cost_run "$pre" -i "$iv" --decode-ms "$dm" --max-samples "$ms" --hw-buffer-mb "$hw" &&
			python3 scripts/gpu/counters_check.py sweep "$cfg" "$pre.meta.json" "$pre-phases.json" \
				"$out/baseline.json" >"$pre.txt" 2>&1; then
			cat "$pre.txt" >>"$out/sweep.txt"
			row "sweep $cfg" PASS "$(awk '{printf "%s samples (%s), %s decodes of %s us (longest %s), eval %s us a sample, %s overflows, cpu %s, launch rate >= %s", $2, $3, $4, $5, $6, $7, $8, $10, $13}' "$pre.txt")"
		else
			row "sweep $cfg" FAIL "$(tail -q -n2 "$pre.log" "$pre.txt" 2>/dev/null | tr '\n' ' ' | cut -c1-160)"
		fi
	done
	sed 's/^/    /' "$out/sweep.txt"
fi

# ---- ncu --------------------------------------------------------------------
if want ncu; then
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
fi

# ---- check ------------------------------------------------------------------
want check || finish
if python3 scripts/gpu/counters_check.py "$out/samples.json" "$out/phases.json" "$out/baseline.json" "$out/ncu.csv" >"$out/check.txt" 2>&1; then
	row check PASS "$(grep '^counters vs ncu' "$out/check.txt")"
else
	row check FAIL "$(grep -E '^counters (vs ncu|visibility)' "$out/check.txt" | tr '\n' ' ' | cut -c1-200)"
fi
cat "$out/check.txt"
finish
