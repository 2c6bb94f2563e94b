#!/usr/bin/env bash
# examples.sh: bpftime's GPU examples (its example/gpu/*, 20 objects) as a
# user of them would run them here: for each, our own program in the same
# idiom (testdata/bpf, README there), our own application like the
# example's, run plainly and under `gpuprobe run` with the REAL collector's
# `programs:` naming the object; from prebuilt bin/otelcol-gpuprobe,
# bin/gpuprobe, bin/libgpuprobe.so and the clang-built objects (make -f
# testdata/bpf/bpf.mk bpf-objects; no Go or clang here).
#
# Every row: the app's output under the shim is identical to its plain
# run, and the collector's OTLP JSON (traces, metrics, logs file
# exporters) shows what the example's README says it shows, checked by
# scripts/gpu/examples_check.py (exact where the app determines the value):
#   example                           object                 app        shows
#   threadhist                        threadhist.o           progs      per-thread runs = ITERS, per-block threads
#   kernelretsnoop                    kernelretsnoop.o       progs      exit records: delivered + dropped = N x ITERS, ids
#   cuda-counter                      cudacounter.o          progs      calls = ITERS, exits, witness time, printk lines
#   cudagraph                         cudacounter.o          progs graph  the same through graph launches
#   kernel_trace                      kerneltrace.o          progs      entry records: delivered + dropped, ids, times
#   mem_trace                         memcount.o             progs      loads/stores/bytes per process, exact
#   launchlate                        launchlate.o           progs (shared cudart)  launch delay histogram: one sample per block
#   launchlate-kernel-gpu-shared-map  launchlate_ks.o (1504) progs (shared cudart)  the same
#   threadhist-gpu-kernel-shared-map  kernelshared.o (1504)  progs (shared cudart)  {threads x launches, launches}
#   gpu_shard_array                   shardcount.o (1503)    progs      counter {T x ITERS, ITERS}
#   gpu-plain-array                   shardcount.o (1513)    progs      the same, host-backed
#   gpu_shared_map                    compat/gpuhash.o (1501) progs     hash keys, per-key counts, -EEXIST, -E2BIG
#   host_map_test                     compat/hostmaps.o (1512, 1513) progs  per-thread call count/start/id, shared counts
#   threadscheduling                  smhist.o               progs      threads per SM, warps, lanes
#   threadscheduling_dynamic_hook     smhash.o (1501)        progs      (SM, warp) hash keys, counts sum
#   per-thread-timing-dist            threadtime.o           sgemm      per-thread time histogram, every thread
#   perthreadRuntimeDist              threadtime.o           progs      the same on vectorAdd
#   cutlass                           launchcount.o          sgemm      GEMM launches and blocks
#   atomizer                          compat/seeded.o + map_values  progs  seeded config read: one thread per block
#   directly_run_on_gpu               bad/directrun.o        -          refused by `gpuprobe compile` and at collector
#                                                                       start, naming the reason (docs/gpu-programs.md)
# Apps: testdata/cuda/samples/progs.cu (vectorAdd with bpftime's
# signature, ITERS launches over exactly N threads in 256-thread blocks;
# `graph`: CUDA graph launches; built once with the static and once with
# the shared runtime, whose cudaLaunchKernel the host programs probe) and
# testdata/cuda/samples/sgemm.cu (GEMM_N x GEMM_N in 16 x 16 blocks).
# Host programs (uprobes) need root: without it those three rows say
# `skip` and why (never ok). One row per example; exit 1 if any failed.
# About 20 collector starts of ~6 s each: 2 to 3 minutes on an H100/H200.
#
# Environment: NVCC (default nvcc, then /usr/local/cuda/bin/nvcc), GPU_ARCH
# (e.g. 90; default from nvidia-smi), EXAMPLES_N (default 65536, a multiple
# of 256, ≤ 2^20), EXAMPLES_ITERS (default 10, ≤ 1000), EXAMPLES_GEMM_N
# (default 256, a multiple of 16, ≤ 1024), EXAMPLES_ONLY (comma-separated
# example names: run those rows only), EXAMPLES_OUT (logs, default
# build/gpu-examples; copied to $OUT). EXAMPLES_VALIDATE=1: no GPU, write
# every row's collector config and check it with `bin/gpuprobe validate`.
set -uo pipefail
export GPUPROBE_PATCH=1 # patching is opt-in (shim/README.md)

