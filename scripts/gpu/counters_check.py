"""counters_check.py: gpuprobe-counters' samples against Nsight Compute.

  counters_check.py SAMPLES.json PHASES.json BASELINE.json NCU.csv
  counters_check.py cost SAMPLES.json PHASES.json BASELINE.json
  counters_check.py sweep CONFIG SAMPLES.json PHASES.json BASELINE.json
  counters_check.py sweep-header

SAMPLES.json is the sampler's output (header, samples, end line), taken
while testdata/cuda/counters/phases.cu ran its phases (PHASES.json: one
line per phase, one kernel each, CLOCK_REALTIME bounds); BASELINE.json the
same phases without the sampler; NCU.csv `ncu --csv --print-units base`
of the same kernels with the same metrics.

Prints: the clock the sample timestamps are in and how they map onto
CLOCK_REALTIME; the sampler's cost (its CPU, the workload's launches per
second with and without it); whether the sampler sees the other process's
kernels (activity in the phases against the idle gaps between them); then
one row per kernel and metric: the sampler's time-weighted mean over the
middle 80% of the kernel's phase, ncu's mean over its launches, their
ratio. Exit status 1 when the sampler saw nothing, or when a compared value
(one ncu measures at >= 5% of the metric's largest value over the kernels)
is off by more than 10%. `cost` prints only the cost lines (a run at
another interval). Metric names are compared without a "name:" prefix
(ncu knows "pmsampling:x" as "x"). `sweep` prints the cost of one
configuration of counters.sh's CT_SWEEP as one row of a table whose
header `sweep-header` prints: samples and the share of the run they cover,
decodes, decode time (mean and longest call), evaluation and writing per
sample, overflows, the sampler's CPU, RSS and image size, the workload's
launch rate against plain (the lowest of the kernels, then each).
"""
import csv
import json
import re
import sys

TRIM = 0.10  # of each phase, at each end: launch ramp and clock mapping error
TOL = 0.10


