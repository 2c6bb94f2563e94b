#!/usr/bin/env bash
# stacks.sh: launch stacks end to end on the GPU machine, from prebuilt
# bin/otelcol-gpuprobe, bin/gpuprobe and bin/libgpuprobe.so. It starts the
# collector with sampling::stacks_per_second (STACKS, default 50; the
# other trace bounds at their defaults), runs scripts/gpu/stackstep.py
# (a PyTorch training step) plainly and under `gpuprobe run`, and checks
# from the file exporter's traces that:
#   - the output (a checksum of the weights) is identical to the plain run;
#   - kept launch spans carry code.stacktrace, and for each of the step's
#     three forward ops (the lines marked "# op:" in stackstep.py: matmul,
#     relu, loss) some span's top Python frame (code.line.number,
#     code.file.path, code.function.name "step") is that line;
#   - some native frame is symbolised (a line "at NAME (" with NAME not ??);
#   - gpu.cuda.kernel.launches.by_frame (DIR/metrics.json) counts launches
#     under each of the three op lines as top frame;
# and prints the median step times (plain, stacks off, stacks on) and
# each round's on/off ratio (fails when their median is over 1.05; the
# target is 1.01). With STACKS_SELFTIME=1 (and bin/libgpuprobe-selftime.so)
# it then runs the step ROUNDS times more under each collector with the
# self-timing shim, which times its own instructions on every launch
# (shim/src/selftime.c), and prints what the stacks add to the shim's time
# per launch and, from the launches a step makes, per step: a measurement
# of the stacks' cost on the launching thread that the spread between
# processes' step times does not blur.
# Exits 1 on a failed check. Environment: STEPS (default 300), ROUNDS
# (3), STACKS, STACKS_CPU, STACKS_OUT (default
# build/gpu-stacks).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${STACKS_OUT:-$PWD/build/gpu-stacks}
steps=${STEPS:-300}
mkdir -p "$out/nostacks"
. scripts/gpu/lib_collector.sh
# Rounds of three processes each (ROUNDS, default 3): plain, under a
# collector with stacks off (stacks_per_second: 0) and under the one with
# stacks on, so the stacks' own cost is the ratio of the last two.
# Both collectors export metrics too (the same work, so that on against
# off stays the stacks' own cost), every second.
start_collector "$out/nostacks" "$(printf '    metrics_interval: 1s\n    sampling:\n      stacks_per_second: 0')" metrics ||
	{ echo "gpu-stacks: collector did not start (see $out/nostacks/collector.log)"; exit 1; }
col0=$col
start_collector "$out" "$(printf '    metrics_interval: 1s\n    sampling:\n      stacks_per_second: %s' "${STACKS:-50}")" metrics ||
	{ echo "gpu-stacks: collector did not start (see $out/collector.log)"; kill "$col0"; exit 1; }
status=0
# Every run on the same CPUs (STACKS_CPU, default 2-5; "" for none): the step is
# launch-bound, and which core a process lands on moved its step time by
# more than the stacks could.
pin=()
[[ -n ${STACKS_CPU-2-5} ]] && command -v taskset >/dev/null && pin=(taskset -c "${STACKS_CPU-2-5}")
# The order alternates between rounds (plain, off, on; then on, off,
# plain), so that a drift over the call (clocks, caches) does not land on
# one configuration; each round's on/off ratio is kept.
for r in $(seq "${ROUNDS:-3}"); do
	order="plain nostacks shim"
	((r % 2 == 0)) && order="shim nostacks plain"
	for cfg in $order; do
		if [[ $cfg == plain ]]; then
			"${pin[@]}" python3 scripts/gpu/stackstep.py "$steps" "$out/plain.$r.ms" >"$out/plain.txt" 2>&1 ||
				{ echo "gpu-stacks: plain run failed: $(tail -3 "$out/plain.txt")"; status=1; }
			continue
		fi
		sock=$out/agent.sock
		[[ $cfg == nostacks ]] && sock=$out/nostacks/agent.sock
		timeout 300 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so -- \
			"${pin[@]}" python3 scripts/gpu/stackstep.py "$steps" "$out/$cfg.$r.ms" >"$out/$cfg.txt" 2>"$out/$cfg.err" || status=1
		if ! cmp -s "$out/plain.txt" "$out/$cfg.txt"; then
			echo "gpu-stacks: FAIL: $cfg round $r: app failed or its output differs (diff $out/plain.txt $out/$cfg.txt; $out/$cfg.err)"
			status=1
		fi
	done
