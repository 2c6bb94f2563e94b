#!/usr/bin/env bash
# graph-spans.sh: CUDA graph replays through the real collector, on the
# GPU machine, from prebuilt bin/otelcol-gpuprobe, bin/gpuprobe and
# bin/libgpuprobe.so. Builds testdata/cuda/samples/graph.cu (PTX and SASS,
# so the shim can patch it), runs the collector (kernel_phases, file
# exporter), runs the sample under `gpuprobe run` (its graph of 4 kernel
# nodes launched REPLAYS times; every node keeps its launch id across
# replays), stops the collector and checks with `gpuprobe-harness tracecheck
# --graph-exe`: each node has one launch span per replay (cuda.graph.replay
# 0..REPLAYS-1) with its own cuda.executing phase, g_never (captured into a
# graph that is never launched) has no span, and the sample's output is
# identical to a plain run. Environment: NVCC, REPLAYS (default 5),
# GRAPH_OUT (default build/gpu-graph-spans).
set -uo pipefail
export GPUPROBE_PATCH=1
cd "$(dirname "$0")/../.."
root=$PWD
out=${GRAPH_OUT:-$root/build/gpu-graph-spans}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
replays=${REPLAYS:-5}
mkdir -p "$out"
for f in bin/otelcol-gpuprobe bin/gpuprobe bin/gpuprobe-harness bin/libgpuprobe.so; do
	[[ -x $f || -f $f ]] || { echo "gpu-graph-spans: $f missing"; exit 2; }
done
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
app=$out/graph
"$nvcc" -O2 -gencode "arch=compute_$cap,code=[compute_$cap,sm_$cap]" -o "$app" testdata/cuda/samples/graph.cu >"$out/nvcc.txt" 2>&1 ||
	{ echo "gpu-graph-spans: nvcc failed: $(tail -3 "$out/nvcc.txt")"; exit 1; }
"$app" "$replays" >"$out/plain.txt" 2>&1 || { echo "gpu-graph-spans: plain run failed"; exit 1; }

sock=$out/agent.sock
. scripts/gpu/lib_collector.sh
# Each node's own window (windows::graphs node): the check is per node.
start_traces_collector "$out" "$(printf '    windows:\n      graphs: node')" || { echo "gpu-graph-spans: collector did not start (see $out/collector.log)"; exit 1; }
timeout 120 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so -- "$app" "$replays" >"$out/shim.txt" 2>"$out/shim.err"
rc=$?
sleep 2.5 # the completion grace and a poll
kill -TERM "$col"
wait "$col"
status=0
if [[ $rc -eq 0 ]] && cmp -s "$out/plain.txt" "$out/shim.txt"; then
	echo "output identical to the plain run: ok ($(grep -m1 checksum "$out/plain.txt"))"
else
	echo "output identical to the plain run: FAIL (rc $rc; diff $out/plain.txt $out/shim.txt)"
	status=1
fi
bin/gpuprobe-harness tracecheck --traces "$out/traces.json" --graph-exe graph --graph-replays "$replays" --absent-kernel g_never || status=1
[[ -n ${OUT:-} ]] && cp "$out/collector.log" "$OUT/graph-collector.log" 2>/dev/null
exit $status