def load_lines(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def clock_map(meta, first):
    """The offset that maps a sample timestamp onto CLOCK_REALTIME, and the
    domain it was found in: the header clock reading closest to the first
    sample (sampling starts right after the header is read)."""
    c = meta["clock"]
    cands = {"realtime": 0, "monotonic": c["realtime_ns"] - c["monotonic_ns"]}
    if "cupti_ns" in c:
        cands["cupti"] = c["realtime_ns"] - c["cupti_ns"]
    best = min(cands, key=lambda k: abs(first + cands[k] - c["realtime_ns"]))
    return best, cands[best], (first + cands[best] - c["realtime_ns"]) / 1e6


def weighted(samples, a, b, k):
    """Time-weighted mean of metric k over [a, b) and the time covered."""
    tot = cov = 0.0
    for s in samples:
        o = min(s["end"], b) - max(s["start"], a)
        if o > 0 and s["v"][k] is not None:
            tot += s["v"][k] * o
            cov += o
    return (tot / cov if cov else None), cov


def bare(metric):
    """metric without a "name:" prefix."""
    return metric.split(":", 1)[-1]


def ncu_values(path):
    """{(kernel, metric): [values]} from ncu's CSV (rows after '"ID"')."""
    vals = {}
    with open(path) as f:
        lines = [l for l in f if not l.startswith("==")]
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return vals
    for row in csv.DictReader(lines[start:]):
        name = re.split(r"[(<]", row.get("Kernel Name", ""))[0].strip()
        name = name.split()[-1] if name else name
        try:
            v = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        vals.setdefault((name, bare(row["Metric Name"])), []).append(v)
    return vals


def launch_rates(phases, base):
    """[(kernel, launches sampled, launches plain, launch rate sampled / plain)]."""
    out = []
    for p in phases:
        b = base.get(p["kernel"])
        if b:
            r = (p["launches"] / (p["end_realtime_ns"] - p["start_realtime_ns"])) / (
                b["launches"] / (b["end_realtime_ns"] - b["start_realtime_ns"]))
            out.append((p["kernel"], p["launches"], b["launches"], r))
    return out


def timings(end):
    """Mean and longest decode, evaluation per sample (µs); None for an end
    line written before the sampler timed them."""
    if "eval_ns_total" not in end:
        return None
    return (end["decode_ns_total"] / 1e3 / max(end["decodes"], 1), end["decode_ns_max"] / 1e3,
            end["eval_ns_total"] / 1e3 / max(end["samples"], 1))


def cost(meta, end, phases, base):
    """The sampler's CPU and the workload's launch rate against plain."""
    iv = meta["interval_ns"]
    if end:
        t = timings(end)
        print("counters cost @%dns: %d samples in %.1f s, %d decodes, %d overflows, sampler cpu %.3f s "
              "(%.2f%% of a core), max rss %d KiB%s" % (
                  iv, end["samples"], end["wall_s"], end["decodes"], end["overflows"], end["cpu_s"],
                  100 * end["cpu_s"] / max(end["wall_s"], 1e-9), end["max_rss_kib"],
                  ", decode %.0f us mean, %.0f us longest, evaluation %.1f us a sample" % t if t else ""))
    for kernel, sampled, plain, r in launch_rates(phases, base):
        print("counters cost @%dns: %-8s %6d launches sampled, %6d plain: launch rate %.4fx plain"
              % (iv, kernel, sampled, plain, r))


SWEEP_COLS = "%-24s %8s %6s %7s %9s %9s %8s %6s %7s %6s %8s %9s  %s"


def sweep_header():
    print(SWEEP_COLS % ("interval:decode:max:hw", "samples", "cover", "decodes", "dec_us", "dec_max", "eval_us",
                        "overfl", "cpu_s", "core", "rss_MiB", "image_MiB", "launch rate vs plain: lowest (each)"))


def sweep(config, meta, end, phases, base):
    """One row: the cost of the sampler at one configuration."""
    if not end:
        print(SWEEP_COLS % (config, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "no end line"))
        return
    mean, longest, ev = timings(end) or (float("nan"),) * 3
    wall = max(end["wall_s"], 1e-9)
    rates = launch_rates(phases, base)
    rate = ("%.4f (%s)" % (min(r for *_, r in rates), " ".join("%s %.4f" % (k, r) for k, _, _, r in rates))
            if rates else "-")
    print(SWEEP_COLS % (config, end["samples"], "%.0f%%" % (100 * end["samples"] * meta["interval_ns"] / 1e9 / wall),
                        end["decodes"], "%.0f" % mean, "%.0f" % longest, "%.1f" % ev, end["overflows"],
                        "%.3f" % end["cpu_s"], "%.0f%%" % (100 * end["cpu_s"] / wall), "%.0f" % (end["max_rss_kib"] / 1024),
                        "%.2f" % (end.get("image_bytes", 0) / 2**20), rate))


def main():
    if sys.argv[1] == "sweep-header":
        sweep_header()
        return 0
    if sys.argv[1] in ("cost", "sweep"):
        args = sys.argv[2:] if sys.argv[1] == "cost" else sys.argv[3:]
        lines = load_lines(args[0])
        meta = next(l for l in lines if l.get("type") == "meta")
        end = next((l for l in lines if l.get("type") == "end"), {})
        phases, base = load_lines(args[1]), {p["kernel"]: p for p in load_lines(args[2])}
        if sys.argv[1] == "cost":
            cost(meta, end, phases, base)
        else:
            sweep(sys.argv[2], meta, end, phases, base)
        return 0
    lines = load_lines(sys.argv[1])
    phases = load_lines(sys.argv[2])
    base = {p["kernel"]: p for p in load_lines(sys.argv[3])}
    ncu = ncu_values(sys.argv[4])
    meta = next(l for l in lines if l.get("type") == "meta")
    end = next((l for l in lines if l.get("type") == "end"), {})
    samples = [l for l in lines if l.get("type") == "sample"]
    fails = []
    if not samples:
        print("counters: no sample written")
        print("0 passed, 1 failed (gpu-counters)")
        return 1
    dom, off, lag = clock_map(meta, samples[0]["start"])
    for s in samples:
        s["start"] += off
        s["end"] += off
    durs = sorted(s["end"] - s["start"] for s in samples)
    print("counters clock: sample timestamps in the %s domain (offset to realtime %d ns); first sample %.1f ms "
          "after the header; sample length median %.1f us (interval %d ns)"
          % (dom, off, lag, durs[len(durs) // 2] / 1e3, meta["interval_ns"]))
    cost(meta, end, phases, base)

    names, keys = meta["metrics"], meta["keys"]
    # Visibility: the kernels run in another process; the first metric (SM
    # throughput or activity) must be well above its idle level.
    gaps = []
    for prev, p in zip([None] + phases, phases):
        a = (prev["end_realtime_ns"] if prev else p["start_realtime_ns"] - 3e8) + 5e7
        gaps.append((a, p["start_realtime_ns"] - 5e7))
    idle = [weighted(samples, a, b, 0)[0] for a, b in gaps if b > a]
    idle = [v for v in idle if v is not None]
    idle_v = sum(idle) / len(idle) if idle else 0.0
    rows = []
    busy = []
    for p in phases:
        a, b = p["start_realtime_ns"], p["end_realtime_ns"]
        a, b = a + TRIM * (b - a), b - TRIM * (b - a)
        for k, m in enumerate(names):
            v, cov = weighted(samples, a, b, k)
            nv = ncu.get((p["kernel"], bare(m)))
            rows.append([p["kernel"], keys[k] or m, m, v, sum(nv) / len(nv) if nv else None, cov])
            if k == 0 and v is not None:
                busy.append(v)
    seen = bool(busy) and min(busy) > max(2 * idle_v, idle_v + 1)
    print("counters visibility: %s idle %.2f, in the phases %s: %s" % (
        names[0], idle_v, " ".join("%.2f" % v for v in busy),
        "the sampler sees the workload's kernels" if seen else "NOT above idle: the sampler does not see them"))
    if not seen:
        fails.append("visibility")

    peak = {}
    for r in rows:
        if r[4] is not None:
            peak[r[2]] = max(peak.get(r[2], 0.0), abs(r[4]))
    print()
    print("%-8s %-28s %14s %14s %8s  %s" % ("kernel", "metric", "sampler", "ncu", "ratio", "verdict"))
    ok = bad = 0
    for kern, key, m, v, nv, cov in rows:
        if v is None or nv is None:
            verdict, ratio = ("no samples in the window" if v is None else "ncu has no value"), "-"
        else:
            ratio = "%.3f" % (v / nv) if nv else "-"
            if abs(nv) < 0.05 * peak.get(m, 0) or nv == 0:
                verdict = "small (not compared)"
            elif abs(v / nv - 1) <= TOL:
                verdict, ok = "within 10%", ok + 1
            else:
                verdict, bad = "OFF by more than 10%", bad + 1
                fails.append("%s/%s" % (kern, key))
        fmt = lambda x: "-" if x is None else "%.4g" % x
        print("%-8s %-28s %14s %14s %8s  %s" % (kern, key[:28], fmt(v), fmt(nv), ratio, verdict))
    print()
    print("counters vs ncu: %d within 10%%, %d off%s" % (ok, bad, (": " + ", ".join(fails)) if fails else ""))
    print("%d passed, %d failed (gpu-counters)" % (0 if fails else 1, 1 if fails else 0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
