#!/usr/bin/env bash
# hostprobes.sh: the host probes' checks on the GPU machine, from prebuilt
# binaries (no Go there), as root (uprobes):
#
#   bin/otelcol-gpuprobe  the collector (host_probes on, kernel_phases,
#                         testdata/bpf/launchlate.o), file exporters
#   bin/gpuprobe          `run` (the shim launcher)
#   bin/gpuprobe-harness  `tracecheck`
#   bin/libgpuprobe.so    the shim
#   bin/hostprobe.test    optional: the hostprobe package's test binary, for
#                         the uprobe-hit benchmark on this machine
#
# It builds testdata/cuda/shim/vectoradd.cu with PTX and `-cudart shared`,
# starts the collector, then runs two copies of the app: vectoradd_shim
# under `gpuprobe run` (patched, launch records) and vectoradd_noshim
# plainly; stops the collector and checks with `gpuprobe-harness tracecheck`:
#   - every launch span of the shim process has a host launch call
#     (cudaLaunchKernel, uprobe on libcudart) as its parent, starts inside
#     it, and has its device phases below it;
#   - the shim-less process has exactly one approximate kernel span per
#     launch, each under its host launch call;
#   - a shim-less run of the graph sample (testdata/cuda/samples/graph.cu,
#     `-cudart shared`; every launch captured into a graph) has its 5
#     launch calls marked cuda.graph.captured, no approximate kernel
#     span, and one approximate cuda.graph span per graph launch (3);
#   - a shim-less run of the multi-stream sample (testdata/cuda/samples/
#     multistream.cu, 4 iterations: 9 launches on 3 streams that the
#     default stream waits for through events, 1 on the default stream,
#     then a sync of the default stream) has one approximate span per
#     launch (40): the sync closes the other streams' launches through the
#     event waits;
#   - the same sample on blocking streams without events (`multistream 4
#     blocking`: the legacy stream's implicit synchronisation orders the
#     digest after the streams' work) has one approximate span per launch
#     (40) too: the probes saw the streams created blocking, so the sync of
#     the default stream closes their launches;
#   - where PyTorch is installed, a shim-less run of
#     testdata/cuda/shim/graph.py (torch.cuda.graph: 4 kernels captured,
#     10 replays) has its 4 captured launch calls marked and 10 approximate
#     cuda.graph spans;
#   - launchlate's launch delays (uprobe on cudaLaunchKernel → first
#     instruction of block 0, both on CLOCK_MONOTONIC through the
#     collector's clock offset) agree with the shim's queued phases within
#     one log2 bucket;
# then times a launch-heavy loop (empty kernels) with and without the host
# probes attached, interleaved, as ratios.
#
# Environment: NVCC, HP_OUT (default build/gpu-hostprobes; copied to $OUT),
# ITERS (vectorAdd iterations, default 20), ROUNDS (launch-loop rounds, 5).
set -uo pipefail
export GPUPROBE_PATCH=1

cd "$(dirname "$0")/../.."
root=$PWD
out=${HP_OUT:-$root/build/gpu-hostprobes}
nvcc=${NVCC:-nvcc}
iters=${ITERS:-20}
rounds=${ROUNDS:-5}
mkdir -p "$out"
rows=()
failed=0
col_pid=

row() {
	rows+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")")
	[[ $2 == FAIL ]] && failed=1
}

