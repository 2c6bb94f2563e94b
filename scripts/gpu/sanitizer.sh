#!/bin/bash
# sanitizer.sh: the SASS route (probes::sass, shim/src/sass.c) on the GPU
# machine: the Sanitizer ABI the shim assumes, kernel_phases' window inside
# SASS-only kernels (cuBLAS GEMMs, a PyTorch elementwise kernel, a Triton
# kernel) under the real collector, what it costs, the fail-open cases and
# the PyTorch steps of torchstep.py. Run from the bundle:
#   SANITIZER_OUT=DIR SANITIZER_PARTS=abi,programs,profiler,work,failopen,step,filter bash scripts/gpu/sanitizer.sh
# The programs part runs user GPU programs (testdata/bpf/sasshist.o and
# memcount.o) through the product route with the CUDA toolkit moved out
# of the way: the shim assembles the collector's patch module with the
# ptxas of the application's own wheels (Triton's). The filter part runs
# the eager step with kernels::include (GEMMs only) and with
# sampling::device_one_in: the shim asks the collector about each kernel.
# Every ratio is against a plain run of the same workload in this run.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${SANITIZER_OUT:-$PWD/build/gpu-sanitizer}
parts=${SANITIZER_PARTS:-abi,programs,profiler,work,failopen,step,filter}
mkdir -p "$out"
status=0
CUDA=${CUDA:-/usr/local/cuda}
san=$(dirname "$(find "$CUDA"/ -name sanitizer.h 2>/dev/null | head -1)")
export PYTHONUNBUFFERED=1
. scripts/gpu/lib_collector.sh

if [[ $parts == *abi* ]]; then
	# The offsets and values shim/src/sass.c hard-codes.
	cat >"$out/abi.c" <<'EOC'
#include <stddef.h>
#include <stdio.h>
#include <sanitizer.h>
#define EQ(a, b) do { if ((long)(a) != (long)(b)) { printf("sanitizer abi: %s = %ld, shim assumes %ld\n", #a, (long)(a), (long)(b)); bad = 1; } } while (0)
int main(void)
{
	int bad = 0;
	EQ(SANITIZER_CB_DOMAIN_LAUNCH, 5);
	EQ(SANITIZER_CB_DOMAIN_RESOURCE, 3);
	EQ(SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, 4);
	EQ(offsetof(Sanitizer_ResourceContextData, context), 0);
	EQ(SANITIZER_CBID_LAUNCH_BEGIN, 1);
	EQ(SANITIZER_INSTRUCTION_BLOCK_ENTER, 1);
	EQ(SANITIZER_INSTRUCTION_BLOCK_EXIT, 2);
	EQ(SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, 3);
	EQ(offsetof(Sanitizer_LaunchData, context), 0);
	EQ(offsetof(Sanitizer_LaunchData, hStream), 16);
	EQ(offsetof(Sanitizer_LaunchData, module), 24);
	EQ(offsetof(Sanitizer_LaunchData, function), 32);
	EQ(offsetof(Sanitizer_LaunchData, functionName), 40);
	EQ(offsetof(Sanitizer_LaunchData, hLaunch), 96);
	printf("sanitizer abi: %s (sizeof Sanitizer_LaunchData %zu)\n", bad ? "FAIL" : "ok", sizeof(Sanitizer_LaunchData));
	return bad;
}
EOC
	gcc -I"$CUDA/include" -I"$san" "$out/abi.c" -o "$out/abi" && "$out/abi" || status=1
fi

# The user programs of the programs and step parts.
progs=$(printf '%s\n' "    buffers:" "      max_threads: 1048576" "    limits:" "      max_map_keys: 1024" "    programs:" \
	"      - path: $PWD/testdata/bpf/sasshist.o" "      - path: $PWD/testdata/bpf/memcount.o")