done
if [[ ${STACKS_SELFTIME:-0} == 1 && -f bin/libgpuprobe-selftime.so ]]; then
	rm -f "$out"/st.*.lines
	for r in $(seq "${ROUNDS:-3}"); do
		for cfg in nostacks shim; do
			sock=$out/agent.sock
			[[ $cfg == nostacks ]] && sock=$out/nostacks/agent.sock
			timeout 300 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe-selftime.so -- \
				"${pin[@]}" python3 scripts/gpu/stackstep.py "$steps" "$out/st.$cfg.$r.ms" >/dev/null 2>"$out/st.$cfg.err" || status=1
			grep -m1 '^gpuprobe selftime:' "$out/st.$cfg.err" >>"$out/st.$cfg.lines" ||
				{ echo "gpu-stacks: selftime $cfg round $r printed no selftime line: $(tail -2 "$out/st.$cfg.err")"; status=1; }
		done
	done
	python3 - "$out" "$steps" <<'PY' || status=1
import glob, re, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2]) + 5  # stackstep.py's warm-up steps
def runs(cfg):
    rs = []
    for l in open("%s/st.%s.lines" % (out, cfg)):
        m = re.search(r"launches (\d+), shim ns/launch mean ([\d.]+).*stacks (\d+) \(([\d.]+) ns each\)", l)
        if m:
            rs.append((int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))))
    return rs
off, on = runs("nostacks"), runs("shim")
if not off or not on:
    sys.exit("gpu-stacks: selftime: no runs")
m_off, m_on = statistics.median(r[1] for r in off), statistics.median(r[1] for r in on)
per_step = statistics.median(r[0] for r in on + off) / steps
step_ms = statistics.median(float(open(f).read()) for f in glob.glob("%s/nostacks.[0-9]*.ms" % out))
# Each stack as the self-timing shim timed it, and all of them against
# the steps' time: the stacks' own cost on the launching thread.
each = statistics.median(r[3] for r in on)
stacks = statistics.median(r[2] for r in on)
share = stacks * each / (steps * step_ms * 1e6)
print("gpu-stacks: selftime: shim ns/launch stacks off %s (median %.1f), on %s (median %.1f); %.1f launches a step; "
      "a stack takes %.0f ns (%s stacks a run, %s off), %.0f ns a run in all: %.5f%% of the steps' time (%.3f ms a step)"
      % (", ".join("%.1f" % r[1] for r in off), m_off, ", ".join("%.1f" % r[1] for r in on), m_on, per_step,
         each, ", ".join(str(r[2]) for r in on), ", ".join(str(r[2]) for r in off), stacks * each, 100 * share, step_ms))
if any(r[2] for r in off) or not stacks:
    sys.exit("gpu-stacks: selftime: FAIL: stacks taken with stacks off, or none with them on")
PY
fi
for cfg in plain nostacks shim; do
	cat "$out"/$cfg.*.ms | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}' >"$out/$cfg.ms"
done
# Each round's on/off ratio, and their median (what the check reads).
ratios=$(for r in $(seq "${ROUNDS:-3}"); do
	awk -v a="$(cat "$out/shim.$r.ms" 2>/dev/null)" -v b="$(cat "$out/nostacks.$r.ms" 2>/dev/null)" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }'
