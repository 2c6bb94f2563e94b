#!/usr/bin/env bash
# samples.sh: the end-to-end samples on the GPU machine, from
# prebuilt binaries (no Go there): bin/gpuprobe, bin/libgpuprobe.so and the
# clang-built testdata/bpf/{kernelretsnoop,threadhist,launchlate}.o.
#
# Builds the five samples with nvcc (PTX and SASS for the GPU:
# -gencode arch=compute_XX,code=[compute_XX,sm_XX], so the shim can patch):
#   vectoradd-static  testdata/cuda/shim/vectoradd.cu (static cudart)
#   vectoradd-shared  the same, -cudart shared
#   multistream       testdata/cuda/samples/multistream.cu
#   graph             testdata/cuda/samples/graph.cu
#   ptxload           testdata/cuda/samples/ptxload.cu (-lcuda, PTX strings)
# runs each plainly, then under `gpuprobe run` against
# `gpuprobe-harness agent-dump --patch --expect PLAIN_OUTPUT` in four configurations
#   phases     built-in kernel_phases
#   retsnoop   kernelretsnoop.o (retargeted to every kernel) + kernel_phases
#   threadhist threadhist.o (retargeted to every kernel)
#   launchlate launchlate.o (GPU half, retargeted to every kernel)
# and checks (agent-dump's checks, see cmd/gpuprobe-harness/agentdump_device.go):
#   output       the application's output is bit-identical to the plain run
#   launch counts  launch records per kernel == the sample's printed counts
#   kernels patched every kernel the sample launched was patched
#   device windows per launch id: one kernel_phases record.Exec per run,
#                  blocks == grid blocks, threads == grid x block, none dropped
#   exit records   one per thread per launch, each exit time inside the
#                  device window [first block start, last block end] of a
#                  launch that has the thread (from kernel_phases; tolerance
#                  64 ns, two %globaltimer steps)
#   per-thread counts  threadhist's counter of every thread slot == the
#                  launches that have it (multistream: between 1 and that,
#                  concurrent launches race on the non-atomic add)
#   per-block counts   threadhist's atomic per-block counts exact
#   launchlate histogram  empty (no host-call mailbox in the shim yet)
# then fail open: the collector SIGKILLed mid-run (app output identical to a
# plain run) and no collector at all. One table row per (sample, config,
# check); exit 1 if any failed. About 2-3 minutes on an H100.
#
# Environment: NVCC (default nvcc, then /usr/local/cuda/bin/nvcc), GPU_ARCH
# (e.g. 90; default from nvidia-smi), SAMPLES (default all five), CONFIGS
# (default "phases retsnoop threadhist launchlate"), ITERS_<sample> (iteration
# counts), SAMPLES_OUT (logs, default build/gpu-samples; copied to $OUT).
set -uo pipefail
export GPUPROBE_PATCH=1 # patching is opt-in (shim/README.md)

cd "$(dirname "$0")/../.."
root=$PWD
gp=$root/bin/gpuprobe
harness=$root/bin/gpuprobe-harness
shim=$root/bin/libgpuprobe.so
bpf=$root/testdata/bpf
out=${SAMPLES_OUT:-$root/build/gpu-samples}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
samples=${SAMPLES:-vectoradd-static vectoradd-shared multistream graph ptxload}
configs=${CONFIGS:-phases retsnoop threadhist launchlate}
mkdir -p "$out"
rows=()
failed=0
nfail=0

row() { # SAMPLE CONFIG CHECK RESULT DETAIL
	rows+=("$(printf '%-17s %-10s %-38s %-4s %s' "$1" "$2" "$3" "$4" "$5")")
	[[ $4 == FAIL ]] && failed=1 && nfail=$((nfail + 1))
	printf '==> %-17s %-10s %-38s %-4s %s\n' "$1" "$2" "$3" "$4" "$5"
}