if [[ $parts == *programs* ]]; then
	n=${SANITIZER_N:-1048576}
	iters=${SANITIZER_ITERS:-20}
	shim=$out/shimdir
	mkdir -p "$shim" "$out/cache"
	# The node's kit: the shim and the Sanitizer library beside it.
	cp bin/libgpuprobe.so "$shim/" && cp "$(find "$CUDA"/ -name libsanitizer-public.so | head -1)" "$shim/"
	for w in add triton; do
		k=vectorized_elementwise_kernel
		[[ $w == triton ]] && k=add_k
		ncu --kernel-name "regex:$k" --launch-count 1 --csv --print-units base \
			--metrics smsp__sass_thread_inst_executed_op_global_ld_pred_on.sum,smsp__sass_thread_inst_executed_op_global_st_pred_on.sum,smsp__sass_inst_executed_op_global_ld.sum,smsp__sass_inst_executed_op_global_st.sum \
			python3 scripts/gpu/sassprog.py $w "$n" 1 >"$out/prog-$w-ncu.csv" 2>"$out/prog-$w-ncu.err"
	done
	# No toolkit from here on: moved away, off PATH and LD_LIBRARY_PATH.
	real=$(readlink -f "$CUDA")
	mv "$real" "$real.hidden" && trap 'mv "$real.hidden" "$real"' EXIT
	nopath=$(tr ':' '\n' <<<"$PATH" | grep -v cuda | paste -sd:)
	nold=$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -v cuda | paste -sd:)
	echo "sanitizer programs: toolkit $real moved away; ptxas on PATH: $(PATH=$nopath command -v ptxas || echo none)"
	for w in add triton; do
		d=$out/prog-$w
		mkdir -p "$d"
		PATH=$nopath LD_LIBRARY_PATH=$nold python3 scripts/gpu/sassprog.py $w "$n" "$iters" >"$d/plain.json" 2>"$d/plain.err"
		SASS=true start_collector "$d" "$progs" metrics || { echo "sanitizer programs: no collector"; status=1; continue; }
		PATH=$nopath LD_LIBRARY_PATH=$nold GPUPROBE_SASS=1 GPUPROBE_CACHE_DIR="$out/cache" GPUPROBE_TRACE="$d/trace.txt" \
			timeout 300 bin/gpuprobe run --socket "$d/agent.sock" --shim "$shim/libgpuprobe.so" -- \
			python3 scripts/gpu/sassprog.py $w "$n" "$iters" >"$d/shim.json" 2>"$d/shim.err"
		sleep 3
		kill -TERM "$col"; wait "$col"
		cmp -s "$d/plain.json" "$d/shim.json" && echo "sanitizer programs $w output identical to plain" ||
			{ echo "sanitizer programs $w: FAIL: output differs (diff $d/plain.json $d/shim.json)"; status=1; }
		grep -h "sass: .*\(assembled\|failed\|cache\|module\|global\)" "$d/trace.txt" | sed 's/^gpuprobe\[[0-9]*\]: //' | sort | uniq -c | head -8
		python3 scripts/gpu/sanitizer_programs.py $w "$d" "$out/prog-$w-ncu.csv" || status=1
		# What the programs cost at the default rate (bursts), against plain.
		PATH=$nopath LD_LIBRARY_PATH=$nold python3 scripts/gpu/sassbench.py $w 50 >"$d/bench-plain.json" 2>/dev/null
		SASS=true start_collector "$d" "$progs
    sampling: {}" traces || continue
		PATH=$nopath LD_LIBRARY_PATH=$nold GPUPROBE_SASS=1 GPUPROBE_CACHE_DIR="$out/cache" timeout 300 bin/gpuprobe run \
			--socket "$d/agent.sock" --shim "$shim/libgpuprobe.so" -- python3 scripts/gpu/sassbench.py $w 50 >"$d/bench-rate.json" 2>/dev/null
		kill -TERM "$col"; wait "$col"
		python3 -c 'import json,sys; p,r=(json.load(open(f)) for f in sys.argv[1:3]); print("sanitizer programs %s cost at the default rate: %.1f us vs plain %.1f (%.3fx), output %s" % (sys.argv[3], r["median_us"], p["median_us"], r["median_us"]/p["median_us"], "identical" if r["sha"]==p["sha"] else "DIFFERS"))' \
			"$d/bench-plain.json" "$d/bench-rate.json" $w || status=1
	done
	# A device the built-in image has no cubin for (Blackwell; here an
	# image that cannot be bound): kernel_phases' module from the collector,
	# assembled for the device by the wheels' ptxas.
	d=$out/prog-refused
	mkdir -p "$d"
	echo "no cubin for this device" >"$d/image"
	SASS=true start_collector "$d" "    metrics_interval: 1s" traces || status=1
	PATH=$nopath LD_LIBRARY_PATH=$nold GPUPROBE_SASS=1 GPUPROBE_SASS_IMAGE="$d/image" GPUPROBE_CACHE_DIR="$d/cache" \
		GPUPROBE_TRACE="$d/trace.txt" timeout 300 bin/gpuprobe run --socket "$d/agent.sock" --shim "$shim/libgpuprobe.so" -- \
		python3 scripts/gpu/sassprog.py add "$n" "$iters" >"$d/shim.json" 2>"$d/shim.err"
	sleep 2
	kill -TERM "$col"; wait "$col"
	python3 - "$d" "$out/prog-add/plain.json" "$iters" <<'PY' || status=1