done)
echo "$ratios" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}' >"$out/ratio"
echo "gpu-stacks: median step ms: plain $(cat "$out/plain.ms"), stacks off $(cat "$out/nostacks.ms"), stacks on $(cat "$out/shim.ms"); on/off by round: $(echo $ratios)"
sleep 1.5 # the receiver's grace and poll
kill -TERM "$col" "$col0"
wait "$col"
wait "$col0"
python3 - "$out/traces.json" scripts/gpu/stackstep.py "$out/ratio" "$out/metrics.json" <<'PY' || status=1
import re
import sys
sys.path.insert(0, "scripts/gpu")
import lib_metrics
from lib_traces import load, launch_spans
path, script, ratio_file, metrics = sys.argv[1:5]
ops = {}
for i, l in enumerate(open(script).read().split("\n"), 1):
    m = re.search(r"# op: (\w+)", l)
    if m:
        ops[i] = m.group(1)
spans, _ = load(path)
stacked, lines, native = 0, {}, 0
for s, at in launch_spans(spans):
    st = at.get("code.stacktrace", {}).get("stringValue")
    if st is None:
        continue
    stacked += 1
    if re.search(r"^  at (?!\?\?)\S+ \(", st, re.M):
        native += 1
    ln = at.get("code.line.number", {}).get("intValue")
    fp = at.get("code.file.path", {}).get("stringValue", "")
    fn = at.get("code.function.name", {}).get("stringValue", "")
    if ln is not None and fp.endswith("stackstep.py") and fn == "step":
        lines.setdefault(int(ln), set()).add(s["name"])
fails = []
if stacked == 0:
    fails.append("no launch span carries code.stacktrace")
for ln, op in ops.items():
    if ln not in lines:
        fails.append("no launch span's top Python frame is line %d (%s)" % (ln, op))
if native == 0:
    fails.append("no stack has a symbolised native frame")
# Launches by top frame: the newest point of each process's series, summed
# over the processes, by line of stackstep.py's step.
last = {}
try:
    points = lib_metrics.load(metrics)
except OSError as e:
    points = []
    fails.append("metrics: %s" % e)
for p in points:
    if p["name"] != "gpu.cuda.kernel.launches.by_frame":
        continue
    k = (p["resource"].get("process.pid"), tuple(sorted(p["attrs"].items())))
    if k not in last or p["time"] >= last[k]["time"]:
        last[k] = p
by_line, by_frame = {}, 0
for p in last.values():
    a = p["attrs"]
    by_frame += p["value"]
    if str(a.get("code.file.path", "")).endswith("stackstep.py") and a.get("code.function.name") == "step":
        by_line[a.get("code.line.number")] = by_line.get(a.get("code.line.number"), 0) + p["value"]
for ln, op in ops.items():
    if not by_line.get(ln):
        fails.append("gpu.cuda.kernel.launches.by_frame counts no launch from line %d (%s)" % (ln, op))
print("  launches.by_frame: %d in all; step's lines: %s" % (by_frame, ", ".join("%s: %d" % (l, n) for l, n in sorted(by_line.items()))))
try:
    ratio = float(open(ratio_file).read())
except (OSError, ValueError, ZeroDivisionError) as e:
    ratio = None
    fails.append("step times: %s" % e)
if ratio is not None and ratio > 1.05:
    fails.append("step time with stacks %.3fx the step time without" % ratio)
for ln in sorted(lines):
    print("  line %d (%s): %s" % (ln, ops.get(ln, "-"), ", ".join(sorted(lines[ln]))[:300]))
print("gpu-stacks: %d launch spans with stacks, %d with a symbolised native frame, step time with stacks %s of without: %s"
      % (stacked, native, "%.3fx" % ratio if ratio else "?", "1 passed, 0 failed" if not fails else "0 passed, 1 failed"))
for f in fails:
    print("  FAIL " + f)
sys.exit(0 if not fails else 1)
PY
exit $status
