#!/usr/bin/env bash
# shim-spike.sh (experiment): the interception spike of the shim,
# on the GPU machine, from prebuilt binaries (no Go there):
#
#   bin/gpuprobe        (make bin/gpuprobe)      `run`
#   bin/gpuprobe-harness (make bin/gpuprobe-harness) `agent-dump`
#   bin/libgpuprobe.so  (make bin/libgpuprobe.so)
#   bin/shim.test       (make bin/shim.test; optional: the mock-driver
#                        launch-overhead benchmark, needs gcc and shim/)
#
# For each of: vectorAdd with static cudart (nvcc's default), vectorAdd with
# -cudart shared, a PyTorch matmul script and a PyTorch CUDA graph script
# (torch.cuda.graph capture and replays: captured launches must not be
# recorded, each replay's kernel nodes must), it
#   1. runs the app plainly (reference output);
#   2. runs it with the shim and GPUPROBE_TRACE=FILE (no collector): which
#      dlsym/cuGetProcAddress requests, wrappers, first calls and loads;
#   3. runs it under `gpuprobe run` against `gpuprobe-harness agent-dump` and checks
#      that the launches recorded equal the app's own count and that the
#      output is identical;
#   4. tries CUDA_INJECTION64_PATH=libgpuprobe.so (does the driver load it?).
# Then: the collector SIGKILLed mid-run (the app must finish, same output),
# the host cost per launch on the real driver (an empty-kernel loop, plain
# vs recorded), and the mock benchmark. It prints a short table last and
# exits non-zero if a check failed. About 1-3 minutes.
#
# Environment: GPU_ARCH (nvcc -arch, default native), PYTHON (python3),
# SPIKE_APPS (the apps to run, comma-separated; default all: vectoradd_static,
# vectoradd_shared, torch, torchgraph),
# SPIKE_OUT (logs, default build/gpu-shim-spike; copied to $OUT if set).
set -uo pipefail

cd "$(dirname "$0")/../.."
root=$PWD
gp=$root/bin/gpuprobe
harness=$root/bin/gpuprobe-harness
shim=$root/bin/libgpuprobe.so
out=${SPIKE_OUT:-$root/build/gpu-shim-spike}
arch=${GPU_ARCH:-native}
py=${PYTHON:-python3}
mkdir -p "$out"
rows=()
failed=0

row() {
	rows+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
	[[ "$2" == FAIL ]] && failed=$((failed + 1))
	printf '==> %-34s %-5s %s\n' "$1" "$2" "$3"
}

for f in "$gp" "$harness" "$shim"; do
	[[ -x "$f" || -f "$f" ]] || { echo "missing $f: build it on the development machine (make bin/gpuprobe bin/libgpuprobe.so)"; exit 2; }
done

# ---- build the samples -----------------------------------------------------
apps=()
build() { # NAME NVCC-ARGS...
	local name=$1
	shift
	if timeout 300 nvcc -O2 -arch="$arch" "$@" -o "$out/$name" testdata/cuda/shim/vectoradd.cu >"$out/$name.build.log" 2>&1; then
		row "build $name" PASS "nvcc $*"
		apps+=("$name")
	else
		row "build $name" FAIL "see $out/$name.build.log"
	fi
}
build vectoradd_static
build vectoradd_shared -cudart shared

# cmdline NAME: the command of each app.
cmdline() {
	case $1 in
	vectoradd_*) echo "$out/$1 run 50" ;;
	torch) echo "$py $root/testdata/cuda/shim/matmul.py" ;;
	torchgraph) echo "$py $root/testdata/cuda/shim/graph.py" ;;
	esac
}
if $py -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
	apps+=(torch torchgraph)
else
	row "torch" SKIP "no PyTorch with CUDA in $py"
fi

# app_count NAME LOG: the app's own launch count ("app: launches=N").
app_count() {
	if [[ $1 == torch* ]]; then
		$(cmdline "$1") --count 2>/dev/null | sed -n 's/^app: launches=//p'
	else
		sed -n 's/^app: launches=//p' "$2"
	fi
}

# dump_run NAME SOCKET CMD...: CMD under `gpuprobe run` with agent-dump on
# SOCKET; sets dump_launches and leaves logs in $out.
dump_run() {
	local name=$1 sock=$2
	shift 2
	rm -f "$sock"
	"$harness" agent-dump --socket "$sock" --exit-after 1 --slot-size 1024 --slots 262144 --timeout 120s >"$out/$name.dump.txt" 2>&1 &
	local dpid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	timeout 120 "$gp" run --socket "$sock" --shim "$shim" -- "$@" >"$out/$name.run.txt" 2>"$out/$name.run.err"
	local rc=$?
	wait "$dpid"
	dump_launches=$(sed -n 's/^agent-dump: total .* launches=\([0-9]*\) .*/\1/p' "$out/$name.dump.txt")
	return $rc
}

if [[ -n ${SPIKE_APPS:-} ]]; then
	keep=()
	for a in "${apps[@]}"; do [[ ,$SPIKE_APPS, == *,$a,* ]] && keep+=("$a"); done
	apps=("${keep[@]}")
fi