import json, sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
d, plain, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
spans, _ = load(d + "/traces.json")
adds = [at for s, at in launch_spans(spans) if "vectorized_elementwise" in at.get("cuda.kernel.name", {}).get("stringValue", s["name"])]
sass = [at for at in adds if at.get("cuda.launch.window", {}).get("stringValue") == "patched_sass"]
said = "asking the collector for kernel_phases' module" in open(d + "/trace.txt").read()
same = json.load(open(d + "/shim.json"))["sha"] == json.load(open(plain))["sha"]
ok = len(sass) >= iters and said and same
print("sanitizer programs built-in image refused: %s: %d of %d add launches patched_sass by the collector's kernel_phases module; output %s"
      % ("ok" if ok else "FAIL", len(sass), len(adds), "identical" if same else "DIFFERS"))
sys.exit(0 if ok else 1)
PY
	mv "$real.hidden" "$real" && trap - EXIT
fi

if [[ $parts == *profiler* ]]; then
	# torch.profiler in a process on the route: the route steps aside.
	d=$out/prof
	mkdir -p "$d"
	python3 scripts/gpu/sassprof.py >"$d/plain.json" 2>"$d/plain.err"
	SASS=true start_collector "$d" "    metrics_interval: 1s" traces || exit 1
	GPUPROBE_SASS=1 GPUPROBE_TRACE="$d/trace.txt" timeout 300 bin/gpuprobe run --socket "$d/agent.sock" \
		--shim bin/libgpuprobe.so -- python3 scripts/gpu/sassprof.py >"$d/shim.json" 2>"$d/shim.err"
	sleep 2
	kill -TERM "$col"; wait "$col"
	grep -h "sass: \(stepped\|back\)" "$d/trace.txt" | sed 's/^gpuprobe\[[0-9]*\]: //'
	python3 - "$d" <<'PY' || status=1
import json, sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
d = sys.argv[1]
p, r = json.load(open(d + "/plain.json")), json.load(open(d + "/shim.json"))
spans, _ = load(d + "/traces.json")
adds = [at for s, at in launch_spans(spans) if "vectorized_elementwise" in at.get("cuda.kernel.name", {}).get("stringValue", s["name"])]
patched = [at.get("cuda.launch.window", {}).get("stringValue") == "patched_sass" for at in adds]
# Either the profiler got CUPTI and the route stepped aside for it (the 30
# launches under it unpatched, the 60 around them patched), or, as seen on
# an H100, CUPTI refused its subscriber (error 39: the
# Sanitizer API holds the driver's one callback subscriber for the process's
# life), the route ran on, and the shim's trace says why.
said = "holds the driver's one callback subscriber" in open(d + "/trace.txt").read()
stepped = (r["profiler_kernels"] == 30 and all(patched[:30]) and not any(patched[30:60]) and all(patched[60:]))
refused = r["profiler_kernels"] == 0 and all(patched) and said
ok = p["profiler_kernels"] == 30 and r["sha"] == p["sha"] and len(adds) == 90 and (stepped or refused)
print("sanitizer profiler: %s (%s): the profiler saw %d kernels (plain %d); %d add launches, patched: %d before, %d during, %d after; output %s"
      % ("ok" if ok else "FAIL", "stepped aside" if stepped else "CUPTI refused the profiler, the trace says why" if refused else "neither",
         r["profiler_kernels"], p["profiler_kernels"], len(adds), sum(patched[:30]),
         sum(patched[30:60]), sum(patched[60:]), "identical" if r["sha"] == p["sha"] else "DIFFERS"))
