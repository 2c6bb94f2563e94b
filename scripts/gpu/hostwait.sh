#!/usr/bin/env bash
# hostwait.sh: the stream-gap attributes (cuda.launch.stream_idle,
# cuda.launch.host_wait) end to end on the GPU machine, from prebuilt
# bin/otelcol-gpuprobe, bin/gpuprobe and bin/libgpuprobe.so.
# It builds testdata/cuda/shim/vectoradd.cu with PTX (patchable), starts the
# collector with kernel_phases, runs `vectoradd gap ITERS` plainly and under
# `gpuprobe run`: each iteration launches spinA and spinB (about 0.5 ms each
# on one stream) back to back and sleeps 3 ms. From the file exporter's
# traces it checks that:
#   - the output is identical to the plain run, with one launch span per
#     launch;
#   - every spinB launch but the first (queued while spinA ran; the first
#     may load the kernel) has host_wait 0: the stream never waited for
#     the host;
#   - every spinA launch but the first has a host_wait of at least 1 ms
#     (the host slept 3 ms while the stream ran spinB's half millisecond),
#     no more than its stream_idle, and stream_idle - host_wait (the
#     device's start after the launch call returned) under 200 us;
#   - the first spinA has neither attribute (nothing ran before it).
# Exits 1 on a failed check. Environment: NVCC, ITERS (default 20),
# HOSTWAIT_OUT (default build/gpu-hostwait).
set -uo pipefail
export GPUPROBE_PATCH=1
cd "$(dirname "$0")/../.."
out=${HOSTWAIT_OUT:-$PWD/build/gpu-hostwait}
iters=${ITERS:-20}
mkdir -p "$out"
"${NVCC:-nvcc}" -O3 -cudart shared -gencode arch=compute_90,code=compute_90 -o "$out/vectoradd" testdata/cuda/shim/vectoradd.cu >"$out/nvcc.txt" 2>&1 ||
	{ echo "gpu-hostwait: nvcc failed: $(tail -3 "$out/nvcc.txt")"; exit 1; }
. scripts/gpu/lib_collector.sh
start_traces_collector "$out" || { echo "gpu-hostwait: collector did not start (see $out/collector.log)"; exit 1; }
status=0
run_with_shim "$out" gpu-hostwait "$out/vectoradd" gap "$iters" || status=1
python3 - "$out/traces.json" "$iters" <<'PY' || status=1
import sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
path, iters = sys.argv[1], int(sys.argv[2])
spans, _ = load(path)
launches = sorted(((int(s["startTimeUnixNano"]), s["name"], at) for s, at in launch_spans(spans) if s["name"] in ("spinA", "spinB")),
                  key=lambda x: x[0])
num = lambda at, k: int(at[k]["intValue"]) if k in at else None
fails = []
a = [(num(at, "cuda.launch.stream_idle"), num(at, "cuda.launch.host_wait")) for _, n, at in launches if n == "spinA"]
b = [(num(at, "cuda.launch.stream_idle"), num(at, "cuda.launch.host_wait")) for _, n, at in launches if n == "spinB"]
if len(a) != iters or len(b) != iters:
    fails.append("%d spinA and %d spinB launch spans, want %d each" % (len(a), len(b), iters))
else:
    if a[0] != (None, None):
        fails.append("first spinA has stream_idle/host_wait %s (nothing ran before it)" % (a[0],))
    for i, (idle, wait) in enumerate(a[1:], 1):
        if idle is None or wait < 1_000_000 or wait > idle or idle - wait > 200_000:
            fails.append("spinA %d: stream_idle %s host_wait %s" % (i, idle, wait))
    for i, (idle, wait) in enumerate(b[1:], 1):
        if idle is None or wait != 0:
            fails.append("spinB %d: stream_idle %s host_wait %s" % (i, idle, wait))
med = lambda v: sorted(v)[len(v) // 2] if v else None
print("gpu-hostwait: %d iterations: spinA host_wait median %s ns (stream_idle %s), spinB host_wait median %s ns (stream_idle %s): %s"
      % (iters, med([w for _, w in a[1:] if w is not None]), med([i for i, _ in a[1:] if i is not None]),
         med([w for _, w in b[1:] if w is not None]), med([i for i, _ in b[1:] if i is not None]),
         "1 passed, 0 failed" if not fails else "0 passed, 1 failed"))
for f in fails[:10]:
    print("  FAIL " + f)
sys.exit(0 if not fails else 1)
PY
exit $status