finish() {
	[[ -n ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
	echo
	local gpu
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) || gpu="(nvidia-smi failed)"
	echo "---- gpu-samples on ${gpu%%$'\n'*} ----"
	printf '%-17s %-10s %-38s %-4s %s\n' sample config check res detail
	printf '%s\n' "${rows[@]}"
	echo "$((${#rows[@]} - nfail)) passed, $nfail failed (gpu-samples)"
	exit "$failed"
}

for f in "$gp" "$harness" "$shim" "$bpf/kernelretsnoop.o" "$bpf/threadhist.o" "$bpf/launchlate.o"; do
	[[ -e $f ]] || { row setup - "prebuilt $(basename "$f")" FAIL "missing: build it where Go and clang are, carry it"; finish; }
done
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
arch=${arch:-90}
gencode=(-gencode "arch=compute_$arch,code=[compute_$arch,sm_$arch]")

# ---- build ----------------------------------------------------------------
declare -A src=([vectoradd-static]=testdata/cuda/shim/vectoradd.cu [vectoradd-shared]=testdata/cuda/shim/vectoradd.cu
	[multistream]=testdata/cuda/samples/multistream.cu [graph]=testdata/cuda/samples/graph.cu
	[ptxload]=testdata/cuda/samples/ptxload.cu)
declare -A extra=([vectoradd-shared]="-cudart shared" [ptxload]="-lcuda")
# args SAMPLE [long]: the sample's command-line arguments (a run of a few
# seconds for the SIGKILL case; vectoradd's 2000 iterations: with the old
# per-warp kernel_phases each patched launch wrote 32768 warp records,
# about 5 ms when the ring overflowed, so 20000 outlasted the 150 s timeout).
args() {
	local long=${2:-}
	case $1 in
	vectoradd-*) if [[ -n $long ]]; then echo "run 10000"; else echo "run ${ITERS_vectoradd:-1}"; fi ;;
	multistream) if [[ -n $long ]]; then echo 300; else echo "${ITERS_multistream:-3}"; fi ;;
	graph) if [[ -n $long ]]; then echo 3000; else echo "${ITERS_graph:-5}"; fi ;;
	ptxload) if [[ -n $long ]]; then echo 3000; else echo "${ITERS_ptxload:-4}"; fi ;;
	esac
}
built=()
for s in $samples; do
	[[ -n ${src[$s]:-} ]] || { row "$s" - build FAIL "unknown sample (have: ${!src[*]})"; continue; }
	# shellcheck disable=SC2086 # extra holds several words on purpose
	if "$nvcc" -O2 "${gencode[@]}" ${extra[$s]:-} -o "$out/$s" "${src[$s]}" >"$out/$s.nvcc.txt" 2>&1; then
		built+=("$s")
	else
		row "$s" - "nvcc sm_$arch+compute_$arch" FAIL "$(tail -1 "$out/$s.nvcc.txt")"
	fi
done

# expect SAMPLE PLAIN: the `launches NAME COUNT` lines of a plain run (the
# vectoradd samples print only a total: vectorAdd and scale ITERS each).
expect() {
	case $1 in
	vectoradd-*)
		local it
		it=$(sed -n 's/.* iters=\([0-9]*\) .*/\1/p' "$2")
		printf 'launches _Z9vectorAddPKfS0_Pfi %s\nlaunches _Z5scalePffi %s\n' "$it" "$it"
		;;
	*) grep '^launches ' "$2" ;;
	esac
}

# dump_args CONFIG SAMPLE: sets dargs, agent-dump's program set and checks.
dump_args() {
	case $1 in
	phases) dargs=(--probes kernel_phases) ;;
	retsnoop)
		local ring=$((1 << 20))
		[[ $2 == vectoradd-* ]] && ring=$((1 << 22)) # 2^21 exit records in one run
		dargs=(--probes kernel_phases --programs "$bpf/kernelretsnoop.o" --target '*' --ring-slots "$ring")
		;;
	threadhist)
		dargs=(--probes= --programs "$bpf/threadhist.o" --target '*' --lanes $((1 << 20)))
		[[ $2 == multistream ]] && dargs+=(--racy-thread-counts)
		;;
	launchlate) dargs=(--probes= --programs "$bpf/launchlate.o" --target '*') ;;
	esac
}

# instrumented NAME SAMPLE EXPECT ARGS DUMP_ARGS...: the sample under the
# shim against agent-dump (its pid in $out/NAME.dump.pid); waits for both;
# leaves $out/NAME.{dump,run,err,trace}.txt and $out/NAME.summary.json;
# returns the app's exit status.
instrumented() {
	local name=$1 s=$2 exp=$3 a=$4 sock=$out/$1.sock rc dpid
	shift 4
	rm -f "$sock"
	"$harness" agent-dump --patch --socket "$sock" --exit-after 1 --slot-size 1024 --slots 262144 --timeout 150s \
		--expect "$exp" --summary "$out/$name.summary.json" "$@" >"$out/$name.dump.txt" 2>&1 &
	dpid=$!
	echo "$dpid" >"$out/$name.dump.pid"
	for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
	# shellcheck disable=SC2086 # a holds the sample's arguments
	GPUPROBE_TIMEOUT_MS=20000 timeout 150 "$gp" run --socket "$sock" --shim "$shim" --trace "$out/$name.trace.txt" \
		-- "$out/$s" $a >"$out/$name.run.txt" 2>"$out/$name.err.txt"
	rc=$?
	# An app that never connected (or a stuck collector) must not hold the
	# run: agent-dump prints its checks on SIGTERM.
	for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
	kill -TERM "$dpid" 2>/dev/null
	wait "$dpid"
	return $rc
}