sys.exit(0 if ok else 1)
PY
fi

# run_work NAME WORK ENV...: one sassbench run under gpuprobe run (env set).
run_work() {
	local name=$1 w=$2
	shift 2
	env "$@" GPUPROBE_TRACE="$out/$w-$name-trace.txt" timeout 300 bin/gpuprobe run --socket "$out/agent.sock" \
		--shim bin/libgpuprobe.so -- python3 scripts/gpu/sassbench.py "$w" 50 >"$out/$w-$name.json" 2>"$out/$w-$name.err"
}

if [[ $parts == *work* ]]; then
	for w in ${SANITIZER_WORK:-mm32 bf16 add triton}; do
		python3 scripts/gpu/sassbench.py "$w" 50 >"$out/$w-plain.json" 2>"$out/$w-plain.err"
		# Every launch sampled: the route's output checked exactly.
		SASS=true start_collector "$out" "    metrics_interval: 1s" metrics || { echo "sanitizer: no collector"; exit 1; }
		run_work all "$w" GPUPROBE_SASS=1
		sleep 3
		kill -TERM "$col"; wait "$col"
		cp "$out/traces.json" "$out/$w-traces.json"; cp "$out/metrics.json" "$out/$w-metrics.json"
		# The default rate (100 sampled launches a second per module).
		SASS=true start_collector "$out" "    sampling: {}" traces || exit 1
		run_work rate "$w" GPUPROBE_SASS=1
		kill -TERM "$col"; wait "$col"
		# The route off (the default configuration).
		start_collector "$out" "    sampling: {}" traces || exit 1
		run_work off "$w"
		sleep 2
		kill -TERM "$col"; wait "$col"
		cp "$out/traces.json" "$out/$w-off-traces.json"
		python3 scripts/gpu/sanitizer_check.py "$w" "$out" || status=1
		grep -h "sass:" "$out/$w-all-trace.txt" | sed 's/^gpuprobe\[[0-9]*\]: //' | sort | uniq -c | sort -rn | head -4
	done
fi

if [[ $parts == *failopen* ]]; then
	# No collector, a library that cannot load, the collector killed mid-run.
	w=add
	python3 scripts/gpu/sassbench.py $w 50 >"$out/fo-plain.json"
	GPUPROBE_SASS=1 timeout 120 bin/gpuprobe run --socket "$out/none.sock" --shim bin/libgpuprobe.so -- \
		python3 scripts/gpu/sassbench.py $w 50 >"$out/fo-nocollector.json" 2>"$out/fo-nocollector.err"
	SASS=true start_collector "$out" "    sampling: {}" traces || exit 1
	GPUPROBE_SASS=1 GPUPROBE_SANITIZER=/nonexistent/libsanitizer-public.so timeout 120 bin/gpuprobe run --socket "$out/agent.sock" \
		--shim bin/libgpuprobe.so -- python3 scripts/gpu/sassbench.py $w 50 >"$out/fo-nolib.json" 2>"$out/fo-nolib.err"
	(sleep 6; kill -KILL "$col") &
	GPUPROBE_SASS=1 timeout 120 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- \
		python3 scripts/gpu/sassbench.py $w 400 >"$out/fo-killed.json" 2>"$out/fo-killed.err"
	wait
	python3 - "$out" <<'PY' || status=1
import json, sys
d = sys.argv[1]
p = json.load(open(d + "/fo-plain.json"))
bad = 0
for k in ("nocollector", "nolib", "killed"):
    try:
        r = json.load(open("%s/fo-%s.json" % (d, k)))
    except Exception as e:
        print("sanitizer failopen %s: FAIL: %s" % (k, e)); bad = 1; continue
    same = r["sha"] == p["sha"]
    print("sanitizer failopen %-11s %.1f us vs plain %.1f (%.3fx); output %s" % (k, r["median_us"], p["median_us"], r["median_us"] / p["median_us"], "identical" if same else "DIFFERS"))
    bad |= not same
sys.exit(bad)
PY
fi

