#!/bin/bash
# loop.sh: what the SASS route costs a launch-bound loop of empty kernels
# (scripts/experiments/cupti_cost.cu, plain mode) on the host: plain, under
# gpuprobe run (CUPTI's windows), and opted in to the SASS route
# (GPUPROBE_SASS=1, probes::sass on, default sampling: bursts of 10 launches
# ten times a second). Rounds alternate; medians printed. From the bundle root.
set -u
cd "$(dirname "$0")/../../.."
out=/tmp/sassloop; mkdir -p $out
. scripts/gpu/lib_collector.sh
CUDA=${CUDA:-/usr/local/cuda}
inc=$(dirname "$(find "$CUDA"/ -name cupti_activity.h 2>/dev/null | head -1)")
nvcc -O2 -cudart shared -arch=sm_90 -DKT=CUpti_ActivityKernel9 -I"$inc" scripts/experiments/cupti_cost.cu -o $out/loop \
	-L"$(dirname "$(find "$CUDA"/ -name 'libcupti.so' | head -1)")" -lcupti || exit 1
SASS=true start_collector $out "    sampling: {}" traces || exit 1
for r in 1 2 3; do
	$out/loop plain 200000 | sed 's/^/plain /'
	bin/gpuprobe run --socket $out/agent.sock --shim bin/libgpuprobe.so -- $out/loop plain 200000 | sed 's/^/windows /'
	GPUPROBE_TRACE=$out/t.txt bin/gpuprobe run --sass --socket $out/agent.sock --shim bin/libgpuprobe.so -- $out/loop plain 200000 | sed 's/^/sass /'
done | tee $out/loop.txt
kill -TERM $col; wait $col
grep -h 'sass: callbacks' $out/t.txt | sed 's/^gpuprobe\[[0-9]*\]: //' | tail -3
python3 - $out/loop.txt <<'PY'
import re, statistics, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) mode=\S+\s+ns/launch=(\d+)", line)
    if m:
        v.setdefault(m.group(1), []).append(int(m.group(2)))
p = statistics.median(v["plain"])
for k in ("plain", "windows", "sass"):
    print("loop %-8s median %5d ns/launch %s %.3fx plain" % (k, statistics.median(v[k]), v[k], statistics.median(v[k]) / p))
PY
