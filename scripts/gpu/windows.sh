#!/usr/bin/env bash
# windows.sh: device windows of every kernel on the GPU machine,
# from prebuilt bin/ (gpuprobe, libgpuprobe.so, otelcol-gpuprobe); needs
# nvcc and, for the torch part, python3 with torch.
#   abi    the CUPTI layout the shim reads (shim/src/cupti.c) against this
#          toolkit's cupti.h: kernel record offsets, callback data, ids
#   loop   an empty-kernel launch loop through shared cudart (200,000
#          launches, ROUNDS interleaved rounds): plain, under the shim with
#          the collector's default configuration (windows: CUPTI detached
#          by the rate cap after two epochs), with GPUPROBE_WINDOWS=0, and
#          windows without their rate cap (GPUPROBE_WINDOWS_BUDGET_PPM=0)
#   torch  scripts/gpu/torchstep.py eager, compile and cublas: plain and
#          under `gpuprobe run` with the default configuration; step times,
#          outputs, torch.profiler's kernel names and counts (equal to
#          plain's), the collector's spans (>= 99% of launch spans with
#          their exact window, names whole and demangled), and what the
#          shim's trace says of windows
# Environment: WINDOWS_OUT (default build/gpu-windows), ROUNDS (5), WINDOWS_PARTS,
# TORCH_MODES (eager compile cublas), TORCH_REPEAT (1: rounds of the torch part).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${WINDOWS_OUT:-$root/build/gpu-windows}
parts=${WINDOWS_PARTS:-abi,loop,torch}
rounds=${ROUNDS:-5}
mkdir -p "$out"
status=0
CUDA=${CUDA:-/usr/local/cuda}
inc=$(dirname "$(find "$CUDA"/ -name cupti_activity.h 2>/dev/null | head -1)")

if [[ $parts == *abi* ]]; then
	cat >"$out/abi.c" <<'EOC'
#include <stddef.h>
#include <stdio.h>
#include <cupti.h>
#define EQ(a, b) do { if ((long)(a) != (long)(b)) { printf("windows abi: %s = %ld, the shim reads %ld\n", #a, (long)(a), (long)(b)); bad = 1; } } while (0)
int main(void)
{
	int bad = 0;
	EQ(offsetof(CUpti_ActivityKernel9, kind), 0);
	EQ(offsetof(CUpti_ActivityKernel9, start), 16);
	EQ(offsetof(CUpti_ActivityKernel9, end), 24);
	EQ(offsetof(CUpti_ActivityKernel9, deviceId), 40);
	EQ(offsetof(CUpti_ActivityKernel9, correlationId), 92);
	EQ(offsetof(CUpti_ActivityKernel9, name), 104);
	EQ(offsetof(CUpti_ActivityKernel9, graphNodeId), 144);
	EQ(offsetof(CUpti_CallbackData, callbackSite), 0);
	EQ(offsetof(CUpti_CallbackData, correlationId), 64);
	EQ(CUPTI_ACTIVITY_KIND_KERNEL, 3);
	EQ(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 10);
	EQ(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, 51);
	EQ(offsetof(CUpti_ActivityGraphTrace2, correlationId), 4);
	EQ(offsetof(CUpti_ActivityGraphTrace2, start), 8);
	EQ(offsetof(CUpti_ActivityGraphTrace2, end), 16);
	EQ(offsetof(CUpti_ActivityGraphTrace2, deviceId), 24);
	EQ(CUPTI_CB_DOMAIN_DRIVER_API, 1);
	EQ(CUPTI_API_ENTER, 0);
	EQ(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 1);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 307);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, 442);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 652);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, 653);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, 477);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, 478);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 514);
	EQ(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, 515);
	printf("windows abi: %s (CUPTI_API_VERSION %d)\n", bad ? "FAIL" : "ok", CUPTI_API_VERSION);
	return bad;
}
EOC
	gcc -I"$CUDA/include" -I"$inc" "$out/abi.c" -o "$out/abi" && "$out/abi" || status=1
