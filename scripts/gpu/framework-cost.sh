#!/usr/bin/env bash
# framework-cost.sh: what the shim costs launch-bound frameworks, split by
# mechanism, on the GPU machine from prebuilt bin/ (gpuprobe,
# libgpuprobe.so, otelcol-gpuprobe); needs python3 with jax, torch, cupy.
# Each mode of scripts/gpu/launchbound.py runs in ROUNDS interleaved rounds
# of five configurations, one process each:
#   plain    no shim
#   forward  the shim loaded, no collector (it forwards every call)
#   nowin    under the collector, device windows off (GPUPROBE_WINDOWS=0)
#   nopatch  under the collector, module patching off (GPUPROBE_PATCH=0)
#   default  under the collector with its default sampling
#   graphwin graph launches timed whole (GPUPROBE_GRAPH_WINDOWS=graph;
#            only when CONFIGS names it)
# then N16 (default 16) concurrent torchadd processes, plain and default,
# in two rounds. Prints the median us per step of each, its ratio to plain
# of the same rounds, and fails when an output's checksum differs from
# plain's. Environment: FW_OUT (default build/gpu-framework-cost), ROUNDS
# (3), MODES (jax torchadd cupy), N16.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${FW_OUT:-$root/build/gpu-framework-cost}
rounds=${ROUNDS:-3}
modes=${MODES:-jax torchadd cupy}
n16=${N16:-16}
mkdir -p "$out"
source scripts/gpu/lib_collector.sh
status=0
py=scripts/gpu/launchbound.py
export XLA_PYTHON_CLIENT_PREALLOCATE=false

start_collector "$out" "$(printf '    sampling:\n      device_max_per_second: 100')" metrics ||
	{ echo "framework-cost: the collector did not start"; tail "$out/collector.log"; exit 1; }
trap 'kill -TERM $col 2>/dev/null' EXIT

# one CONFIG MODE: runs MODE once under CONFIG, appends its JSON line to
# $out/CONFIG.MODE.jsonl.
one() {
	local cfg=$1 mode=$2 sock=$out/agent.sock
	local -a pre=()
	case $cfg in
	plain) ;;
	forward) pre=(bin/gpuprobe run --socket "$out/none.sock" --shim bin/libgpuprobe.so --) ;;
	nowin) pre=(env GPUPROBE_WINDOWS=0 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so --) ;;
	nopatch) pre=(env GPUPROBE_PATCH=0 bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so --) ;;
	default) pre=(bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so --) ;;
	graphwin) pre=(env GPUPROBE_GRAPH_WINDOWS=graph bin/gpuprobe run --socket "$sock" --shim bin/libgpuprobe.so --) ;;
	esac
	timeout 300 "${pre[@]}" "${pin[@]}" python3 "$py" "$mode" >>"$out/$cfg.$mode.jsonl" 2>>"$out/$cfg.$mode.err" ||
		{ echo "framework-cost: $cfg $mode failed (rc $?): $(tail -2 "$out/$cfg.$mode.err")"; status=1; }
}

configs=${CONFIGS:-plain forward nowin nopatch default}
# FW_CPU (e.g. 2-5): every application process pinned there with taskset.
pin=()
[[ -n ${FW_CPU:-} ]] && command -v taskset >/dev/null && pin=(taskset -c "$FW_CPU")
rm -f "$out"/*.jsonl "$out"/*.err
for r in $(seq "$rounds"); do
	for mode in $modes; do
		for cfg in $configs; do one "$cfg" "$mode"; done
	done
	echo "framework-cost: round $r of $rounds done ($(date +%T))"
done

# sixteen: N16 concurrent torchadd processes under CONFIG; one JSON line
# per process into $out/CONFIG.sixteen.jsonl.
sixteen() {
	local cfg=$1 i
	local -a pids=()
	for i in $(seq "$n16"); do
		if [[ $cfg == plain ]]; then
			python3 "$py" torchadd --batches 3 >>"$out/$cfg.sixteen.jsonl" 2>>"$out/$cfg.sixteen.err" &
		else
			bin/gpuprobe run --socket "$out/agent.sock" --shim bin/libgpuprobe.so -- python3 "$py" torchadd --batches 3 \
				>>"$out/$cfg.sixteen.jsonl" 2>>"$out/$cfg.sixteen.err" &
		fi
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || { echo "framework-cost: a $cfg sixteen process failed"; status=1; }; done
}
[[ $n16 -gt 0 ]] && for r in 1 2; do sixteen plain; sixteen default; done

python3 - "$out" "$configs" "$modes" <<'EOP' || status=1
import json, os, statistics, sys
out, configs, modes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split() + ["sixteen"]
bad = 0
def rows(cfg, mode):
    p = os.path.join(out, f"{cfg}.{mode}.jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.startswith("{")]
print("| workload | " + " | ".join(configs) + " |")
print("|---|" + "---|" * len(configs))
for mode in modes:
    base = rows("plain", mode)
    if not base:
        continue
    pm = statistics.median(r["us_per_step"] for r in base)
    checks = {r["check"] for r in base}
    cells = []
    for cfg in configs:
        rs = rows(cfg, mode)
        if not rs:
            cells.append("")
            continue
        m = statistics.median(r["us_per_step"] for r in rs)
        spread = f"{min(r['us_per_step'] for r in rs):.2f}-{max(r['us_per_step'] for r in rs):.2f}"
        cells.append(f"{m:.2f} us ({m / pm:.3f}x, {len(rs)} runs, {spread})" if cfg != "plain" else f"{m:.2f} us ({len(rs)} runs, {spread})")
        if {r["check"] for r in rs} != checks:
            print(f"framework-cost: FAIL: {mode} under {cfg}: checksums {sorted({r['check'] for r in rs})} != plain {sorted(checks)}")
            bad = 1
    print(f"| {mode} | " + " | ".join(cells) + " |")
sys.exit(bad)
EOP
kill -TERM "$col" 2>/dev/null
wait "$col"
trap - EXIT
grep -c '"name"' "$out/traces.json" 2>/dev/null | sed 's/^/framework-cost: span lines in traces.json: /'
((status == 0)) && echo "framework-cost: PASS" || echo "framework-cost: FAIL"
exit $status
