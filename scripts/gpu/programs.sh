#!/usr/bin/env bash
# programs.sh: user programs through the REAL collector on the GPU
# machine, from prebuilt bin/otelcol-gpuprobe, bin/gpuprobe,
# bin/libgpuprobe.so and the clang-built testdata/bpf/{threadhist,
# kernelretsnoop}.o (no Go or clang there).
#
# Builds testdata/cuda/samples/progs.cu (vectorAdd with bpftime's signature,
# _Z9vectorAddPKfS0_Pf, launched ITERS times over exactly N threads in
# 256-thread blocks; PTX and SASS: -gencode arch=compute_XX,code=[compute_XX,
# sm_XX], so the collector can patch it), starts the collector with
# `programs:` threadhist.o and kernelretsnoop.o, kernel_phases, poll_interval
# 5ms, a traces and a metrics file exporter (lib_collector.sh
# start_collector), runs the sample plainly and under `gpuprobe run`, and
# checks from the exported OTLP JSON (scripts/gpu/programs_check.py):
#   output bit-identical          the shim run prints what the plain run did
#   launch spans (kernel_phases)  ITERS launch spans, each with cuda.executing
#                                 (so the launch and kp_exec rings dropped
#                                 nothing: every drop counted is the ring's)
#   threadhist per-thread counts  gpuprobe.map.thread_runs.value{gpuprobe.map.key=0}, the
#                                 exponential histogram over active threads:
#                                 count N, sum N x ITERS, min = max = ITERS
#   threadhist per-block counts   gpuprobe.map.block_threads.value: keys
#                                 0..min(N/256, 1024)-1, each 256 x ITERS;
#                                 no key over limits::max_map_keys
#   kernelretsnoop delivered + dropped  span events of the 'exits' spans +
#                                 gpuprobe.receiver.records.dropped (all rings;
#                                 the others drop none, see above) = N x ITERS
#   kernelretsnoop record fields  every record: block_x < N/256, thread_x <
#                                 256, y and z 0, lane_id = thread_x % 32,
#                                 sm_id < 1024; no (block, thread) more than
#                                 ITERS times
#   module patched, no failure    gpuprobe.receiver.modules.patched >= 1,
#                                 patch.failures 0, no 'module not patched'
#                                 in the log (kernels per module from the
#                                 debug log)
# then fail open: the collector SIGKILLed mid-run of LONG_ITERS launches
# (app output identical to a plain run), and no collector at all. One table
# row per check; exit 1 if any failed. Under a minute on an H100.
#
# Environment: NVCC (default nvcc, then /usr/local/cuda/bin/nvcc), GPU_ARCH
# (e.g. 90; default from nvidia-smi), ITERS (default 10, ≤ 60000), N
# (default 1048576, a multiple of 256, ≤ 2^26), PROGRAMS_ITERS and
# PROGRAMS_N (win over ITERS and N, which sampling.sh reads too),
# LONG_ITERS (default 50000), PROGRAMS_OUT (logs, default
# build/gpu-programs; copied to $OUT).
set -uo pipefail
export GPUPROBE_PATCH=1 # patching is opt-in (shim/README.md)

cd "$(dirname "$0")/../.."
root=$PWD
out=${PROGRAMS_OUT:-$root/build/gpu-programs}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
iters=${PROGRAMS_ITERS:-${ITERS:-10}}
n=${PROGRAMS_N:-${N:-1048576}}
long_iters=${LONG_ITERS:-50000}
block=256
mkdir -p "$out"
rows=()
nfail=0

row() { # CHECK RESULT DETAIL
	rows+=("$(printf '%-36s %-4s %s' "$1" "$2" "$3")")
	[[ $2 == FAIL ]] && nfail=$((nfail + 1))
	printf '==> %-36s %-4s %s\n' "$1" "$2" "$3"
}

