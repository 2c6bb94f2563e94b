"""sanitizer_programs.py WORK DIR NCU_CSV: checks the SASS route's user
programs (scripts/gpu/sanitizer.sh, part programs) for one sassprog.py
workload. From DIR/traces.json: the launches of the workload's kernel
that ran patched (cuda.launch.window = patched_sass), L of them, all with
the same grid (G threads, blockDim.x B, gridDim.x X); no other kernel ran
patched. From DIR/metrics.json, exactly:
  sasshist per-thread counts  thread_runs{key 0}: G active threads, sum
                              G x L, min = max = L
  sasshist per-block counts   block_threads: keys 0..min(X, 1024)-1, each
                              B x L
  memcount (memcapture)       mem_counters loads and stores = L x ncu's
                              thread-level global load and store
                              instructions of one launch of the kernel
                              (predicated on; where ncu has no thread-level
                              count, 32 x its warp-level count: the
                              workloads' warps are full)
Prints one line per check; exits 1 if one failed."""
import csv
import sys

sys.path.insert(0, "scripts/gpu")
from lib_metrics import latest, load as load_metrics  # noqa: E402
from lib_traces import load, launch_spans  # noqa: E402

w, d, ncu_csv = sys.argv[1], sys.argv[2], sys.argv[3]
kernel = "vectorized_elementwise_kernel" if w == "add" else "add_k"
bad = 0


def row(name, ok, detail):
    global bad
    bad |= not ok
    print("sanitizer programs %s %-28s %s  %s" % (w, name, "ok" if ok else "FAIL", detail))


def iv(at, k):
    return int(at.get(k, {}).get("intValue", 0))


spans, _ = load(d + "/traces.json")
patched, other = [], set()
for s, at in launch_spans(spans):
    if at.get("cuda.launch.window", {}).get("stringValue") != "patched_sass":
        continue
    name = at.get("cuda.kernel.name", {}).get("stringValue", s["name"])
    if kernel in name:
        patched.append(at)
    else:
        other.add(name[:60])
grids = {tuple(iv(at, "cuda.%s.%s" % (g, a)) for g in ("grid", "block") for a in "xyz") for at in patched}
L = len(patched)
row("patched launches", L > 0 and len(grids) == 1 and not other,
    "%d launches of %s patched, grids %s; other kernels patched: %s" % (L, kernel, sorted(grids), sorted(other) or "none"))
if L == 0 or len(grids) != 1:
    sys.exit(1)
gx, gy, gz, bx, by, bz = grids.pop()
G, B, X = gx * gy * gz * bx * by * bz, bx * by * bz, gx

points = load_metrics(d + "/metrics.json")
s = [p for p in latest(points, "gpuprobe.map.thread_runs.value") if p["attrs"].get("gpuprobe.map.key") == 0]
if len(s) != 1:
    row("sasshist per-thread counts", False, "%d series of thread_runs with key 0" % len(s))
else:
    p = s[0]["point"]
    count, total = int(p.get("count", 0)), float(p.get("sum", -1))
    lo, hi = p.get("min"), p.get("max")
    row("sasshist per-thread counts", count == G and total == G * L and lo in (None, L) and hi in (None, L),
        "%d threads counted (want G=%d), sum %.0f (want G x L = %d), min %s max %s (want %d)" % (count, G, total, G * L, lo, hi, L))
got = {p["attrs"].get("gpuprobe.map.key"): p["value"] for p in latest(points, "gpuprobe.map.block_threads.value")}
want = set(range(min(X, 1024)))
off = sorted(k for k, v in got.items() if v != B * L)
row("sasshist per-block counts", set(got) == want and not off,
    "%d keys (want %d), %d with a value != B x L = %d%s" % (len(got), len(want), len(off), B * L,
                                                           " (key %s = %s)" % (off[0], got[off[0]]) if off else ""))

# ncu: one launch of the kernel, thread-level global loads and stores.
per = {}
rows = list(csv.reader(l for l in open(ncu_csv) if l.startswith('"')))
hdr = rows[0] if rows else []
for r in rows[1:]:
    rec = dict(zip(hdr, r))
    v = rec.get("Metric Value", "").replace(",", "")
    if kernel in rec.get("Kernel Name", "") and v.replace(".", "", 1).isdigit():
        per.setdefault(rec["Metric Name"], float(v))


def thread_count(op):
    t = per.get("smsp__sass_thread_inst_executed_op_global_%s_pred_on.sum" % op)
    w = per.get("smsp__sass_inst_executed_op_global_%s.sum" % op)
    return t if t is not None else (None if w is None else 32 * w)


ld, st = thread_count("ld"), thread_count("st")
mc = {p["attrs"].get("gpuprobe.map.key"): p["value"] for p in latest(points, "gpuprobe.map.mem_counters.value")}
if ld is None or st is None:
    row("memcount vs ncu", False, "ncu gave no thread-level counts for %s (see %s)" % (kernel, ncu_csv))
else:
    row("memcount vs ncu", mc.get(0) == ld * L and mc.get(1) == st * L,
        "loads %s stores %s (bytes %s, %s); ncu per launch %d loads %d stores x L=%d = %d, %d (ncu: %s)"
        % (mc.get(0), mc.get(1), mc.get(2), mc.get(3), ld, st, L, ld * L, st * L,
           ", ".join("%s=%d" % (k.split("__")[1], v) for k, v in sorted(per.items()))))
sys.exit(bad)