cd "$(dirname "$0")/../.."
root=$PWD
out=${EXAMPLES_OUT:-$root/build/gpu-examples}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
n=${EXAMPLES_N:-65536}
iters=${EXAMPLES_ITERS:-10}
gemm_n=${EXAMPLES_GEMM_N:-256}
only=${EXAMPLES_ONLY:-}
validate=${EXAMPLES_VALIDATE:-0}
block=256
mkdir -p "$out"
rows=()
nfail=0
nskip=0

row() { # EXAMPLE RESULT DETAIL
	rows+=("$(printf '%-34s %-4s %s' "$1" "$2" "$3")")
	[[ $2 == FAIL ]] && nfail=$((nfail + 1))
	[[ $2 == skip ]] && nskip=$((nskip + 1))
	printf '==> %-34s %-4s %s\n' "$1" "$2" "$3"
}

finish() {
	[[ -n ${OUT:-} && -d ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
	echo
	local gpu
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) || gpu="(nvidia-smi failed)"
	echo "---- gpu-examples on ${gpu%%$'\n'*} (N=$n ITERS=$iters GEMM_N=$gemm_n) ----"
	printf '%-34s %-4s %s\n' example res detail
	printf '%s\n' "${rows[@]}"
	echo "$((${#rows[@]} - nfail - nskip)) passed, $nfail failed, $nskip skipped (gpu-examples)"
	exit $((nfail > 0))
}

# ---- setup ------------------------------------------------------------------
objs=(testdata/bpf/threadhist.o testdata/bpf/kernelretsnoop.o testdata/bpf/cudacounter.o testdata/bpf/kerneltrace.o
	testdata/bpf/memcount.o testdata/bpf/launchlate.o testdata/bpf/launchlate_ks.o testdata/bpf/kernelshared.o
	testdata/bpf/shardcount.o testdata/bpf/compat/gpuhash.o testdata/bpf/compat/hostmaps.o testdata/bpf/smhist.o
	testdata/bpf/smhash.o testdata/bpf/threadtime.o testdata/bpf/launchcount.o testdata/bpf/compat/seeded.o
	testdata/bpf/bad/directrun.o)
for f in bin/otelcol-gpuprobe bin/gpuprobe bin/libgpuprobe.so "${objs[@]}" scripts/gpu/examples_check.py \
	scripts/gpu/lib_metrics.py scripts/gpu/lib_traces.py scripts/gpu/lib_collector.sh; do
	[[ $validate == 1 && $f == bin/otelcol-gpuprobe ]] && continue # validate: bin/gpuprobe only
	[[ -e $f ]] || { row setup FAIL "$f missing: build it where Go and clang are (make gpu-bundle) and carry it"; finish; }
done
command -v python3 >/dev/null || { row setup FAIL "python3 not on PATH"; finish; }
for v in "EXAMPLES_N=$n" "EXAMPLES_ITERS=$iters" "EXAMPLES_GEMM_N=$gemm_n"; do
	[[ ${v#*=} =~ ^[1-9][0-9]*$ ]] || { row setup FAIL "$v: want a positive integer"; finish; }
done
((n % block == 0 && n <= 1 << 20 && iters <= 1000 && gemm_n % 16 == 0 && gemm_n <= 1024)) ||
	{ row setup FAIL "EXAMPLES_N=$n (a multiple of $block, ≤ 2^20), EXAMPLES_ITERS=$iters (≤ 1000), EXAMPLES_GEMM_N=$gemm_n (a multiple of 16, ≤ 1024)"; finish; }
. scripts/gpu/lib_collector.sh

declare -A app
if [[ $validate == 1 ]]; then
	# No GPU: the configs only. launch_collector validates instead of starting.
	launch_collector() { bin/gpuprobe validate --host "$1/config.yaml" >"$1/collector.log" 2>&1; }
	for k in progs progs_shared graph sgemm; do app[$k]=true; done
else
	arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
	arch=${arch#sm_}
	[[ $arch =~ ^[0-9]+$ ]] || { row setup FAIL "no GPU architecture: nvidia-smi gave '$arch'; set GPU_ARCH (e.g. 90)"; finish; }
	# PTX and SASS (code=[compute_XX,sm_XX]) so the collector can patch them.
	gen=(-O2 -gencode "arch=compute_$arch,code=[compute_$arch,sm_$arch]")
	# The shared runtime is found where this nvcc's toolkit keeps it (rpath).
	cudalib=$(cd "$(dirname "$(readlink -f "$(command -v "$nvcc")")")/../lib64" 2>/dev/null && pwd)
	shared=(-cudart shared ${cudalib:+-Xlinker "-rpath,$cudalib"})
	for b in progs:progs.cu progs_shared:progs.cu sgemm:sgemm.cu; do
		name=${b%%:*} src=${b#*:} flags=()
		[[ $name == progs_shared ]] && flags=("${shared[@]}")
		if ! "$nvcc" "${gen[@]}" "${flags[@]}" -o "$out/$name" "testdata/cuda/samples/$src" >"$out/nvcc.$name.txt" 2>&1; then
			row "nvcc $name" FAIL "$(tail -1 "$out/nvcc.$name.txt") (see $out/nvcc.$name.txt)"
			finish
		fi
	done
	app[progs]="$out/progs $iters $n"
	app[progs_shared]="$out/progs_shared $iters $n"
	app[graph]="$out/progs $iters $n graph"
	app[sgemm]="$out/sgemm $iters $gemm_n"
	for k in progs progs_shared graph sgemm; do
		# shellcheck disable=SC2086
		if ! ${app[$k]} >"$out/plain.$k.txt" 2>"$out/plain.$k.err"; then
			row "plain run $k" FAIL "$(tail -1 "$out/plain.$k.err")"
			finish
		fi
	done
	# Where the shared runtime's library is, for the host programs' uprobes.
	cudart=$(ldd "$out/progs_shared" 2>/dev/null | awk '/libcudart/ {print $3; exit}')
	[[ -n $cudart ]] && export HOST_LIBRARY_PATHS=$(dirname "$cudart")
fi

# receiver_yaml OBJECT [LINES]: the receiver's lines for one example: its
# object in programs[] (LINES under that entry: map_values).
receiver_yaml() {
	printf '%s\n' "    metrics_interval: 500ms" "    buffers:" "      max_threads: $((n > gemm_n * gemm_n ? n : gemm_n * gemm_n))" \
		"    limits:" "      max_map_keys: 16384" "    programs:" "      - path: $root/$1"
	[[ -n ${2:-} ]] && printf '%s\n' "$2"
}

# example NAME APP OBJECT [LINES]: one row: NAME's app under `gpuprobe run`
# against a collector with OBJECT in programs[], its output against the
# plain run's, then examples_check.py NAME on what the collector exported.
example() {
	local name=$1 kind=$2 obj=$3 lines=${4:-} dir=$out/$1 rc t0 t1 res detail
	[[ -z $only || ,$only, == *,$name,* ]] || return 0
	mkdir -p "$dir"
	if ! start_collector "$dir" "$(receiver_yaml "$obj" "$lines")" logs; then
		row "$name" FAIL "collector did not start: $(tail -1 "$dir/collector.log") (see $dir/collector.log, $dir/config.yaml)"
		return
	fi
	if [[ $validate == 1 ]]; then
		row "$name" ok "config valid ($dir/config.yaml)"
		return
	fi
	t0=$(date +%s%N)
	# shellcheck disable=SC2086 # the app's command line: words on purpose
	GPUPROBE_TIMEOUT_MS=20000 timeout 120 bin/gpuprobe run --socket "$dir/agent.sock" --shim bin/libgpuprobe.so \
		--trace "$dir/shim.trace.txt" -- ${app[$kind]} >"$dir/shim.txt" 2>"$dir/shim.err"
	rc=$?
	t1=$(date +%s%N)
	sleep 2.5 # the receiver's poll, the retired maps' last emission (metrics_interval 500ms)
	kill -TERM "$col"
	wait "$col"
	printf '{"n": %d, "iters": %d, "block": %d, "gemm_n": %d, "t0_ns": %d, "t1_ns": %d, "uid": %d}\n' \
		"$n" "$iters" "$block" "$gemm_n" "$t0" "$t1" "$(id -u)" >"$dir/run.json"
	if [[ $rc -ne 0 ]]; then
		row "$name" FAIL "app exit $rc under gpuprobe run: $(tail -1 "$dir/shim.err") (see $dir/shim.err, $dir/shim.trace.txt)"
		return
	fi
	if ! cmp -s "$out/plain.$kind.txt" "$dir/shim.txt"; then
		row "$name" FAIL "output differs: diff $out/plain.$kind.txt $dir/shim.txt"
		return
	fi
	python3 scripts/gpu/examples_check.py "$name" "$dir" >"$dir/check.txt" 2>"$dir/check.err"
	IFS=$'\t' read -r res detail <"$dir/check.txt"
	if [[ -s $dir/check.err || -z ${res:-} ]]; then
		row "$name" FAIL "examples_check.py: $(tail -1 "$dir/check.err") (see $dir/check.err)"
		return
	fi
	row "$name" "$res" "output identical; $detail"
}

# refused: bpftime's directly_run_on_gpu, refused by decision: `gpuprobe
# compile` exits 1 naming the reason, and a collector with the object in
# programs[] does not start, its log naming the program.
refused() {
	local name=directly_run_on_gpu obj=testdata/bpf/bad/directrun.o dir=$out/directly_run_on_gpu rc
	[[ -z $only || ,$only, == *,$name,* ]] || return 0
	mkdir -p "$dir"
	bin/gpuprobe compile "$obj" >"$dir/compile.txt" 2>&1
	rc=$?
	if [[ $rc -ne 1 ]] || ! grep -q 'kernel of its own' "$dir/compile.txt"; then
		row "$name" FAIL "gpuprobe compile $obj: exit $rc, want 1 and the reason (see $dir/compile.txt)"
		return
	fi
	# The collector must exit at start; one that is still up after 20 s
	# (timeout's 124) accepted the object.
	launch_collector() {
		[[ $validate == 1 ]] && { bin/gpuprobe validate --host "$1/config.yaml" >"$1/collector.log" 2>&1; return; }
		timeout 20 bin/otelcol-gpuprobe --config "$1/config.yaml" >"$1/collector.log" 2>&1
	}
	start_collector "$dir" "$(receiver_yaml "$obj")" metrics
	rc=$?
	if [[ $rc -eq 0 || $rc -eq 124 ]]; then
		row "$name" FAIL "the collector accepted $obj in programs[]: exit $rc (see $dir/collector.log)"
		return
	fi
	if ! grep -q 'kernel of its own' "$dir/collector.log"; then
		row "$name" FAIL "the collector's refusal does not give the reason (see $dir/collector.log)"
		return
	fi
	row "$name" ok "refused by decision (docs/gpu-programs.md): $(grep -o 'section "kprobe/__directly_run"[^;]*' "$dir/compile.txt" | head -1 | cut -c1-160)"
}

# ---- the examples -------------------------------------------------------------
b=testdata/bpf
seeds=$(printf '%s\n' "        map_values:" "          sd_cfg: {\"0\": 1, \"1\": $block, \"2\": 3}" "          sd_acc: {\"0\": 1000}")
example threadhist progs $b/threadhist.o
example kernelretsnoop progs $b/kernelretsnoop.o
example cuda-counter progs $b/cudacounter.o
example cudagraph graph $b/cudacounter.o
example kernel_trace progs $b/kerneltrace.o
example mem_trace progs $b/memcount.o
example launchlate progs_shared $b/launchlate.o
example launchlate-kernel-gpu-shared-map progs_shared $b/launchlate_ks.o
example threadhist-gpu-kernel-shared-map progs_shared $b/kernelshared.o
example gpu_shard_array progs $b/shardcount.o
example gpu-plain-array progs $b/shardcount.o
example gpu_shared_map progs $b/compat/gpuhash.o
example host_map_test progs $b/compat/hostmaps.o
example threadscheduling progs $b/smhist.o
example threadscheduling_dynamic_hook progs $b/smhash.o
example per-thread-timing-dist sgemm $b/threadtime.o
example perthreadRuntimeDist progs $b/threadtime.o
example cutlass sgemm $b/launchcount.o
example atomizer progs $b/compat/seeded.o "$seeds"
refused
finish
