#!/usr/bin/env bash
# gpu-test.sh: the whole GPU check in one go, on the GPU machine, from the
# prebuilt binaries in bin/ (no Go needed there). Run it as `make gpu-test` or
# `bash scripts/gpu-test.sh` from the repository root (or an unpacked
# `make gpu-bundle` archive). It prints a short table last and exits non-zero
# if any step failed.
#
# Environment:
#   GPUPROBE_BIN      the gpuprobe CLI (default bin/gpuprobe)
#   CONFORMANCE_DIR   bpf_conformance data with tests/ and negative/ (default:
#                     the first of testdata/conformance/, conformance/,
#                     shared/conformance/, ../shared/conformance/ that exists)
#   GPU_ARCH          ptxas target (default: from nvidia-smi, e.g. sm_90)
#   GPU_TEST_OUT      where step logs go (default build/gpu-test; also copied
#                     to $OUT when that is set, as on the device runner)
#   PARTS             comma-separated parts to run (default all, in this
#                     order; each fits one 10-minute device call):
#                     conformance  bpf_conformance on the GPU, interp, negative
#                     ptxas        testdata/bpf PTX through ptxas
#                     sass         SASS comparison vs nvcc
#                     inject       scripts/gpu/inject-check.sh (checks only)
#                     compat       the compatibility suite: every
#                                  testdata/bpf/compat program (bpftime's
#                                  GPU idioms) on its sample kernel, maps in
#                                  host and in device memory, exact values
#                                  (gpuprobe-gpucheck -compat); one row per
#                                  program x placement
#                     samples      scripts/gpu/samples.sh (5 samples x 4 configs)
#                     bench        scripts/gpu/bench.sh (kernel ratios, load
#                                  latency, the CUDA C model's limits,
#                                  shim cost per launch; BENCH_PARTS, e.g.
#                                  kernels,model, is bench.sh's PARTS,
#                                  BENCH_CONFIGS and ROUNDS pass through)
#                     e2e          scripts/gpu/e2e.sh
#                     graphnode    scripts/gpu/graphnode.sh
#                     graphspans   scripts/gpu/graph-spans.sh (needs
#                                  bin/otelcol-gpuprobe)
#                     sampling     scripts/gpu/sampling.sh (needs
#                                  bin/otelcol-gpuprobe)
#                     hostwait     scripts/gpu/hostwait.sh (needs
#                                  bin/otelcol-gpuprobe)
#                     programs     scripts/gpu/programs.sh: threadhist.o and
#                                  kernelretsnoop.o through the collector,
#                                  maps checked exactly from its OTLP JSON
#                                  (needs bin/otelcol-gpuprobe, python3)
#                     examples     scripts/gpu/examples.sh: bpftime's 20
#                                  GPU examples (example/gpu/*), each as
#                                  our program of its idiom in programs[]
#                                  with our app like the example's, plainly
#                                  and under gpuprobe run: output identical,
#                                  the OTLP JSON shows what the example's
#                                  README shows (exact where the app fixes
#                                  it), directly_run_on_gpu refused; one row
#                                  per example (needs bin/otelcol-gpuprobe,
#                                  nvcc, python3; root for the 3 rows with
#                                  host programs, else they say skip)
#                     windows      scripts/gpu/windows.sh: the CUPTI ABI,
#                                  the launch loop's cost, and PyTorch
#                                  steps (eager, torch.compile, cuBLAS)
#                                  plain and under gpuprobe run (needs
#                                  bin/otelcol-gpuprobe, python3, torch)
#                     sanitizer    scripts/gpu/sanitizer.sh: the SASS route
#                                  (probes::sass) in cuBLAS, PyTorch and
#                                  Triton kernels: ABI, exact windows,
#                                  cost, fail-open cases, PyTorch steps
#                     frameworkcost scripts/gpu/framework-cost.sh: JAX,
#                                  PyTorch and CuPy launch-bound loops,
#                                  plain and under the shim split by
#                                  mechanism (needs bin/otelcol-gpuprobe,
#                                  python3, jax, torch, cupy)
#                     nodescale    scripts/gpu/node-scale.sh: 16 launch-bound
#                                  PyTorch processes and a training step
#                                  under one collector with the DaemonSet's
#                                  settings, launches exact per process,
#                                  SIGTERM 1 s after (needs
#                                  bin/otelcol-gpuprobe, python3, torch)
#                     kinds        scripts/gpu/kinds.sh: our own programs
#                                  of each launch kind (dynamic
#                                  parallelism, cooperative, launch
#                                  attributes and clusters, device graph
#                                  launch) under gpuprobe run: every
#                                  launch a window or a counted reason,
#                                  one row per kind (needs
#                                  bin/otelcol-gpuprobe, nvcc, python3)
#                     stacks       scripts/gpu/stacks.sh: launch stacks of a
#                                  PyTorch training step (top Python frame
#                                  on three known lines, native frames
#                                  symbolised, step time against plain;
#                                  needs bin/otelcol-gpuprobe, python3, torch)
#                     gputime      scripts/gpu/gputime.sh: three tenant
#                                  mixes (the issue's three, ~15 and
#                                  ~9 ms GEMMs, eight) on one time-sliced
#                                  GPU, truth vs gpu.cuda.process.time per
#                                  tenant in points, truth, attributed and
#                                  union sums, cut time, hand-over
#                                  overlaps of the windows (needs
#                                  bin/otelcol-gpuprobe, python3, torch)
#                     gpuhash      bin/ptx-gpu.test (jit/ptx's tests of
#                                  build tag gpu): the GPU hash map (type
#                                  1501) on the device: a warp inserting one
#                                  key, collisions, a full table, its cost
#                     startup      scripts/gpu/startup.sh: a module of 160
#                                  template kernels, start time plain vs
#                                  under gpuprobe run with the shim's
#                                  default (patching off the application's
#                                  threads; GPUPROBE_PATCH_WAIT_MS unset),
#                                  first and second start, launches with
#                                  device phases after the swap, hits of
#                                  the shim's cache of compiled patched
#                                  images on the second start (needs
#                                  bin/otelcol-gpuprobe, python3)
#                     counters     scripts/gpu/counters.sh: the PM sampler
#                                  (counters/src) built with gcc, its CUPTI
#                                  ABI against the toolkit's headers, four
#                                  kernels of testdata/cuda/counters/
#                                  phases.cu sampled from another process
#                                  and under ncu: sampler vs ncu per kernel
#                                  and metric, the sampler's cost, a second
#                                  sampler stepping aside (needs gcc, g++,
#                                  nvcc, ncu, python3)
#                     inference    scripts/gpu/inference.sh: an HTTP
#                                  inference server (PyTorch MLP,
#                                  OpenTelemetry, python/gpuprobe_otel)
#                                  under gpuprobe run, 100 requests: each
#                                  request's trace holds exactly its
#                                  kernels (torch.profiler's count) as
#                                  children of the request span, with
#                                  device phases; outputs as plain;
#                                  launches outside requests in traces
#                                  of their own (needs
#                                  bin/otelcol-gpuprobe, python3, torch)
#                     e.g. PARTS=samples,bench make gpu-test
#   GPUPROBE_PATCH_WAIT_MS  exported as 600000 unless set: a load waits for
#                     its patched image, so the parts that expect probes on
#                     the first launch stay deterministic (the shim's
#                     default, 0, patches off the application's threads)
#   DRY_RUN=1         no GPU: check that every file each part uses (its
#                     script, libraries, binaries, objects, sources) is
#                     here and that its scripts parse, one row per part;
#                     `--dry-run` as the first argument does the same.
#                     The bundle test (scripts/bundle_test.go) runs it in
#                     an unpacked bundle.
set -uo pipefail