fi

. scripts/gpu/lib_collector.sh
if [[ $parts == *loop* ]]; then
	nvcc -O2 -cudart shared -arch=sm_90 -DKT=CUpti_ActivityKernel9 -I"$inc" scripts/gpu/cupti_cost.cu -o "$out/loop" \
		-L"$(dirname "$(find "$CUDA"/ -name 'libcupti.so' | head -1)")" -lcupti >"$out/nvcc.txt" 2>&1 || { echo "windows loop: nvcc failed"; status=1; }
	# The default configuration (`sampling: {}` keeps lib_collector's
	# every-launch override out).
	# Host probes off: with them on (testdata/config.yaml) the plain run,
	# a process without the shim, is probed per process and is no longer
	# plain; shim processes are not trapped either way
	# (host_probes::shim_processes skip, gpuprobe/hostprobe's
	# BenchmarkShimProcesses).
	start_collector "$out" "    sampling: {}" traces || { echo "windows loop: no collector"; exit 1; }
	for r in $(seq "$rounds"); do
		"$out/loop" plain 200000 | sed 's/^/plain /'
		GPUPROBE_TRACE="$out/loop-trace.txt" bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- "$out/loop" plain 200000 | sed 's/^/windows /'
		GPUPROBE_WINDOWS=0 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- "$out/loop" plain 200000 | sed 's/^/nowindows /'
		GPUPROBE_WINDOWS_BUDGET_PPM=0 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- "$out/loop" plain 200000 | sed 's/^/uncapped /'
	done | tee "$out/loop.txt"
	kill -TERM "$col"; wait "$col"
	python3 - "$out/loop.txt" <<'PY'
import sys, statistics, re
v = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) mode=\S+\s+ns/launch=(\d+)", line)
    if m: v.setdefault(m.group(1), []).append(int(m.group(2)))
p = statistics.median(v["plain"])
for k in ("plain", "windows", "nowindows", "uncapped"):
    print("windows loop: %-9s median %5d ns/launch (%s) %.3fx plain" % (k, statistics.median(v[k]), v[k], statistics.median(v[k]) / p))
PY
	grep "device windows" "$out/loop-trace.txt" | sort | uniq -c | head
fi

if [[ $parts == *torch* ]]; then
	export PYTHONUNBUFFERED=1
	for rep in $(seq "${TORCH_REPEAT:-1}"); do
	for m in ${TORCH_MODES:-eager compile cublas}; do
		python3 scripts/gpu/torchstep.py $m --kernels >"$out/$m-plain.json" 2>"$out/$m-plain.err"
		start_collector "$out" "$(printf '    sampling: {}\n    metrics_interval: 1s')" metrics || { echo "windows torch: no collector"; exit 1; }
		rm -f "$out/$m-trace.txt"
		GPUPROBE_TRACE="$out/$m-trace.txt" timeout 400 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- \
			python3 scripts/gpu/torchstep.py $m --kernels >"$out/$m-shim.json" 2>"$out/$m-shim.err"
		sleep 3 # windows::wait and a metrics interval
		kill -TERM "$col"; wait "$col"
		cp "$out/traces.json" "$out/$m-traces.json"; cp "$out/metrics.json" "$out/$m-metrics.json"
		cp "$out/collector.log" "$out/$m-collector.log"
		python3 - "$out/metrics.json" "$m" <<'PY'
import sys
sys.path.insert(0, "scripts/gpu")
from lib_metrics import load
last = {}
for p in load(sys.argv[1]):
    if p["name"].startswith("gpuprobe.receiver.windows.") and p["kind"] == "sum":
        last[(p["name"], tuple(sorted(p["attrs"].items())))] = p["value"]
