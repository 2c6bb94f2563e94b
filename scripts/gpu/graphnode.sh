#!/usr/bin/env bash
# graphnode.sh: on the GPU machine, from prebuilt bin/gpuprobe, bin/gpuprobe-harness and
# bin/libgpuprobe.so: a kernel in an explicitly built graph node
# (testdata/cuda/shim/graphnode.cu, PTX only so that it is patched) must
# compute the same result with the shim patching as without it.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/build/gpu-graphnode
mkdir -p "$out"
export GPUPROBE_PATCH=1
nvcc -O2 -gencode arch=compute_90,code=compute_90 -o "$out/graphnode" testdata/cuda/shim/graphnode.cu >"$out/build.log" 2>&1 ||
	{ echo "nvcc failed: $(tail -3 "$out/build.log")"; exit 1; }
"$out/graphnode" >"$out/plain.txt" 2>&1 || { echo "plain run failed: $(cat "$out/plain.txt")"; exit 1; }
sock=$out/agent.sock
rm -f "$sock"
"$root/bin/gpuprobe-harness" agent-dump --socket "$sock" --patch --exit-after 1 --timeout 60s >"$out/dump.txt" 2>&1 &
dpid=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
GPUPROBE_TRACE="$out/trace.txt" "$root/bin/gpuprobe" run --socket "$sock" --shim "$root/bin/libgpuprobe.so" -- "$out/graphnode" >"$out/patched.txt" 2>&1
rc=$?
wait "$dpid"
echo "plain:   $(cat "$out/plain.txt")"
echo "patched: $(cat "$out/patched.txt") (exit $rc)"
grep -E "patched a module|warps expected|total" "$out/dump.txt"
if [[ $rc -eq 0 ]] && cmp -s "$out/plain.txt" "$out/patched.txt"; then
	echo "graph node with a patched kernel: output identical: ok"
else
	echo "graph node with a patched kernel: FAIL"
	exit 1
fi
