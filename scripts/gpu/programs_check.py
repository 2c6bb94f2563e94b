"""programs_check: programs.sh's checks of what the collector exported
for testdata/cuda/samples/progs.cu (vectorAdd launched ITERS times over N
threads in BLOCK-thread blocks) with threadhist.o and kernelretsnoop.o.

  python3 scripts/gpu/programs_check.py TRACES METRICS LOG N ITERS [BLOCK]

Prints one line per check, "name<TAB>ok|FAIL<TAB>detail", and exits 1 if
any failed. See programs.sh for what each check asserts."""
import re
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_metrics import attrs, load as load_metrics, latest  # noqa: E402
from lib_traces import load as load_traces, launch_spans  # noqa: E402

MAX_BLOCKS = 1024  # threadhist.c's MAX_BLOCKS
KERNEL = "_Z9vectorAddPKfS0_Pf"

rows = []


def row(name, ok, detail):
    rows.append((name, "ok" if ok else "FAIL", detail))


def one(points, name):
    """The newest value of a metric with a single series, or None."""
    s = latest(points, name)
    return s[0]["value"] if len(s) == 1 else None


def check_launches(spans, children, iters):
    launches = launch_spans(spans)
    phased = sum(1 for s, _ in launches if "cuda.executing" in children.get(s["spanId"], []))
    names = sorted({s["name"] for s, _ in launches})
    row("launch spans (kernel_phases)", len(launches) == iters and phased == iters,
        "%d launch spans, %d with cuda.executing (want %d each; the launch and kp_exec rings dropped nothing); kernels %s"
        % (len(launches), phased, iters, names))


def check_thread_runs(points, n, iters):
    name = "gpuprobe.map.thread_runs.value"
    s = [p for p in latest(points, name) if p["attrs"].get("gpuprobe.map.key") == 0]
    if len(s) != 1 or s[0]["kind"] != "exponentialHistogram":
        row("threadhist per-thread counts", False, "%d series of %s with key 0 (want 1 exponential histogram); metrics: %s"
            % (len(s), name, sorted({p["name"] for p in points if p["name"].startswith("gpuprobe.map.")})))
        return
    p = s[0]["point"]
    count, total = int(p.get("count", 0)), float(p.get("sum", -1))
    lo, hi = p.get("min"), p.get("max")
    ok = count == n and total == float(n * iters) and lo in (None, iters) and hi in (None, iters)
    row("threadhist per-thread counts", ok,
        "%s{gpuprobe.map.key=0}: %d active threads (want N=%d), sum %.0f (want N x ITERS = %d), min %s max %s (want %d)"
        % (name, count, n, total, n * iters, lo, hi, iters))


def check_block_threads(points, n, iters, block):
    name = "gpuprobe.map.block_threads.value"
    s = latest(points, name)
    want_keys = set(range(min(n // block, MAX_BLOCKS)))
    got = {p["attrs"].get("gpuprobe.map.key"): p["value"] for p in s}
    bad = sorted(k for k, v in got.items() if v != block * iters)
    over = one(points, "gpuprobe.receiver.map.keys.over_limit")
    ok = set(got) == want_keys and not bad and all(p["kind"] == "sum" for p in s) and over == 0
    row("threadhist per-block counts", ok,
        "%s: %d keys (want %d: blocks 0..%d), %d with a value != BLOCK x ITERS = %d%s, sum over blocks %d (want %d), keys over limit %s"
        % (name, len(got), len(want_keys), len(want_keys) - 1, len(bad), block * iters,
           " (e.g. key %s = %s)" % (bad[0], got[bad[0]]) if bad else "", sum(got.values()),
           len(want_keys) * block * iters, over))


def exit_events(spans):
    """The kernelretsnoop ring's batch spans and their events' attributes."""
    batches = [(s, at) for s, at in spans if s["name"] == "exits"]
    evs = []
    for s, _ in batches:
        for e in s.get("events", []):
            evs.append(attrs(e.get("attributes")))
    return batches, evs


def check_ring(spans, points, n, iters, block):
    batches, evs = exit_events(spans)
    declared = sum(int(at.get("gpuprobe.map.records", {}).get("intValue", 0)) for _, at in batches)
    dropped = one(points, "gpuprobe.receiver.records.dropped")
    offered = n * iters
    ok = dropped is not None and len(evs) > 0 and declared == len(evs) and len(evs) + dropped == offered
    row("kernelretsnoop delivered + dropped", ok,
        "%d records as events of %d 'exits' spans (gpuprobe.map.records says %d) + %s dropped "
        "(gpuprobe.receiver.records.dropped, all rings) = %s (want N x ITERS = %d)"
        % (len(evs), len(batches), declared, dropped, len(evs) + dropped if dropped is not None else "?", offered))

    grid = n // block
    want = {"block_x": grid, "block_y": 1, "block_z": 1, "thread_x": block, "thread_y": 1, "thread_z": 1,
            "lane_id": 32, "sm_id": 1024}
    bad, seen = [], {}
    for e in evs:
        miss = [k for k in want if not isinstance(e.get(k), int) or not 0 <= e[k] < want[k]]
        if not miss and e["lane_id"] != e["thread_x"] % 32:
            miss = ["lane_id != thread_x %% 32"]
        if miss:
            bad.append((e, miss))
        k = (e.get("block_x"), e.get("thread_x"))
        seen[k] = seen.get(k, 0) + 1
    repeated = sum(1 for c in seen.values() if c > iters)
    row("kernelretsnoop record fields", len(evs) > 0 and not bad and repeated == 0,
        "%d records: %d out of range (block_x < %d, thread_x < %d, y/z 0, lane_id = thread_x %% 32, sm_id < 1024)%s; "
        "%d (block, thread) pairs seen, %d more than ITERS times"
        % (len(evs), len(bad), grid, block, "; e.g. %s: %s" % (bad[0][1], bad[0][0]) if bad else "",
           len(seen), repeated))


def check_patched(points, log):
    patched = one(points, "gpuprobe.receiver.modules.patched")
    failures = one(points, "gpuprobe.receiver.patch.failures")
    text = open(log, errors="replace").read()
    notp = text.count("module not patched")
    kernels = [int(k) for k in re.findall(r'module patched.*?"kernels": (\d+)', text)]
    ok = patched is not None and patched >= 1 and failures == 0 and notp == 0
    row("module patched, no failure", ok,
        "gpuprobe.receiver.modules.patched %s (want >= 1), patch.failures %s (want 0); log: %d 'module patched' "
        "(kernels per module %s), %d 'module not patched'" % (patched, failures, len(kernels), kernels, notp))


def main(argv):
    if len(argv) not in (6, 7):
        print(__doc__, file=sys.stderr)
        return 2
    traces, metrics, log = argv[1:4]
    n, iters = int(argv[4]), int(argv[5])
    block = int(argv[6]) if len(argv) > 6 else 256
    for f in (traces, metrics, log):
        if not os.path.exists(f):
            row("exported files", False, "%s missing: the collector exported nothing (see the log)" % f)
    if not rows:
        spans, children = load_traces(traces)
        points = load_metrics(metrics)
        check_launches(spans, children, iters)
        check_thread_runs(points, n, iters)
        check_block_threads(points, n, iters, block)
        check_ring(spans, points, n, iters, block)
        check_patched(points, log)
    for r in rows:
        print("\t".join(r))
    return 1 if any(r[1] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
