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
# and prints the median step time under the shim against the plain run's
# (fails over 1.05; the target is 1.01). Exits 1 on a failed check.
# Environment: STEPS (default 300), STACKS, STACKS_OUT (default
# build/gpu-stacks).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${STACKS_OUT:-$PWD/build/gpu-stacks}
steps=${STEPS:-300}
mkdir -p "$out"
. scripts/gpu/lib_collector.sh
python3 scripts/gpu/stackstep.py "$steps" "$out/plain.ms" >"$out/plain.txt" 2>&1 ||
	{ echo "gpu-stacks: plain run failed: $(tail -3 "$out/plain.txt")"; exit 1; }
start_traces_collector "$out" "$(printf '    sampling:\n      stacks_per_second: %s' "${STACKS:-50}")" ||
	{ echo "gpu-stacks: collector did not start (see $out/collector.log)"; exit 1; }
status=0
timeout 300 bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- \
	python3 scripts/gpu/stackstep.py "$steps" "$out/shim.ms" >"$out/shim.txt" 2>"$out/shim.err" || status=1
sleep 1.5 # the receiver's grace and poll
kill -TERM "$col"
wait "$col"
if [[ $status != 0 ]] || ! cmp -s "$out/plain.txt" "$out/shim.txt"; then
	echo "gpu-stacks: FAIL: app failed or its output differs (diff $out/plain.txt $out/shim.txt; $out/shim.err)"
	status=1
fi
python3 - "$out/traces.json" scripts/gpu/stackstep.py "$out/plain.ms" "$out/shim.ms" <<'PY' || status=1
import re
import sys
sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans
path, script, plain_ms, shim_ms = sys.argv[1:5]
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
try:
    ratio = float(open(shim_ms).read()) / float(open(plain_ms).read())
except (OSError, ValueError, ZeroDivisionError) as e:
    ratio = None
    fails.append("step times: %s" % e)
if ratio is not None and ratio > 1.05:
    fails.append("step time %.3fx the plain run's" % ratio)
for ln in sorted(lines):
    print("  line %d (%s): %s" % (ln, ops.get(ln, "-"), ", ".join(sorted(lines[ln]))[:300]))
print("gpu-stacks: %d launch spans with stacks, %d with a symbolised native frame, step time %s of plain: %s"
      % (stacked, native, "%.3fx" % ratio if ratio else "?", "1 passed, 0 failed" if not fails else "0 passed, 1 failed"))
for f in fails:
    print("  FAIL " + f)
sys.exit(0 if not fails else 1)
PY
exit $status