print("windows torch %s counters: %s" % (sys.argv[2], ", ".join("%s%s=%s" % (n[len("gpuprobe.receiver.windows."):], dict(a) if a else "", v) for (n, a), v in sorted(last.items()))))
PY
		python3 - "$out/$m-plain.json" "$out/$m-shim.json" "$m" <<'PY' || status=1
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ka, kb = a["kernels"], b["kernels"]
diff = sorted(k for k in set(ka) | set(kb) if ka.get(k) != kb.get(k))
print("windows torch %s: step %.3f ms plain, %.3f under gpuprobe (%.3fx); checksum %s / %s; %d kernels (%d launches) plain, %d (%d) under gpuprobe; %d differ"
      % (sys.argv[3], a["step_ms"], b["step_ms"], b["step_ms"] / a["step_ms"], a["checksum"], b["checksum"], len(ka), sum(ka.values()), len(kb), sum(kb.values()), len(diff)))
for k in diff[:10]:
    print("   %5s %5s %s" % (ka.get(k), kb.get(k), k[:140]))
# The training steps' sums differ in the last digits from run to run of
# plain itself (atomics in the backward pass): equal within 1e-6.
ca, cb = float(a["checksum"]), float(b["checksum"])
same = ca == cb if sys.argv[3] == "cublas" else abs(ca - cb) <= 1e-6 * max(abs(ca), 1)
sys.exit(1 if diff or not same or len(kb) == 0 else 0)
PY
		python3 - "$out/traces.json" "$out/$m-shim.json" "$m" <<'PY' || status=1
# The spans of the shimmed run: every launch span of the process has its
# exact window (cuda.executing child, cuda.launch.window) - at least 99%
# of launches and of GPU time - and a whole, demangled name.
import json, sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
spans, children = load(sys.argv[1])
prof = json.load(open(sys.argv[2])).get("profile_start_unix_ns", 1 << 63)
# torch.profiler's step ran with the shim stepped aside: counted apart.
allls = launch_spans(spans)
ls = [(s, at) for s, at in allls if int(s["startTimeUnixNano"]) < prof]
during = [(s, at) for s, at in allls if int(s["startTimeUnixNano"]) >= prof]
ids = {s["spanId"]: s for s, _ in spans}
exe = {}
for s, at in spans:
    if s["name"] == "cuda.executing":
        exe[s.get("parentSpanId")] = int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
n = len(ls)
win = [(s, at) for s, at in ls if s["spanId"] in exe]
route = {}
for s, at in ls:
    r = at.get("cuda.launch.window", {}).get("stringValue", "none")
    route[r] = route.get(r, 0) + 1
gpu_all = sum(exe.values())
cut = [at["cuda.kernel.name"]["stringValue"] for s, at in ls if "cuda.kernel.name" in at and
       ("\u2026" in at["cuda.kernel.name"]["stringValue"] or at["cuda.kernel.name"]["stringValue"].startswith("_Z"))]
names = sorted({s["name"] for s, _ in ls})
share = len(win) / n if n else 0
print("windows torch %s spans: %d launch spans, %d (%.2f%%) with cuda.executing; routes %s; GPU time in windows %.3f ms; %d names cut or mangled of %d kernels; %d launches while torch.profiler ran, %d of them with a driver window"
      % (sys.argv[3], n, len(win), 100 * share, route, gpu_all / 1e6, len(cut), len(names), len(during),
         sum(1 for s, at in during if at.get("cuda.launch.window", {}).get("stringValue") == "windows")))
for c in sorted(set(cut))[:5]:
    print("   cut/mangled: %s" % c[:160])
sys.exit(0 if n > 0 and share >= 0.99 and not cut else 1)
PY
		grep -h "device windows\|not patched\|loaded the patched" "$out/$m-trace.txt" | sed 's/^gpuprobe\[[0-9]*\]: //' | sort | uniq -c | sort -rn | head -8
		tail -3 "$out/$m-shim.err"
	done
	done
fi
exit $status