for s in "${built[@]}"; do
	a=$(args "$s")
	# shellcheck disable=SC2086
	if ! "$out/$s" $a >"$out/$s.plain.txt" 2>&1; then
		row "$s" plain "run" FAIL "$(tail -1 "$out/$s.plain.txt")"
		continue
	fi
	row "$s" plain "run" ok "$(grep -m1 checksum "$out/$s.plain.txt")"
	expect "$s" "$out/$s.plain.txt" >"$out/$s.expect.txt"
	for c in $configs; do
		n=$s.$c
		dump_args "$c" "$s"
		instrumented "$n" "$s" "$out/$s.expect.txt" "$a" "${dargs[@]}"
		rc=$?
		if [[ $rc -ne 0 ]]; then
			row "$s" "$c" output FAIL "app exit $rc: $(tail -1 "$out/$n.err.txt")"
		elif cmp -s "$out/$s.plain.txt" "$out/$n.run.txt"; then
			row "$s" "$c" "output bit-identical" ok "$(grep -m1 checksum "$out/$n.run.txt")"
		else
			row "$s" "$c" "output bit-identical" FAIL "diff $out/$s.plain.txt $out/$n.run.txt"
		fi
		if ! grep -q '^agent-dump: check ' "$out/$n.dump.txt"; then
			row "$s" "$c" "agent-dump checks" FAIL "none printed: $(tail -1 "$out/$n.dump.txt")"
		fi
		while IFS= read -r line; do
			rest=${line#agent-dump: check }
			check=${rest%%: *}
			rest=${rest#*: }
			res=${rest%% *}
			row "$s" "$c" "$check" "$res" "${rest#* }"
		done < <(grep '^agent-dump: check ' "$out/$n.dump.txt")
	done

	# Fail open 1: the collector SIGKILLed mid-run, once a module is patched.
	la=$(args "$s" long)
	# shellcheck disable=SC2086
	"$out/$s" $la >"$out/$s.long.plain.txt" 2>&1
	n=$s.killed
	rm -f "$out/$n.dump.txt" "$out/$n.dump.pid"
	instrumented "$n" "$s" "$out/$s.expect.txt" "$la" --probes kernel_phases &
	apid=$!
	for _ in $(seq 600); do grep -q 'patched a module' "$out/$n.dump.txt" 2>/dev/null && break; sleep 0.025; done
	sleep 0.1
	running=no
	pgrep -P "$apid" -x timeout >/dev/null && running=yes # `timeout` lives as long as the app
	killed=no
	[[ -s $out/$n.dump.pid ]] && kill -9 "$(cat "$out/$n.dump.pid")" 2>/dev/null && killed=yes
	wait "$apid"
	rc=$?
	if [[ $rc -eq 0 && $killed == yes && $running == yes ]] && cmp -s "$out/$s.long.plain.txt" "$out/$n.run.txt"; then
		row "$s" fail-open "collector SIGKILLed mid-run" ok "output identical ($(grep -c 'patched a module' "$out/$n.dump.txt") modules patched before the kill)"
	else
		row "$s" fail-open "collector SIGKILLed mid-run" FAIL "app exit $rc, killed=$killed, app running at the kill=$running, see $out/$n.run.txt"
	fi

	# Fail open 2: no collector at all. gpuprobe run says so in one line
	# on stderr (GPUPROBE_QUIET=1 silences it): the app's output is
	# compared without it, and the line is checked to be there once.
	# shellcheck disable=SC2086
	if timeout 120 "$gp" run --socket "$out/none/agent.sock" --shim "$shim" -- "$out/$s" $a >"$out/$s.nocollector.txt" 2>"$out/$s.nocollector.err" &&
		cat "$out/$s.nocollector.err" >>"$out/$s.nocollector.txt" &&
		notice=$(grep -c '^gpuprobe' "$out/$s.nocollector.err") && ((notice == 1)) &&
		cmp -s "$out/$s.plain.txt" <(grep -v '^gpuprobe' "$out/$s.nocollector.txt"); then
		row "$s" fail-open "no collector" ok "output identical, one notice on stderr"
	else
		row "$s" fail-open "no collector" FAIL "see $out/$s.nocollector.txt"
	fi
done
finish
