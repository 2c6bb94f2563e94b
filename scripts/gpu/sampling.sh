#!/usr/bin/env bash
# sampling.sh: sampling::device_one_in end to end on the GPU machine,
# from prebuilt bin/otelcol-gpuprobe, bin/gpuprobe and bin/libgpuprobe.so.
# It builds testdata/cuda/shim/vectoradd.cu with PTX (patchable), starts the
# collector with kernel_phases and sampling::device_one_in: N (default 4),
# runs the app plainly and under `gpuprobe run` (ITERS iterations of two
# kernels, synchronised), and checks from the file exporter's traces that:
#   - the output is identical to the plain run;
#   - there is one launch span per launch (2 x ITERS);
#   - the launches with device phases are exactly those whose launch id the
#     shim's sampling keeps (gp_sample_keep in shim/src/wrap_launch.c: the
#     high half of the id's splitmix64 mix is a multiple of N; the others
#     got launch id 0), and each of the two kernels has some;
#   - the others carry cuda.launch.probed = false.
# Then it runs `vectoradd gap` (spinA and spinB every 3.5 ms or so) with
# sampling::device_max_per_second: RATE (default 100) instead and checks
# that each kernel's probed launches are at least 1/RATE apart, that every
# launch left unprobed came less than 1/RATE after its kernel's last probed
# one (else it should have been probed), and that each kernel has more
# than one probed launch; an unprobed launch with cuda.launch.host_wait
# must follow a probed one and have no stream_idle, 0 for spinB (queued
# behind spinA) and at least 1 ms for spinA (launched after the sleep).
# Exits 1 on a failed check. Environment: NVCC, N, ITERS (default 40),
# RATE (default 100), SAMPLING_OUT (default build/gpu-sampling).
set -uo pipefail
export GPUPROBE_PATCH=1
cd "$(dirname "$0")/../.."
out=${SAMPLING_OUT:-$PWD/build/gpu-sampling}
n=${N:-4}
iters=${ITERS:-40}
mkdir -p "$out"
"${NVCC:-nvcc}" -O3 -cudart shared -gencode arch=compute_90,code=compute_90 -o "$out/vectoradd" testdata/cuda/shim/vectoradd.cu >"$out/nvcc.txt" 2>&1 ||
	{ echo "gpu-sampling: nvcc failed: $(tail -3 "$out/nvcc.txt")"; exit 1; }
. scripts/gpu/lib_collector.sh
# The checks tell probed launches from the others by their device phases:
# with CUPTI's windows on (the default) every launch has one, so they are
# off here; the device_one_in part also lifts the default rate cap
# (device_max_per_second: 100 a kernel), which would keep all but the
# first launch of each kernel in the synchronised loop unprobed.
windows_off=$'    windows:\n      enabled: false'
start_traces_collector "$out" "$(printf '%s\n    sampling:\n      device_one_in: %d\n      device_max_per_second: 0\n%s' "$windows_off" "$n" "$(notrace_bounds)")" ||
	{ echo "gpu-sampling: collector did not start (see $out/collector.log)"; exit 1; }
status=0
run_with_shim "$out" gpu-sampling "$out/vectoradd" sync "$iters" || status=1
python3 - "$out/traces.json" "$n" "$((2 * iters))" <<'PY' || status=1
import sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
path, n, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spans, children = load(path)
launches = launch_spans(spans)
M = (1 << 64) - 1
def keep(i):  # the shim's gp_sample_keep
    i ^= i >> 30; i = (i * 0xbf58476d1ce4e5b9) & M
    i ^= i >> 27; i = (i * 0x94d049bb133111eb) & M
    i ^= i >> 31
    return (i >> 32) % n == 0
lid = lambda at: int(at["cuda.launch.id"]["intValue"])
phased = {lid(at) for s, at in launches if "cuda.executing" in children.get(s["spanId"], [])}
unprobed = {lid(at) for s, at in launches if at.get("cuda.launch.probed", {}).get("boolValue") is False}
ids = {lid(at) for s, at in launches}
kernels = {s["name"] for s, at in launches if lid(at) in phased}
ok = len(launches) == want and phased == {i for i in ids if keep(i)} and unprobed == ids - phased and len(kernels) == 2
print("gpu-sampling: device_one_in %d: %d launch spans (want %d), %d with device phases (the ids the shim keeps: %s; kernels %s), %d marked unprobed: %s"
      % (n, len(launches), want, len(phased), phased == {i for i in ids if keep(i)}, sorted(kernels), len(unprobed),
         "1 passed, 0 failed" if ok else "0 passed, 1 failed"))
sys.exit(0 if ok else 1)
PY

# device_max_per_second: RATE.
rate=${RATE:-100}
rout=$out/rate
mkdir -p "$rout"
start_traces_collector "$rout" "$(printf '%s\n    sampling:\n      device_max_per_second: %d\n%s' "$windows_off" "$rate" "$(notrace_bounds)")" ||
	{ echo "gpu-sampling: collector did not start (see $rout/collector.log)"; exit 1; }
run_with_shim "$rout" "gpu-sampling (rate)" "$out/vectoradd" gap "$iters" || status=1
python3 - "$rout/traces.json" "$rate" "$((2 * iters))" <<'PY' || status=1
import sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
path, rate, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spans, children = load(path)
launches = [(int(s["startTimeUnixNano"]), s["name"], "cuda.executing" in children.get(s["spanId"], []),
             at.get("cuda.launch.probed", {}).get("boolValue") is False, at)
            for s, at in launch_spans(spans)]
launches.sort(key=lambda x: x[0])
gap, tol = 1_000_000_000 // rate, 200_000  # the shim decides just before the enqueue stamp
fails, probed = [], {}
last = {}
# An unprobed launch right after a probed one may carry host_wait alone
# (when its predecessor finished first): 0 for spinB (queued behind
# spinA), at least 1 ms for spinA (launched after the host's sleep).
waits = 0
for i, (t, k, phased, unprobed, at) in enumerate(launches):
    if unprobed and "cuda.launch.host_wait" in at:
        w = int(at["cuda.launch.host_wait"]["intValue"])
        waits += 1
        if "cuda.launch.stream_idle" in at or i == 0 or not launches[i - 1][2] or (k == "spinB") != (w == 0) or (k == "spinA" and w < 1_000_000):
            fails.append("%s at %d (unprobed): host_wait %d, stream_idle %s, after a probed launch %s" %
                         (k, t, w, "cuda.launch.stream_idle" in at, i > 0 and launches[i - 1][2]))
for t, k, phased, unprobed, _ in launches:
    if phased == unprobed:
        fails.append("%s at %d: device phases %s, marked unprobed %s" % (k, t, phased, unprobed))
    if phased:
        if k in last and t - last[k] < gap - tol:
            fails.append("%s probed %d ns after its last probed launch (< 1/%d s)" % (k, t - last[k], rate))
        last[k] = t
        probed[k] = probed.get(k, 0) + 1
    elif k not in last or t - last[k] > gap + tol:
        fails.append("%s left unprobed %s ns after its last probed launch (>= 1/%d s)" % (k, t - last[k] if k in last else "inf", rate))
ok = len(launches) == want and not fails and len(probed) == 2 and min(probed.values()) > 1
print("gpu-sampling: device_max_per_second %d: %d launch spans (want %d), probed per kernel %s, %d unprobed with host_wait: %s"
      % (rate, len(launches), want, probed, waits, "1 passed, 0 failed" if ok else "0 passed, 1 failed"))
for f in fails[:10]:
    print("  FAIL " + f)
sys.exit(0 if ok else 1)
PY
exit $status