if [[ $parts == *step* ]]; then
	for m in ${SANITIZER_STEPS:-eager cublas}; do
		python3 scripts/gpu/torchstep.py $m >"$out/step-$m-plain.json" 2>"$out/step-$m-plain.err"
		# sass: opted in and asked for; released: opted in, the collector
		# does not ask; off: the default (CUPTI's windows).
		for cfg in sass programs released off; do
			if [[ $cfg == sass ]]; then SASS=true start_collector "$out" "    sampling: {}" traces || exit 1
			elif [[ $cfg == programs ]]; then SASS=true start_collector "$out" "$progs
    sampling: {}" traces || exit 1
			else start_collector "$out" "    sampling: {}" traces || exit 1; fi
			optin=GPUPROBE_SASS=0
			[[ $cfg != off ]] && optin=GPUPROBE_SASS=1
			env $optin GPUPROBE_TRACE="$out/step-$m-$cfg-trace.txt" timeout 400 bin/gpuprobe run --socket "$out/agent.sock" \
				--shim bin/libgpuprobe.so -- python3 scripts/gpu/torchstep.py $m >"$out/step-$m-$cfg.json" 2>"$out/step-$m-$cfg.err"
			sleep 2
			kill -TERM "$col"; wait "$col"
			cp "$out/traces.json" "$out/step-$m-$cfg-traces.json"
		done
		python3 - "$out" "$m" <<'PY' || status=1
import json, sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
d, m = sys.argv[1], sys.argv[2]
p = json.load(open("%s/step-%s-plain.json" % (d, m)))
bad = 0
for cfg in ("off", "released", "sass", "programs"):
    r = json.load(open("%s/step-%s-%s.json" % (d, m, cfg)))
    spans, _ = load("%s/step-%s-%s-traces.json" % (d, m, cfg))
    ls = launch_spans(spans)
    routes = {}
    for s, at in ls:
        k = at.get("cuda.launch.window", {}).get("stringValue", "none")
        routes[k] = routes.get(k, 0) + 1
    same = abs(float(r["checksum"]) - float(p["checksum"])) <= 1e-6 * max(abs(float(p["checksum"])), 1)
    print("sanitizer step %s %-8s %.3f ms vs plain %.3f (%.3fx); checksum %s; %d launch spans, routes %s"
          % (m, cfg, r["step_ms"], p["step_ms"], r["step_ms"] / p["step_ms"], "same" if same else "DIFFERS", len(ls), routes))
    bad |= not same
    # released: the Sanitizer API is given back, but CUPTI still cannot
    # subscribe in that process (shim/src/sass.c): no windows, no SASS spans.
    if cfg == "released" and routes.get("patched_sass", 0):
        print("sanitizer step %s released: FAIL: SASS spans after the release" % m)
        bad = 1
sys.exit(bad)
PY
		grep -h "sass:" "$out/step-$m-sass-trace.txt" | sed 's/^gpuprobe\[[0-9]*\]: //' | sort | uniq -c | sort -rn | head -3
	done
fi
if [[ $parts == *filter* ]]; then
	m=eager
	pat='gemm|xmma|nvjet|cutlass'
	python3 scripts/gpu/torchstep.py $m >"$out/filter-plain.json" 2>"$out/filter-plain.err"
	for cfg in sass include onein; do
		case $cfg in
		sass) extra="    sampling: {}" ;;
		include) extra=$(printf '    kernels:\n      include: ["%s"]\n    sampling: {}' "$pat") ;;
		onein) extra=$(printf '    sampling:\n      device_one_in: 4') ;;
		esac
		SASS=true start_collector "$out" "$extra" traces || exit 1
		GPUPROBE_SASS=1 GPUPROBE_TRACE="$out/filter-$cfg-trace.txt" timeout 400 bin/gpuprobe run --socket "$out/agent.sock" \
			--shim bin/libgpuprobe.so -- python3 scripts/gpu/torchstep.py $m >"$out/filter-$cfg.json" 2>"$out/filter-$cfg.err"
		sleep 2
		kill -TERM "$col"; wait "$col"
		cp "$out/traces.json" "$out/filter-$cfg-traces.json"
	done
	python3 scripts/gpu/sanitizer_filter.py "$out" "$pat" || status=1
fi
exit $status