finish() {
	[[ -n $col_pid ]] && kill "$col_pid" 2>/dev/null
	if [[ -n ${OUT:-} ]]; then
		mkdir -p "$OUT/gpu-hostprobes"
		cp "$out"/*.txt "$out"/*.log "$out"/*.yaml "$OUT/gpu-hostprobes/" 2>/dev/null
		cp -r "$out/first" "$OUT/gpu-hostprobes/" 2>/dev/null
	fi
	echo
	printf '%-44s %-5s %s\n' "check" "result" "detail"
	printf '%s\n' "${rows[@]}"
	exit "$failed"
}

for f in bin/otelcol-gpuprobe bin/gpuprobe bin/gpuprobe-harness bin/libgpuprobe.so testdata/bpf/launchlate.o; do
	[[ -e $f ]] || { row "prebuilt $f" FAIL "missing"; finish; }
done

app=$out/vectoradd_shim
if ! "$nvcc" -O3 -cudart shared -gencode arch=compute_90,code=compute_90 -o "$app" testdata/cuda/shim/vectoradd.cu >"$out/nvcc.txt" 2>&1; then
	row "nvcc -cudart shared (PTX)" FAIL "see $out/nvcc.txt"
	finish
fi
cp "$app" "$out/vectoradd_noshim"
cp "$app" "$out/vectoradd_loop"
row "nvcc -cudart shared (PTX)" ok "$app"
for s in graph multistream; do
	if ! "$nvcc" -O2 -cudart shared -gencode arch=compute_90,code=compute_90 -o "$out/${s}_noshim" "testdata/cuda/samples/$s.cu" >"$out/nvcc-$s.txt" 2>&1; then
		row "nvcc $s sample -cudart shared" FAIL "see $out/nvcc-$s.txt"
		finish
	fi
done

sock=$out/agent.sock
rm -f "$sock" "$out"/traces.json "$out"/metrics.json
cat >"$out/config.yaml" <<EOF
receivers:
  gpuprobe:
    agent:
      socket: $sock
    probes:
      kernel_phases: true
    # The checks count every launch's spans: no head bound on traces.
    sampling:
      traces_per_second_per_kernel: 0
      traces_per_second_per_process: 0
      traces_per_second_per_node: 0
    programs:
      - path: $root/testdata/bpf/launchlate.o
    host_probes:
      enabled: true
      scan_interval: 200ms
      # The shim process's launch calls are probed too: the checks nest
      # them with its launch spans (the default, skip, leaves them out).
      shim_processes: all
    poll_interval: 5ms
    metrics_interval: 500ms
    # Self-metrics in metrics.json too (host_calls.*, host_probes.*).
    telemetry:
      in_pipeline: true
exporters:
  file/traces:
    path: $out/traces.json
  file/metrics:
    path: $out/metrics.json
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [gpuprobe]
      exporters: [file/traces]
    metrics:
      receivers: [gpuprobe]
      exporters: [file/metrics]
EOF

bin/otelcol-gpuprobe --config "$out/config.yaml" >"$out/collector.log" 2>&1 &
col_pid=$!
for _ in $(seq 200); do
	[[ -S $sock ]] && grep -q "host probes" "$out/collector.log" && break
	sleep 0.05
done
if [[ ! -S $sock ]]; then
	row "collector started" FAIL "see $out/collector.log"
	finish
fi
sleep 0.5
row "collector started" ok "$(grep -m1 -o 'host probes[^"]*' "$out/collector.log")"

timeout 120 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so -- "$app" sync "$iters" >"$out/shim.txt" 2>"$out/shim.err"
rc=$?
"$out/vectoradd_noshim" sync "$iters" >"$out/noshim.txt" 2>"$out/noshim.err"
rc2=$?
if [[ $rc == 0 && $rc2 == 0 ]] && cmp -s "$out/shim.txt" "$out/noshim.txt"; then
	row "apps ran, output identical" ok "$(head -1 "$out/noshim.txt")"
else
	row "apps ran, output identical" FAIL "rc $rc/$rc2; diff $out/shim.txt $out/noshim.txt"
fi
torch_ran=
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	if (cd testdata/cuda/shim && timeout 300 python3 graph.py) >"$out/torchgraph.txt" 2>&1; then
		row "torch graph.py ran (no shim)" ok "$(tail -1 "$out/torchgraph.txt")"
		torch_ran=1
	else
		row "torch graph.py ran (no shim)" FAIL "see $out/torchgraph.txt"
	fi
fi
cp "$out/multistream_noshim" "$out/multistream_legacy_noshim"
for s in graph:3 multistream:4 multistream_legacy:4:blocking; do
	name=${s%%:*} args=${s#*:}
	if timeout 60 "$out/${name}_noshim" ${args//:/ } >"$out/$name.txt" 2>&1; then
		row "$name sample ran (no shim)" ok "$(head -1 "$out/$name.txt")"
	else
		row "$name sample ran (no shim)" FAIL "see $out/$name.txt"
	fi
done
want=$(sed -n 's/^app: launches=\([0-9]*\)/\1/p' "$out/noshim.txt")

sleep 2.5 # launch timeout, one metrics interval
kill -TERM "$col_pid"
wait "$col_pid"
col_pid=

bin/gpuprobe-harness tracecheck --traces "$out/traces.json" --metrics "$out/metrics.json" \
	--nested-exe vectoradd_shim --approx-exe vectoradd_noshim --launches "${want:-0}" \
	--captured-exe graph_noshim --captured-launches 5 --captured-graph-launches 3 \
	--launchlate "${LAUNCHLATE_METRIC:-gpuprobe.map.delay_log2_ns}" >"$out/tracecheck.txt" 2>&1
bin/gpuprobe-harness tracecheck --traces "$out/traces.json" --approx-exe multistream_noshim --launches 40 >"$out/tracecheck-ms.txt" 2>&1
bin/gpuprobe-harness tracecheck --traces "$out/traces.json" --approx-exe multistream_legacy_noshim --launches 40 >"$out/tracecheck-msl.txt" 2>&1
if [[ -n $torch_ran ]]; then
	# graph.py's spans (process python3*): captured launch calls, approximate graph spans.
	python3 - "$out/traces.json" >"$out/tracecheck-torch.txt" <<'PY'
import json, sys
captured = graphs = approx = 0
for line in open(sys.argv[1]):
    for rs in json.loads(line).get("resourceSpans", []):
        res = {a["key"]: a["value"] for a in rs["resource"].get("attributes", [])}
        if not res.get("process.executable.name", {}).get("stringValue", "").startswith("python"):
            continue
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                at = {a["key"]: a["value"] for a in s.get("attributes", [])}
                if at.get("cuda.graph.captured", {}).get("boolValue") and not s.get("parentSpanId"):
                    captured += 1
                if s["name"] == "cuda.graph" and at.get("cuda.graph.approximate", {}).get("boolValue"):
                    graphs += 1
                if at.get("cuda.kernel.approximate", {}).get("boolValue"):
                    approx += 1
row = lambda name, ok, detail: print("%-44s %-5s %s" % (name, "ok" if ok else "FAIL", detail))
row("torch graph: captured launch calls", captured == 4, "%d, want 4" % captured)
row("torch graph: approximate graph spans", graphs == 10, "%d, want 10" % graphs)
row("torch graph: approximate kernel spans", approx > 0, "%d (the eager launches)" % approx)
PY
fi
gzip -k "$out/traces.json" "$out/metrics.json"
mkdir -p "$out/first"
mv "$out"/*.json.gz "$out/first/"
# checkrows FILE [PREFIX [PATTERN]]: the rows of a tracecheck table (those
# whose name matches PATTERN), their names prefixed.
checkrows() {
	while IFS= read -r line; do
		[[ $line == check* || -z $line ]] && continue
		name=${line:0:44}
		name=${name%"${name##*[! ]}"}
		[[ -n ${3:-} && $name != $3 ]] && continue
		res=$(awk '{print $0}' <<<"${line:45:5}" | tr -d ' ')
		row "${2:-}$name" "$res" "${line:51}"
	done <"$1"
}
checkrows "$out/tracecheck.txt"
checkrows "$out/tracecheck-ms.txt" "multistream: " "no shim: approximate*"
checkrows "$out/tracecheck-msl.txt" "multistream blocking: " "no shim: approximate*"
[[ -n $torch_ran ]] && checkrows "$out/tracecheck-torch.txt"

# Launch-heavy loop: empty kernels, host probes attached (collector on) or
# not, interleaved rounds; ns per launch as the app measures it.
loop() { "$out/vectoradd_loop" bench 100000 | sed -n 's/.*ns_per_launch=\([0-9.]*\).*/\1/p'; }
plain=() probed=()
sed -i "s|$out/traces.json|$out/loop-traces.json|; s|$out/metrics.json|$out/loop-metrics.json|" "$out/config.yaml"
for r in $(seq "$rounds"); do
	plain+=("$(loop)")
	bin/otelcol-gpuprobe --config "$out/config.yaml" >>"$out/collector2.log" 2>&1 &
	col_pid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	sleep 1 # host probes attach after the socket is up
	probed+=("$(loop)")
	kill -TERM "$col_pid"
	wait "$col_pid"
	col_pid=
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mp=$(median "${plain[@]}")
mq=$(median "${probed[@]}")
ratio=$(awk -v a="$mq" -v b="$mp" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
echo "plain ${plain[*]}" >"$out/loop.txt"
echo "probed ${probed[*]}" >>"$out/loop.txt"
row "launch loop: probed / plain (median ns)" ok "$mq / $mp = ${ratio}x over $rounds rounds"

# One probed call in isolation: the STAND-IN libraries (same symbols as
# libcuda/libcudart, no GPU work) and their app's loop of cuCtxSynchronize,
# without and with the collector's host probes attached to them; the
# collector's CPU time over the probed loop.
sd=$out/standin
mkdir -p "$sd"
S=gpuprobe/hostprobe/testdata/standin
if gcc -O2 -fno-ipa-icf -I $S -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$sd/libcuda.so.1" $S/standin_libcuda.c &&
	gcc -O2 -fno-ipa-icf -I $S -shared -fPIC -Wl,-soname,libcudart.so.13 -o "$sd/libcudart.so.13" $S/standin_libcudart.c "$sd/libcuda.so.1" &&
	gcc -O2 -fno-ipa-icf -I $S -o "$sd/standin_app" $S/standin_app.c "$sd/libcudart.so.13" "$sd/libcuda.so.1" -Wl,-rpath,"$sd" -lpthread; then
	sed -e "s|scan_interval: 200ms|scan_interval: 0s\n      ldconfig: false\n      library_paths: [$sd]|" -e "/programs:/,+1d" \
		-e "s|$out/loop-traces.json|$out/standin-traces.json|; s|$out/loop-metrics.json|$out/standin-metrics.json|" \
		-e "s|$sock|$sd/agent.sock|" "$out/config.yaml" >"$sd/config.yaml"
	# LD_LIBRARY_PATH first: the GPU machine's own LD_LIBRARY_PATH names the
	# real libcuda, which would win over the app's RUNPATH.
	base=$(LD_LIBRARY_PATH=$sd "$sd/standin_app" loop 200000 | sed -n 's/ns_per_call=//p')
	bin/otelcol-gpuprobe --config "$sd/config.yaml" >"$sd/collector.log" 2>&1 &
	col_pid=$!
	for _ in $(seq 100); do grep -q "host probes attached" "$sd/collector.log" && break; sleep 0.05; done
	sleep 0.5
	t0=$(awk '{print $14+$15}' /proc/$col_pid/stat)
	s0=$(date +%s.%N)
	probed=$(LD_LIBRARY_PATH=$sd "$sd/standin_app" loop 1000000 | sed -n 's/ns_per_call=//p')
	s1=$(date +%s.%N)
	sleep 0.3
	t1=$(awk '{print $14+$15}' /proc/$col_pid/stat)
	kill -TERM "$col_pid"
	wait "$col_pid"
	col_pid=
	row "uprobe hit (stand-in cuCtxSynchronize)" ok "$probed ns per probed call vs $base ns unprobed (entry + return probe)"
	row "collector CPU on the probed loop" ok "$(awk -v t=$((t1 - t0)) -v a="$s0" -v b="$s1" -v hz="$(getconf CLK_TCK)" 'BEGIN { d = b - a + 0.3; r = 1e6 / (b - a); printf "%.2f core at %.0f calls/s = %.2f core per 100k calls/s", t / hz / d, r, t / hz / d * 1e5 / r }')"
fi

if [[ -x bin/hostprobe.test ]]; then
	(cd gpuprobe/hostprobe 2>/dev/null || cd .; env -u LD_LIBRARY_PATH "$root/bin/hostprobe.test" -test.run '^$' -test.bench UprobeHit -test.benchtime 100000x -test.count 3) >"$out/bench.txt" 2>&1
	row "uprobe hit benchmark" ok "$(grep 'UprobeHit' "$out/bench.txt" | tr -s ' \t' ' ' | tr '\n' ';')"
fi
finish
