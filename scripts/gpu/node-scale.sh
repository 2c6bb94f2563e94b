#!/usr/bin/env bash
# node-scale.sh: the collector under a node's load, on the GPU machine from
# prebuilt bin/ (gpuprobe, libgpuprobe.so, otelcol-gpuprobe); needs python3
# with torch. N16 (default 16) launch-bound torchadd processes
# (scripts/gpu/launchbound.py) and a PyTorch training step
# (scripts/gpu/torchstep.py eager) run side by side under `gpuprobe run`
# against one collector with the DaemonSet's receiver settings
# (deploy/kubernetes/config.yaml: defaults but for the agent and host
# probes), traces and metrics to files. One second after the last process
# ends the collector gets SIGTERM. Checks: every torchadd process's add_
# launches (its own count, the tensor's final value) equal its
# gpu.cuda.kernel.launches of that kernel exactly; no record dropped, none
# undelivered; the collector exits 0 within its shutdown bound. Prints the
# collector's CPU seconds and VmHWM and the ring budget's counts.
# Environment: NS_OUT (default build/gpu-node-scale), N16, NS_AGENT and
# NS_EXTRA (YAML lines added under the receiver's agent, indented 6
# spaces, and under the receiver, indented 4), NS_PROFILE=1 (the pprof
# extension writes the collector's CPU profile, from start to SIGTERM, to
# NS_OUT/cpu.pprof), NS_HOST=false (host probes off).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${NS_OUT:-$PWD/build/gpu-node-scale}
n16=${N16:-16}
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.err "$out"/*.json "$out/agent.sock"
status=0
source scripts/gpu/lib_collector.sh
ext=
if [[ -n ${NS_PROFILE:-} ]]; then
	rm -f "$out/cpu.pprof"
	ext=$(printf 'extensions:\n  pprof:\n    endpoint: localhost:0\n    save_to_file: %s' "$out/cpu.pprof")
fi
cat >"$out/config.yaml" <<EOC
receivers:
  gpuprobe:
    agent:
      socket: $out/agent.sock
${NS_AGENT:-}
    host_probes:
      enabled: ${NS_HOST:-true}
      shim_processes: skip
      ldconfig: false
    telemetry:
      in_pipeline: true
${NS_EXTRA:-}
exporters:
  file/traces:
    path: $out/traces.json
  file/metrics:
    path: $out/metrics.json
${ext}
service:
  extensions: [${ext:+pprof}]
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
EOC
launch_collector "$out" || { echo "node-scale: the collector did not start"; tail "$out/collector.log"; exit 1; }
trap 'kill -KILL $col 2>/dev/null' EXIT

run=(bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so --)
pids=()
start=$(date +%s.%N)
for i in $(seq "$n16"); do
	"${run[@]}" python3 scripts/gpu/launchbound.py torchadd --batches 3 >>"$out/torchadd.jsonl" 2>>"$out/torchadd.err" &
	pids+=($!)
done
"${run[@]}" python3 scripts/gpu/torchstep.py eager --steps 100 >"$out/torchstep.jsonl" 2>"$out/torchstep.err" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p" || { echo "node-scale: a process failed (rc $?)"; status=1; }; done
echo "node-scale: $n16 torchadd + 1 training step ran in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s"
sleep 1
read -r ut st < <(awk '{print $14, $15}' "/proc/$col/stat")
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$col/status")
# What the resident set is now: the Go heap and stacks (RssAnon), the
# clients' rings and regions mapped from their memfds (RssShmem), files.
rss=$(awk '/^Rss(Anon|File|Shmem):/ {printf "%s%s %d MiB", sep, $1, $2 / 1024; sep=", "}' "/proc/$col/status")
t0=$(date +%s%N)
kill -TERM "$col"
wait "$col"
rc=$?
trap - EXIT
ms=$((($(date +%s%N) - t0) / 1000000))
tck=$(getconf CLK_TCK)
echo "node-scale: collector CPU $(awk -v t=$((ut + st)) -v k="$tck" 'BEGIN {printf "%.2f", t / k}') s, VmHWM $((hwm / 1024)) MiB ($rss); SIGTERM ended it in $ms ms, exit $rc"
((rc == 0)) || { echo "node-scale: FAIL: collector exit $rc"; status=1; }
grep -E 'error|failed to shutdown' "$out/collector.log" | tail -3

PYTHONPATH=scripts/gpu python3 - "$out" <<'EOP' || status=1
import json, sys
import lib_metrics as lm
out = sys.argv[1]
procs = [json.loads(l) for l in open(f"{out}/torchadd.jsonl") if l.startswith("{")]
pts = lm.load(f"{out}/metrics.json")
bad = 0
got = {}
# Newest point of each (process, series): lib_metrics.latest keys on the
# point's attributes only.
last = {}
for p in pts:
    if p["name"] != "gpu.cuda.kernel.launches":
        continue
    k = (p["resource"].get("process.pid"), tuple(sorted(p["attrs"].items())))
    if k not in last or p["time"] >= last[k]["time"]:
        last[k] = p
for (pid, attrs), p in last.items():
    name = dict(attrs).get("cuda.kernel.name", "")
    if "add" in name.lower():
        got[pid] = got.get(pid, 0) + p["value"]
total = exact = 0
for pr in procs:
    want, have = int(pr["check"]), got.get(pr["pid"], 0)
    total += want
    if want == have:
        exact += 1
    else:
        print(f"node-scale: FAIL: pid {pr['pid']}: {have} add_ launches in the metrics, the process made {want}")
        bad = 1
print(f"node-scale: {exact} of {len(procs)} processes exact ({total} add_ launches)")
def selfsum(name):
    return sum(p["value"] or 0 for p in lm.latest(pts, name))
for name in ("gpuprobe.receiver.records.read", "gpuprobe.receiver.records.dropped", "gpuprobe.receiver.shutdown.undelivered",
             "gpuprobe.receiver.rings.shrunk", "gpuprobe.receiver.rings.refused", "gpuprobe.receiver.traces.kept",
             "gpuprobe.receiver.host_calls.read", "gpuprobe.receiver.host_probes.processes"):
    print(f"node-scale: {name} = {selfsum(name)}")
# Host calls by entry point (the newest point of each process's series):
# what the host probes trapped, the processes with the shim included.
calls = {}
for p in pts:
    if p["name"] != "gpu.cuda.host.call.duration":
        continue
    k = (p["resource"].get("process.pid"), p["attrs"].get("cuda.api.name"))
    if k not in calls or p["time"] >= calls[k]["time"]:
        calls[k] = p
by_api = {}
for (pid, api), p in calls.items():
    by_api[api] = by_api.get(api, 0) + int(p["point"].get("count", 0))
print("node-scale: host calls by entry point: " + (", ".join(f"{a} {n}" for a, n in sorted(by_api.items(), key=lambda x: -x[1])[:8]) or "none"))
if selfsum("gpuprobe.receiver.records.dropped") or selfsum("gpuprobe.receiver.shutdown.undelivered"):
    print("node-scale: FAIL: records dropped or undelivered")
    bad = 1
if len(procs) == 0:
    bad = 1
sys.exit(bad)
EOP
((status == 0)) && echo "node-scale: PASS" || echo "node-scale: FAIL"
exit $status