for app in "${apps[@]}"; do
	cmd=$(cmdline "$app")
	# 1. plain
	if ! timeout 120 $cmd >"$out/$app.plain.txt" 2>"$out/$app.plain.err"; then
		row "$app plain" FAIL "$(tail -1 "$out/$app.plain.err")"
		continue
	fi
	# 2. trace, no collector
	rm -f "$out/$app.trace.log"
	GPUPROBE_TRACE="$out/$app.trace.log" GPUPROBE_SOCKET=/nonexistent/agent.sock LD_PRELOAD="$shim" \
		timeout 120 $cmd >"$out/$app.trace.txt" 2>"$out/$app.trace.err"
	rc=$?
	t=$out/$app.trace.log
	summary="dlsym(cu*)=$(grep -c 'dlsym(.*"cu' "$t") getproc=$(grep -c 'cuGetProcAddress\(_v2\)\?("' "$t") wrapped=$(grep -c '^gpuprobe.*: wrap ' "$t") by-name=$(grep -c 'via cuGetProcAddress (by name)' "$t") not-wrapped=$(grep -c 'not wrapped' "$t")"
	loads=$(grep -o ': cu[A-Za-z]*Load[A-Za-z]*: [a-z-]* image' "$t" | sed 's/^: //; s/ image//' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
	if [[ $rc -eq 0 ]] && cmp -s "$out/$app.plain.txt" "$out/$app.trace.txt"; then
		row "$app trace (no collector)" PASS "$summary"
	else
		row "$app trace (no collector)" FAIL "rc=$rc or output differs; $summary"
	fi
	row "$app loads" INFO "${loads:-none}"
	row "$app first calls" INFO "$(grep -o 'first call: [A-Za-z0-9_]*' "$t" | sed 's/first call: //' | sort -u | tr '\n' ' ')"
	# 3. recorded through agent-dump
	dump_run "$app" "$out/$app.sock" $cmd
	rc=$?
	want=$(app_count "$app" "$out/$app.plain.txt")
	same=$(cmp -s "$out/$app.plain.txt" "$out/$app.run.txt" && echo same || echo DIFFERENT)
	if [[ $rc -eq 0 && $same == same && -n "$want" && "$dump_launches" == "$want" ]]; then
		row "$app recorded" PASS "launches recorded=$dump_launches app=$want, output $same"
	else
		row "$app recorded" FAIL "rc=$rc launches recorded=${dump_launches:-?} app=${want:-?}, output $same"
	fi
	# 4. CUDA_INJECTION64_PATH
	GPUPROBE_TRACE="$out/$app.inject.log" CUDA_INJECTION64_PATH="$shim" timeout 120 $cmd >/dev/null 2>&1
	if grep -q InitializeInjection "$out/$app.inject.log" 2>/dev/null; then
		row "$app CUDA_INJECTION64_PATH" INFO "driver loaded the shim; wrappers bound: $(grep -c ': wrap ' "$out/$app.inject.log")"
	else
		row "$app CUDA_INJECTION64_PATH" INFO "not loaded (or no InitializeInjection call)"
	fi
done

# ---- collector killed mid-run ---------------------------------------------------
if [[ " ${apps[*]} " == *" vectoradd_static "* ]]; then
	sock=$out/kill.sock
	rm -f "$sock"
	"$out/vectoradd_static" run 20000 >"$out/kill.plain.txt" 2>&1
	"$harness" agent-dump --socket "$sock" --timeout 120s >"$out/kill.dump.txt" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	"$gp" run --socket "$sock" --shim "$shim" -- "$out/vectoradd_static" run 20000 >"$out/kill.run.txt" 2>&1 &
	apid=$!
	sleep 0.5
	kill -9 "$dpid"
	wait "$apid"
	rc=$?
	if [[ $rc -eq 0 ]] && cmp -s "$out/kill.plain.txt" "$out/kill.run.txt"; then
		row "collector SIGKILLed mid-run" PASS "app exit 0, output identical"
	else
		row "collector SIGKILLed mid-run" FAIL "app exit $rc, see $out/kill.run.txt"
	fi
	# ---- host cost per launch on the real driver ----------------------------------
	n=200000
	"$out/vectoradd_static" bench $n >"$out/bench.plain.txt" 2>&1
	base=$(sed -n 's/.*ns_per_launch=//p' "$out/bench.plain.txt")
	LD_PRELOAD=$shim GPUPROBE_SOCKET=/nonexistent/agent.sock "$out/vectoradd_static" bench $n >"$out/bench.fwd.txt" 2>&1
	fwd=$(sed -n 's/.*ns_per_launch=//p' "$out/bench.fwd.txt")
	dump_run bench "$out/bench.sock" "$out/vectoradd_static" bench $n
	rec=$(sed -n 's/.*ns_per_launch=//p' "$out/bench.run.txt")
	dropped=$(sed -n 's/^agent-dump: total .* dropped=\([0-9]*\) .*/\1/p' "$out/bench.dump.txt")
	row "launch loop, real driver (unsynchronised: queue-bound; per-launch cost: scripts/gpu/launch-cost.sh)" INFO "$(awk -v b="$base" -v f="$fwd" -v r="$rec" 'BEGIN{printf "plain %.1f ns, shim forward-only %.1f (+%.1f), shim recording %.1f (+%.1f) per launch", b, f, f-b, r, r-b}'); recorded=$dump_launches dropped=$dropped"
fi

# ---- the mock-driver benchmark (Go test binary) ---------------------------------
if [[ -x bin/shim.test && -d shim/src ]] && command -v gcc >/dev/null; then
	(cd shim && ../bin/shim.test -test.run '^$' -test.bench LaunchOverhead -test.benchtime 10000000x -test.count 3) >"$out/mockbench.txt" 2>&1
	row "launch cost, mock driver" INFO "$(grep -o 'recording.*added-ns/launch' "$out/mockbench.txt" | awk '{print $(NF-1)}' | tr '\n' ' ')ns added (3 runs)"
fi

[[ -n "${OUT:-}" ]] && cp -r "$out" "$OUT/" 2>/dev/null
echo
echo "gpu-shim-spike on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
printf '%s\n' "${rows[@]}"
echo "logs: $out"
exit $((failed > 0))
