# lib-collector.sh: sourced by the GPU scripts that run the real collector
# with a traces file exporter (gpu-graph-spans.sh, gpu-sampling.sh).
#
# start_traces_collector DIR [RECEIVER_YAML]: writes DIR/config.yaml (the
# agent socket DIR/agent.sock, kernel_phases on, host probes off, traces to
# DIR/traces.json, plus RECEIVER_YAML: lines indented under the receiver),
# starts bin/otelcol-gpuprobe with it (log DIR/collector.log), waits for the
# socket and sets col to its pid. Returns 1 when it did not start.
start_traces_collector() {
	local dir=$1 extra=${2:-}
	rm -f "$dir/agent.sock" "$dir/traces.json"
	{
		printf 'receivers:\n  gpuprobe:\n    agent:\n      socket: %s\n' "$dir/agent.sock"
		printf '    probes:\n      kernel_phases: true\n    host_probes:\n      enabled: false\n    poll_interval: 5ms\n'
		[[ -n $extra ]] && printf '%s\n' "$extra"
		printf 'exporters:\n  file/traces:\n    path: %s\n' "$dir/traces.json"
		printf 'service:\n  telemetry:\n    metrics:\n      level: none\n'
		printf '  pipelines:\n    traces:\n      receivers: [gpuprobe]\n      exporters: [file/traces]\n'
	} >"$dir/config.yaml"
	bin/otelcol-gpuprobe --config "$dir/config.yaml" >"$dir/collector.log" 2>&1 &
	col=$!
	for _ in $(seq 200); do [[ -S $dir/agent.sock ]] && return 0; sleep 0.05; done
	kill "$col" 2>/dev/null
	return 1
}