cd "$(dirname "$0")/.."
root=$PWD
export GPUPROBE_PATCH_WAIT_MS=${GPUPROBE_PATCH_WAIT_MS:-600000}
bin=${GPUPROBE_BIN:-$root/bin/gpuprobe}
out=${GPU_TEST_OUT:-$root/build/gpu-test}
mkdir -p "$out"

rows=()
failed=0
all_parts=conformance,ptxas,sass,inject,compat,samples,bench,e2e,graphnode,graphspans,sampling,hostwait,programs,examples,windows,sanitizer,frameworkcost,nodescale,kinds,stacks,gputime,gpuhash,startup,counters,inference
parts=${PARTS:-$all_parts}
for p in ${parts//,/ }; do
	[[ ,$all_parts, == *,$p,* ]] || { echo "gpu-test: unknown part '$p' in PARTS (have $all_parts)" >&2; exit 2; }
done
# want PART: whether PARTS names it.
want() { [[ ,$parts, == *,$1,* ]]; }
[[ ${1:-} == --dry-run ]] && DRY_RUN=1

# row STEP RESULT DETAIL: one line of the final table.
row() {
	rows+=("$(printf '%-30s %-5s %s' "$1" "$2" "$3")")
	[[ "$2" == FAIL ]] && failed=$((failed + 1))
	printf '==> %-30s %-5s %s\n' "$1" "$2" "$3"
}

# summary LOG: the last "N passed, M failed" line of a log, or its last line.
summary() {
	local s
	s=$(grep -E '^[^ ]*[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
	[[ -n "$s" ]] || s=$(tail -1 "$1")
	echo "$s"
}

# step NAME LOGNAME CMD...: runs CMD with its output in $out/LOGNAME and
# records PASS/FAIL with the runner's summary line.
step() {
	local name=$1 log=$out/$2
	shift 2
	echo "==> $name: $*"
	if "$@" >"$log" 2>&1; then
		row "$name" PASS "$(summary "$log")"
	else
		row "$name" FAIL "$(summary "$log") (log: $log)"
		tail -20 "$log" | sed 's/^/    /'
	fi
}

# needs PART: sets need to the files PART uses (globs expanded: one that
# matches nothing stays as written and counts as missing).
needs() {
	local bpf=testdata/bpf cuda=testdata/cuda g=scripts/gpu
	local run=("$bin" bin/gpuprobe-harness bin/libgpuprobe.so)
	local col=(bin/otelcol-gpuprobe "$bin" bin/libgpuprobe.so $g/lib_collector.sh)
	case $1 in
	conformance) need=("$bin" "${conf:-conformance data (CONFORMANCE_DIR)}/tests") ;;
	ptxas) need=("$bin" $bpf/*.o $bpf/compat/*.o) ;;
	sass) need=($g/sass-compare.sh "$bin" testdata/sass/*.data testdata/sass/*.cu) ;;
	inject) need=($g/inject-check.sh bin/gpuprobe-gpucheck $cuda/inject/{vectoradd,gemm,exits}.cu
		$bpf/{kernelretsnoop,threadhist,launchlate,memcount,hostcall_rt}.o) ;;
	compat) need=($g/inject-check.sh bin/gpuprobe-gpucheck $cuda/inject/{vectoradd,gemm,exits}.cu $bpf/compat/*.o) ;;
	samples) need=($g/samples.sh "${run[@]}" $bpf/{kernelretsnoop,threadhist,launchlate}.o
		$cuda/shim/vectoradd.cu $cuda/samples/{multistream,graph,ptxload}.cu) ;;
	bench) need=($g/bench.sh $g/launch-cost.sh bin/gpuprobe-gpucheck "${run[@]}"
		$bpf/{kernelretsnoop,threadhist,kernelshared}.o $bpf/compat/{hostmaps,hashcount}.o
		$cuda/inject/{vectoradd,gemm,exits}.cu $cuda/model/{maps_model.cu,gpuhash_model.cuh} $cuda/bench/launchbench.cu) ;;
	e2e) need=($g/e2e.sh "${run[@]}" $cuda/shim/vectoradd.cu) ;;
	graphnode) need=($g/graphnode.sh "${run[@]}" $cuda/shim/graphnode.cu) ;;
	graphspans) need=($g/graph-spans.sh "${col[@]}" bin/gpuprobe-harness $cuda/samples/graph.cu) ;;
	sampling) need=($g/sampling.sh "${col[@]}" $g/lib_traces.py $cuda/shim/vectoradd.cu) ;;
	hostwait) need=($g/hostwait.sh "${col[@]}" $g/lib_traces.py $cuda/shim/vectoradd.cu) ;;
	programs) need=($g/programs.sh "${col[@]}" $g/{programs_check,lib_metrics,lib_traces}.py
		$bpf/{threadhist,kernelretsnoop}.o $cuda/samples/progs.cu) ;;
	examples) need=($g/examples.sh "${col[@]}" $g/{examples_check,lib_metrics,lib_traces}.py
		$bpf/{threadhist,kernelretsnoop,cudacounter,kerneltrace,memcount,launchlate,launchlate_ks,kernelshared}.o
		$bpf/{shardcount,smhist,smhash,threadtime,launchcount}.o $bpf/compat/{gpuhash,hostmaps,seeded}.o
		$bpf/bad/directrun.o $cuda/samples/{progs,sgemm}.cu $cuda/samples/common.h) ;;
	windows) need=($g/windows.sh "${col[@]}" $g/torchstep.py scripts/gpu/cupti_cost.cu) ;;
	frameworkcost) need=($g/framework-cost.sh "${col[@]}" $g/launchbound.py $g/lib_collector.sh) ;;
	gpuhash) need=(bin/ptx-gpu.test) ;;
	kinds) need=($g/kinds.sh "${col[@]}" $g/lib_metrics.py $cuda/kinds/{cdp,coop,attrs,graphdev}.cu) ;;
	stacks) need=($g/stacks.sh "${col[@]}" $g/stackstep.py $g/lib_traces.py) ;;
	startup) need=($g/startup.sh "${col[@]}" $g/lib_traces.py) ;;
	inference) need=($g/inference.sh "${col[@]}" $g/{inference_server,inference_check,lib_traces}.py
		python/gpuprobe_otel/src/gpuprobe_otel/{__init__,_shim,processor}.py python/gpuprobe_otel/tests/otel_standin.py) ;;
	nodescale) need=($g/node-scale.sh "${col[@]}" $g/launchbound.py $g/torchstep.py $g/lib_metrics.py) ;;
	gputime) need=($g/gputime.sh "${col[@]}" $g/{gputime_tenant,gputime_check}.py $g/lib_collector.sh) ;;
	counters) need=($g/counters.sh $g/counters_check.py counters/src/*.c counters/src/*.h counters/src/abi_check.cc
		$cuda/counters/phases.cu) ;;
	sanitizer) need=($g/sanitizer.sh testdata/bpf/sasshist.o testdata/bpf/memcount.o "${col[@]}" $g/{sassbench,sassprog,sassprof,sanitizer_check,sanitizer_filter,sanitizer_programs,torchstep,lib_traces,lib_metrics}.py) ;;
	esac
}

# dry_run: one row per part: its files present, binaries executable,
# scripts parsed by bash and python3 (when there); exits.
dry_run() {
	local p f missing bad
	for p in ${parts//,/ }; do
		needs "$p"
		missing=() bad=()
		for f in "${need[@]}"; do
			if [[ ! -e $f ]]; then
				missing+=("$f")
			elif [[ $f == bin/* || $f == "$bin" ]] && [[ $f != *.so && ! -x $f ]]; then
				bad+=("$f not executable")
			elif [[ $f == *.sh ]] && ! bash -n "$f" 2>/dev/null; then
				bad+=("$f does not parse")
			elif [[ $f == *.py ]] && command -v python3 >/dev/null &&
				! python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$f" 2>/dev/null; then
				bad+=("$f does not parse")
			fi
		done
		((${#missing[@]} == 0)) || bad=("missing: ${missing[*]}" "${bad[@]}")
		if ((${#bad[@]} == 0)); then
			row "dry-run $p" PASS "${#need[@]} files"
		else
			row "dry-run $p" FAIL "$(IFS=';'; echo "${bad[*]}")"
		fi
	done
	echo
	echo "---- gpu-test (dry run) ----"
	printf '%s\n' "${rows[@]}"
	((failed == 0)) || { echo "gpu-test: $failed part(s) miss files"; exit 1; }
	echo "gpu-test: every part has its files"
	exit 0
}

conf=${CONFORMANCE_DIR:-}
if [[ -z "$conf" ]]; then
	for d in testdata/conformance conformance shared/conformance ../shared/conformance; do
		[[ -d "$d/tests" ]] && { conf=$(cd "$d" && pwd); break; }
	done
fi
[[ ${DRY_RUN:-} == 1 ]] && dry_run

# ---- the machine ------------------------------------------------------------

if [[ ! -x "$bin" ]]; then
	row "gpuprobe binary" FAIL "$bin missing: build it with 'make build' (or 'make gpu-bundle') on a machine with Go"
else
	row "gpuprobe binary" PASS "$bin"
fi

cap=""
if ! command -v nvidia-smi >/dev/null; then
	row "GPU" FAIL "nvidia-smi not found: no NVIDIA driver on this machine"
elif gpu=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1); then
	gpu=$(head -1 <<<"$gpu")
	cap=$(awk -F', ' '{print $3}' <<<"$gpu" | tr -d '.')
	row "GPU" PASS "$gpu"
else
	row "GPU" FAIL "nvidia-smi: $(head -1 <<<"$gpu")"
fi
arch=${GPU_ARCH:-sm_${cap:-90}}
if command -v ptxas >/dev/null; then
	row "ptxas" PASS "$(ptxas --version | tail -1) -> $arch"
else
	row "ptxas" FAIL "ptxas not on PATH (add /usr/local/cuda/bin)"
fi

# ---- steps ------------------------------------------------------------------

if [[ -x "$bin" ]] && want conformance; then
	if [[ -n "$conf" && -d "$conf/tests" ]]; then
		step "conformance tests, GPU PTX" conformance-gpu.log "$bin" conformance -gpu "$conf/tests"
		step "conformance tests, interp" conformance-interp.log "$bin" conformance "$conf/tests"
		if [[ -d "$conf/negative" ]]; then
			step "conformance negative" conformance-negative.log "$bin" conformance -negative "$conf/negative"
		fi
	else
		row "conformance" FAIL "no conformance data: set CONFORMANCE_DIR (with tests/ and negative/)"
	fi
fi
if [[ -x "$bin" ]] && want ptxas; then

	# Every testdata GPU program: verified, compiled to a test entry, and
	# assembled by this machine's ptxas for this GPU.
	if command -v ptxas >/dev/null; then
		objs=(testdata/bpf/*.o testdata/bpf/compat/*.o)
		if [[ -e "${objs[0]}" ]]; then
			n=0 ok=0
			: >"$out/testdata-ptxas.log"
			for o in "${objs[@]}"; do
				n=$((n + 1))
				ptx=$out/$(basename "$(dirname "$o")")-$(basename "$o" .o).ptx
				if "$bin" compile -entry "$o" >"$ptx" 2>>"$out/testdata-ptxas.log" &&
					ptxas -arch="$arch" -o "$ptx.cubin" "$ptx" >>"$out/testdata-ptxas.log" 2>&1; then
					ok=$((ok + 1))
				else
					echo "FAIL: $o" >>"$out/testdata-ptxas.log"
				fi
			done
			if ((ok == n)); then
				row "testdata PTX -> ptxas $arch" PASS "$ok/$n objects"
			else
				row "testdata PTX -> ptxas $arch" FAIL "$ok/$n objects (log: $out/testdata-ptxas.log)"
			fi
		else
			row "testdata PTX -> ptxas $arch" FAIL "no testdata/bpf/*.o: build them with 'make build'"
		fi
	fi
fi

if ! want sass; then
	:
elif [[ -f scripts/gpu/sass-compare.sh ]]; then
	step "SASS comparison vs nvcc" sass-compare.log env ARCH="$arch" bash scripts/gpu/sass-compare.sh "$bin"
	if [[ -s "$out/sass-compare.log" ]]; then
		echo "---- SASS comparison ----"
		tail -15 "$out/sass-compare.log"
	fi
else
	row "SASS comparison vs nvcc" SKIP "scripts/gpu/sass-compare.sh not written yet"
fi

# tailstep NAME LOG FROM CMD...: step, then the log from the line matching
# FROM (its table) to the end.
tailstep() {
	local name=$1 log=$2 from=$3
	shift 3
	step "$name" "$log" "$@"
	if [[ -s "$out/$log" ]]; then
		echo "---- $name ----"
		sed -n "/$from/,\$p" "$out/$log" | tail -120
	fi
}

want inject && tailstep "inject check (gpucheck)" inject-check.log '^== gpuprobe-gpucheck' \
	env GPU_INJECT_OUT="$out/gpu-inject" bash scripts/gpu/inject-check.sh -nobench -ringmode device
# compat_rows LOG: one table row per "==> compat NAME  PASS|FAIL DETAIL"
# line of gpuprobe-gpucheck -compat's log.
compat_rows() {
	local line re='^==> (compat .*[^ ]) +(PASS|FAIL) ?(.*)$'
	while IFS= read -r line; do
		[[ $line =~ $re ]] && row "  ${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
	done <"$1"
	return 0
}
if want compat; then
	step "compat suite (gpucheck)" compat.log \
		env GPU_INJECT_OUT="$out/gpu-compat" bash scripts/gpu/inject-check.sh -compat
	compat_rows "$out/compat.log"
fi
want samples && tailstep "e2e samples (5 x 4 configs)" samples.log '^---- gpu-samples' \
	env SAMPLES_OUT="$out/gpu-samples" bash scripts/gpu/samples.sh
want bench && tailstep "bench (ratios, load, model, launch)" bench.log '^== bench on' \
	env BENCH_OUT="$out/gpu-bench" PARTS="${BENCH_PARTS:-kernels,model,launch}" bash scripts/gpu/bench.sh
want e2e && tailstep "e2e vectorAdd PTX-only" e2e.log '^check' env E2E_OUT="$out/gpu-e2e" bash scripts/gpu/e2e.sh
want graphnode && step "graph node patched" graphnode.log bash scripts/gpu/graphnode.sh
want graphspans && step "graph replays as spans" graphspans.log bash scripts/gpu/graph-spans.sh
want sampling && step "device sampling 1 in 4" sampling.log bash scripts/gpu/sampling.sh
want hostwait && step "stream idle and host wait" hostwait.log bash scripts/gpu/hostwait.sh
want programs && tailstep "user programs via collector" programs.log '^---- gpu-programs' \
	env PROGRAMS_OUT="$out/gpu-programs" bash scripts/gpu/programs.sh
want examples && tailstep "bpftime's GPU examples" examples.log '^---- gpu-examples' \
	env EXAMPLES_OUT="$out/gpu-examples" bash scripts/gpu/examples.sh
want windows && tailstep "device windows (CUPTI, torch)" windows.log '^windows' \
	env WINDOWS_OUT="$out/gpu-windows" bash scripts/gpu/windows.sh
want sanitizer && tailstep "SASS route (Compute Sanitizer)" sanitizer.log '^sanitizer' \
	env SANITIZER_OUT="$out/gpu-sanitizer" bash scripts/gpu/sanitizer.sh
want frameworkcost && tailstep "launch-bound frameworks' cost" frameworkcost.log '^framework-cost\|^|' \
	env FW_OUT="$out/gpu-framework-cost" bash scripts/gpu/framework-cost.sh
want stacks && tailstep "launch stacks (PyTorch step)" stacks.log '^gpu-stacks' \
	env STACKS_OUT="$out/gpu-stacks" bash scripts/gpu/stacks.sh
want gputime && tailstep "GPU time per process, time-sliced" gputime.log '^gputime' \
	env GT_OUT="$out/gpu-gputime" bash scripts/gpu/gputime.sh
want gpuhash && tailstep "GPU hash map (type 1501)" gpuhash.log '^=== RUN' \
	bin/ptx-gpu.test -test.run 'GPUHashDevice' -test.v
want kinds && tailstep "launch kinds: window or reason" kinds.log '^kinds (' \
	env KINDS_OUT="$out/gpu-kinds" GPU_ARCH="$arch" bash scripts/gpu/kinds.sh
want nodescale && tailstep "a node's load, one collector" nodescale.log '^node-scale' \
	env NS_OUT="$out/gpu-node-scale" bash scripts/gpu/node-scale.sh

want counters && tailstep "PM sampler vs ncu (counters)" counters.log '^counters abi' \
	env COUNTERS_OUT="$out/gpu-counters" GPU_ARCH="$arch" bash scripts/gpu/counters.sh

want startup && tailstep "start-up with patching" startup.log '^startup|run' \
	env STARTUP_OUT="$out/gpu-startup" bash scripts/gpu/startup.sh
want inference && tailstep "inference server's traces" inference.log '^inference' \
	env INFERENCE_OUT="$out/gpu-inference" bash scripts/gpu/inference.sh

# ---- report -----------------------------------------------------------------

if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
	cp -r "$out" "$OUT/" 2>/dev/null || true
fi
echo
echo "---- gpu-test ----"
printf '%-30s %-5s %s\n' "step" "result" "detail"
printf '%s\n' "${rows[@]}"
if ((failed > 0)); then
	echo "gpu-test: $failed step(s) failed"
	exit 1
fi
echo "gpu-test: all steps passed"
