#!/usr/bin/env bash
# inference.sh: an inference server's kernels inside its request traces,
# on the GPU machine, from prebuilt bin/otelcol-gpuprobe, bin/gpuprobe and
# bin/libgpuprobe.so. scripts/gpu/inference_server.py (a stdlib HTTP
# server, a PyTorch MLP with random weights on the GPU, OpenTelemetry
# with python/gpuprobe_otel's span processor: the real SDK when
# installed, else its tests' stand-in) serves REQUESTS requests (default
# 100, 4 at a time) with HEALTH (10) untraced health checks alongside,
# after 3 warm-up passes outside any request; inference_check.py sends
# them. Twice:
#   plain   no gpuprobe; torch.profiler counts the kernels of one request
#           and of one health check (DIR/kernels.json)
#   shim    under `gpuprobe run`, exporting its spans to the collector's
#           OTLP/HTTP receiver; the collector writes them and the launch
#           spans to DIR/traces.json
# and checks that the outputs are identical, and from DIR/traces.json
# (inference_check.py check) that every request span was exported, its
# trace holds exactly the profiler's count of launch spans, all children
# of the request span with their device phases (cuda.queued,
# cuda.executing) and gpuprobe.parent.source thread, and that the launches
# outside the requests are roots of traces of their own.
#
# Trace policy: the collector's defaults, except
# traces_per_second_per_process and _per_node, lifted (0): a launch under
# a sampled request span skips its kernel's bound
# (traces_per_second_per_kernel, 1 here) and sampling::one_in, but not its
# process's and the node's (10 and 100 a second by default), which 100
# requests of about ten kernels each in a few seconds would pass. The
# launches outside requests stay under the kernel bound, so only some of
# them are kept: the check wants at least one, each in a trace of its own.
# Exits 1 on a failed check. Environment: REQUESTS, HEALTH, INFERENCE_OUT
# (default build/gpu-inference), MODEL (mlp; driver: the MOCK driver's
# kernels, to try the script without a GPU); the log also goes to
# $OUT/inference.log when $OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${INFERENCE_OUT:-$PWD/build/gpu-inference}
n=${REQUESTS:-100}
health=${HEALTH:-10}
warmup=3
mkdir -p "$out"
[[ -n ${OUT:-} && -d ${OUT:-} ]] && exec > >(tee "$OUT/inference.log") 2>&1
. scripts/gpu/lib_collector.sh
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
status=0

# serve NAME SERVER_ARGS...: runs inference_server.py (under the command
# in the array pre, when set) in the background, sends it the requests
# once it listens (DIR/NAME.outputs, .spans, .ms) and waits for it to
# exit (log DIR/NAME.server.txt). Returns 1 when a step failed.
serve() {
	local name=$1 pid rc=0
	shift
	rm -f "$out/$name.port"
	timeout 240 "${pre[@]}" python3 scripts/gpu/inference_server.py --model "${MODEL:-mlp}" --warmup "$warmup" \
		--port-file "$out/$name.port" "$@" \
		>"$out/$name.server.txt" 2>&1 &
	pid=$!
	for _ in $(seq 1800); do
		[[ -s $out/$name.port ]] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if [[ ! -s $out/$name.port ]]; then
		echo "inference: $name: the server did not start: $(tail -5 "$out/$name.server.txt")"
		kill "$pid" 2>/dev/null
		wait "$pid"
		return 1
	fi
	python3 scripts/gpu/inference_check.py send "http://127.0.0.1:$(cat "$out/$name.port")" "$n" "$health" "$out/$name" || rc=1
	wait "$pid" || { echo "inference: $name: the server failed: $(tail -5 "$out/$name.server.txt")"; rc=1; }
	tail -1 "$out/$name.server.txt"
	return $rc
}

pre=()
serve plain --kernel-count "$out/kernels.json" || status=1
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OTLP_HTTP=127.0.0.1:$port start_collector "$out" "$(printf '    sampling:\n      traces_per_second_per_process: 0\n      traces_per_second_per_node: 0')" traces ||
	{ echo "inference: collector did not start (see $out/collector.log)"; exit 1; }
pre=(bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so --)
OTEL_SERVICE_NAME=gpu-inference serve shim --otlp "http://127.0.0.1:$port" || status=1
sleep 3 # windows::wait (2 s) and a poll: the last launches' windows
kill -TERM "$col"
wait "$col"
if ! cmp -s "$out/plain.outputs" "$out/shim.outputs"; then
	echo "inference: FAIL: outputs differ (diff $out/plain.outputs $out/shim.outputs)"
	status=1
fi
echo "inference: median request ms: plain $(cat "$out/plain.ms" 2>/dev/null), under gpuprobe $(cat "$out/shim.ms" 2>/dev/null); outputs of $(wc -l <"$out/shim.outputs" 2>/dev/null) requests $(cmp -s "$out/plain.outputs" "$out/shim.outputs" && echo identical || echo DIFFER)"
# The device windows' state changes (a detach by the windows' rate cap
# leaves the later launches without phases).
grep -o 'gpuprobe: device windows[^{]*' "$out/collector.log" | sort | uniq -c
python3 scripts/gpu/inference_check.py check "$out/traces.json" "$out/kernels.json" "$out/shim.spans" "$warmup" "$health" || status=1
exit $status