finish() {
	[[ -n ${OUT:-} && -d ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
	echo
	local gpu
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) || gpu="(nvidia-smi failed)"
	echo "---- gpu-programs on ${gpu%%$'\n'*} (N=$n ITERS=$iters) ----"
	printf '%-36s %-4s %s\n' check res detail
	printf '%s\n' "${rows[@]}"
	echo "$((${#rows[@]} - nfail)) passed, $nfail failed (gpu-programs)"
	exit $((nfail > 0))
}

# ---- setup ------------------------------------------------------------------
for f in bin/otelcol-gpuprobe bin/gpuprobe bin/libgpuprobe.so testdata/bpf/threadhist.o testdata/bpf/kernelretsnoop.o \
	scripts/gpu/programs_check.py scripts/gpu/lib_metrics.py scripts/gpu/lib_traces.py; do
	[[ -e $f ]] || { row setup FAIL "$f missing: build it where Go and clang are (make gpu-bundle) and carry it"; finish; }
done
command -v python3 >/dev/null || { row setup FAIL "python3 not on PATH"; finish; }
for v in "ITERS=$iters" "N=$n" "LONG_ITERS=$long_iters"; do
	[[ ${v#*=} =~ ^[1-9][0-9]*$ ]] || { row setup FAIL "$v: want a positive integer"; finish; }
done
((n % block == 0 && n <= 1 << 26 && iters <= 60000 && long_iters <= 60000)) ||
	{ row setup FAIL "N=$n must be a multiple of $block and ≤ 2^26, ITERS=$iters and LONG_ITERS=$long_iters ≤ 60000"; finish; }
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
arch=${arch#sm_}
[[ $arch =~ ^[0-9]+$ ]] || { row setup FAIL "no GPU architecture: nvidia-smi gave '$arch'; set GPU_ARCH (e.g. 90)"; finish; }

app=$out/progs
if ! "$nvcc" -O2 -gencode "arch=compute_$arch,code=[compute_$arch,sm_$arch]" -o "$app" testdata/cuda/samples/progs.cu \
	>"$out/nvcc.txt" 2>&1; then
	row "nvcc sm_$arch+compute_$arch" FAIL "$(tail -1 "$out/nvcc.txt") (see $out/nvcc.txt)"
	finish
fi
if ! "$app" "$iters" "$n" >"$out/plain.txt" 2>&1; then
	row "plain run" FAIL "$(tail -1 "$out/plain.txt")"
	finish
fi
row "plain run" ok "$(tr '\n' ' ' <"$out/plain.txt")"

# ---- the collector with both programs ---------------------------------------
. scripts/gpu/lib_collector.sh
max_threads=$((n > 1 << 20 ? n : 1 << 20))
receiver_yaml=$(printf '%s\n' \
	"    metrics_interval: 500ms" \
	"    buffers:" "      max_threads: $max_threads" \
	"    limits:" "      max_map_keys: 1024" \
	"    programs:" \
	"      - path: $root/testdata/bpf/threadhist.o" \
	"      - path: $root/testdata/bpf/kernelretsnoop.o")

# shim_run DIR ITERS: the sample under `gpuprobe run` against DIR's
# collector (output DIR/shim.txt, stderr DIR/shim.err, shim trace
# DIR/shim.trace.txt); returns the app's status.
shim_run() {
	GPUPROBE_TIMEOUT_MS=20000 timeout 300 bin/gpuprobe run --socket "$1/agent.sock" --shim bin/libgpuprobe.so \
		--trace "$1/shim.trace.txt" -- "$app" "$2" "$n" >"$1/shim.txt" 2>"$1/shim.err"
}

run=$out/run
mkdir -p "$run"
if ! start_collector "$run" "$receiver_yaml" metrics; then
	row "collector started" FAIL "no socket in 10 s: $(tail -1 "$run/collector.log") (see $run/collector.log, $run/config.yaml)"
	finish
fi
shim_run "$run" "$iters"
rc=$?
sleep 2.5 # the receiver's poll, the retired maps' last emission (metrics_interval 500ms)
kill -TERM "$col"
wait "$col"
if [[ $rc -ne 0 ]]; then
	row "output bit-identical" FAIL "app exit $rc: $(tail -1 "$run/shim.err") (see $run/shim.err, $run/shim.trace.txt)"
elif cmp -s "$out/plain.txt" "$run/shim.txt"; then
	row "output bit-identical" ok "$(grep -m1 checksum "$run/shim.txt")"
else
	row "output bit-identical" FAIL "diff $out/plain.txt $run/shim.txt"
fi
python3 scripts/gpu/programs_check.py "$run/traces.json" "$run/metrics.json" "$run/collector.log" "$n" "$iters" "$block" \
	>"$run/check.txt" 2>"$run/check.err"
prc=$?
while IFS=$'\t' read -r check res detail; do
	row "$check" "$res" "$detail"
done <"$run/check.txt"
if [[ -s $run/check.err || ! -s $run/check.txt ]]; then # a traceback, or no check ran
	row "programs_check.py" FAIL "exit $prc: $(tail -1 "$run/check.err") (see $run/check.err)"
fi
row "collector log (information)" ok "$(grep -c $'\terror\t' "$run/collector.log") error and $(grep -c $'\twarn\t' "$run/collector.log") warning lines (see $run/collector.log)"

# ---- fail open 1: the collector SIGKILLed mid-run ----------------------------
"$app" "$long_iters" "$n" >"$out/long.plain.txt" 2>&1
killed=$out/killed
mkdir -p "$killed"
if ! start_collector "$killed" "$receiver_yaml" metrics; then
	row "fail open: collector SIGKILLed" FAIL "collector did not start (see $killed/collector.log)"
else
	shim_run "$killed" "$long_iters" &
	apid=$!
	for _ in $(seq 1200); do
		grep -q 'module patched' "$killed/collector.log" && break
		kill -0 "$apid" 2>/dev/null || break
		sleep 0.025
	done
	patched=$(grep -c 'module patched' "$killed/collector.log")
	sleep 0.05 # mid-run: 50000 launches take about a second or more
	running=no
	kill -0 "$apid" 2>/dev/null && running=yes
	kill -9 "$col"
	wait "$col" 2>/dev/null
	wait "$apid"
	rc=$?
	if [[ $rc -eq 0 && $running == yes && $patched -ge 1 ]] && cmp -s "$out/long.plain.txt" "$killed/shim.txt"; then
		row "fail open: collector SIGKILLed" ok "output identical ($patched module(s) patched before the kill, $long_iters launches)"
	else
		row "fail open: collector SIGKILLed" FAIL "app exit $rc, app running at the kill: $running, modules patched before: $patched (want >= 1; raise LONG_ITERS if the app ended first); diff $out/long.plain.txt $killed/shim.txt"
	fi
fi

# ---- fail open 2: no collector ----------------------------------------------
# stdout as plain's; stderr one line saying the run is unprobed.
if timeout 120 bin/gpuprobe run --socket "$out/none/agent.sock" --shim bin/libgpuprobe.so -- "$app" "$iters" "$n" \
	>"$out/nocollector.txt" 2>"$out/nocollector.err" && cmp -s "$out/plain.txt" "$out/nocollector.txt" &&
	[[ $(grep -c . "$out/nocollector.err") == 1 ]]; then
	row "fail open: no collector" ok "output identical, one line on stderr: $(head -c 120 "$out/nocollector.err")"
else
	row "fail open: no collector" FAIL "see $out/nocollector.txt"
fi
finish
