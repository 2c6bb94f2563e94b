# lib_collector.sh: sourced by the GPU scripts that run the real collector
# with a traces file exporter (graph-spans.sh, sampling.sh,
# hostwait.sh) or a traces and a metrics one (programs.sh);
# lib_traces.py and lib_metrics.py read what they wrote.
#
# start_traces_collector DIR [RECEIVER_YAML]: writes DIR/config.yaml (the
# agent socket DIR/agent.sock, kernel_phases on, host probes off, traces to
# DIR/traces.json, plus RECEIVER_YAML: lines indented under the receiver),
# starts bin/otelcol-gpuprobe with it (log DIR/collector.log), waits for the
# socket and sets col to its pid. Returns 1 when it did not start.
start_traces_collector() { start_collector "$1" "${2:-}" traces; }

# notrace_bounds prints the sampling lines that lift the trace policy's
# head bounds (indented under sampling:), for checks that count every span.
notrace_bounds() {
	printf '      traces_per_second_per_kernel: 0\n      traces_per_second_per_process: 0\n      traces_per_second_per_node: 0'
}

# HOST_PROBES=true turns the receiver's host probes on (default off; they
# need root); HOST_LIBRARY_PATHS (a comma-separated YAML flow list) sets
# host_probes::library_paths, where host programs' libraries are looked for
# before ldconfig's cache. SASS=true turns on the SASS route (probes::sass).
# OTLP_HTTP=HOST:PORT adds an OTLP/HTTP receiver there to the traces
# pipeline, for the application's own spans (inference.sh).
#
# start_collector DIR RECEIVER_YAML traces|metrics|logs: start_traces_collector,
# or with metrics also a metrics pipeline to DIR/metrics.json (file/metrics,
# with the receiver's self-metrics: telemetry::in_pipeline) and debug logs (the receiver logs each module it patched at debug level);
# logs: metrics's, and a logs pipeline to DIR/logs.json (GPU programs'
# bpf_trace_printk and puts).
start_collector() {
	local dir=$1 extra=${2:-} signals=$3 logs=false
	rm -f "$dir/agent.sock" "$dir/traces.json" "$dir/metrics.json" "$dir/logs.json"
	[[ $signals == logs ]] && { signals=metrics; logs=true; }
	{
		printf 'receivers:\n  gpuprobe:\n    agent:\n      socket: %s\n' "$dir/agent.sock"
		printf '    probes:\n      kernel_phases: true\n      sass: %s\n    host_probes:\n      enabled: %s\n' "${SASS:-false}" "${HOST_PROBES:-false}"
		[[ -n ${HOST_LIBRARY_PATHS:-} ]] && printf '      library_paths: [%s]\n' "$HOST_LIBRARY_PATHS"
		printf '    poll_interval: 5ms\n'
		# Every launch probed and traced (the checks count device records
		# and spans exactly), unless the caller's own lines set sampling
		# (then they lift the trace bounds too: notrace_bounds).
		[[ $extra == *sampling:* ]] || printf '    sampling:\n      device_max_per_second: 0\n%s\n' "$(notrace_bounds)"
		# The checks read the self-metrics (gpuprobe.receiver.*) from
		# DIR/metrics.json: put the opt-in copy into the pipeline.
		[[ $signals != metrics || $extra == *telemetry:* ]] || printf '    telemetry:\n      in_pipeline: true\n'
		[[ -n $extra ]] && printf '%s\n' "$extra"
		[[ -n ${OTLP_HTTP:-} ]] && printf '  otlp:\n    protocols:\n      http:\n        endpoint: %s\n' "$OTLP_HTTP"
		printf 'exporters:\n  file/traces:\n    path: %s\n' "$dir/traces.json"
		[[ $signals == metrics ]] && printf '  file/metrics:\n    path: %s\n' "$dir/metrics.json"
		$logs && printf '  file/logs:\n    path: %s\n' "$dir/logs.json"
		printf 'service:\n  telemetry:\n    metrics:\n      level: none\n'
		[[ $signals == metrics ]] && printf '    logs:\n      level: debug\n'
		printf '  pipelines:\n    traces:\n      receivers: [gpuprobe%s]\n      exporters: [file/traces]\n' "${OTLP_HTTP:+, otlp}"
		[[ $signals == metrics ]] && printf '    metrics:\n      receivers: [gpuprobe]\n      exporters: [file/metrics]\n'
		$logs && printf '    logs:\n      receivers: [gpuprobe]\n      exporters: [file/logs]\n'
	} >"$dir/config.yaml"
	launch_collector "$dir"
}

# launch_collector DIR: starts bin/otelcol-gpuprobe with DIR/config.yaml
# (whose agent socket is DIR/agent.sock; log DIR/collector.log), waits for
# the socket and sets col to its pid. Returns 1 when it did not start.
launch_collector() {
	local dir=$1
	bin/otelcol-gpuprobe --config "$dir/config.yaml" >"$dir/collector.log" 2>&1 &
	col=$!
	for _ in $(seq 200); do [[ -S $dir/agent.sock ]] && return 0; sleep 0.05; done
	kill "$col" 2>/dev/null
	return 1
}

# run_with_shim DIR NAME APP ARGS...: runs APP ARGS plainly (output in
# DIR/plain.txt) and under `gpuprobe run` with bin/libgpuprobe.so against
# the collector started by start_traces_collector DIR (DIR/shim.txt), then
# stops that collector after the receiver's grace. Returns 1, saying so
# with NAME, when the shim run failed or its output differs.
run_with_shim() {
	local dir=$1 name=$2 rc
	shift 2
	"$@" >"$dir/plain.txt" 2>&1
	timeout 120 bin/gpuprobe run --socket "$dir/agent.sock" --shim bin/libgpuprobe.so -- "$@" >"$dir/shim.txt" 2>"$dir/shim.err"
	rc=$?
	sleep 1.5 # the receiver's grace and poll
	kill -TERM "$col"
	wait "$col"
	if [[ $rc != 0 ]] || ! cmp -s "$dir/plain.txt" "$dir/shim.txt"; then
		echo "$name: FAIL: app rc $rc or output differs (diff $dir/plain.txt $dir/shim.txt)"
		return 1
	fi
}
