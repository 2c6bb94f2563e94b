#!/bin/bash
# torch-patch.sh - a first look: the PyTorch step plain, under the shim
# and under the shim with GPUPROBE_PATCH=1 (kernel lists from torch.profiler,
# the shim's trace of the patched run). Run from an unpacked gpu-bundle.
set -u
out=${1:-/tmp/tp}; mkdir -p "$out"
. scripts/gpu/lib_collector.sh
export PYTHONUNBUFFERED=1
ts=scripts/gpu/torchstep.py
for m in eager cublas; do
  python3 $ts $m --kernels > "$out/$m-plain.json" 2>"$out/$m-plain.err"
  for v in default patch; do
    start_collector "$out" "" traces || { echo collector failed; cat "$out/collector.log"; exit 1; }
    env_patch=; [[ $v == patch ]] && env_patch="GPUPROBE_PATCH=1 GPUPROBE_TRACE=$out/$m-trace.txt"
    env $env_patch timeout 300 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- python3 $ts $m --kernels > "$out/$m-$v.json" 2>"$out/$m-$v.err"
    sleep 1.5; kill -TERM $col; wait $col
    cp "$out/collector.log" "$out/$m-$v-collector.log"
  done
  for v in plain default patch; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d['step_ms'], d['checksum'], len(d.get('kernels',{})), sum(d.get('kernels',{}).values()))" "$out/$m-$v.json" "$m-$v" || tail -5 "$out/$m-$v.err"; done
  python3 - "$out/$m-plain.json" "$out/$m-patch.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["kernels"]; b = json.load(open(sys.argv[2]))["kernels"]
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        print("  diff %5s %5s %s" % (a.get(k), b.get(k), k[:150]))
PY
done
grep -c . "$out"/eager-trace.txt; grep -v "launch" "$out"/eager-trace.txt | head -150
