"""sanitizer_check.py WORK DIR: checks one sassbench workload of
sanitizer.sh. Every launch of the run with every launch sampled must carry
the SASS route's window (cuda.launch.window = patched_sass) with every
thread of its grid observed; the output must equal the plain run's; prints
the cost of each configuration against plain and how far the probes'
windows lie from the driver's (CUPTI) windows."""
import json
import sys

sys.path.insert(0, "scripts/gpu")
from lib_metrics import load as load_metrics  # noqa: E402
from lib_traces import load, launch_spans  # noqa: E402

w, d = sys.argv[1], sys.argv[2]
plain = json.load(open("%s/%s-plain.json" % (d, w)))
bad = 0
ratios = []
for cfg in ("all", "rate", "off"):
    try:
        r = json.load(open("%s/%s-%s.json" % (d, w, cfg)))
    except Exception as e:  # the run failed: say so
        print("sanitizer %s %s: FAIL: no result (%s)" % (w, cfg, e))
        sys.exit(1)
    ratios.append("%s %.3fx" % (cfg, r["median_us"] / plain["median_us"]))
    if r["sha"] != plain["sha"]:
        print("sanitizer %s %s: FAIL: output differs from plain" % (w, cfg))
        bad = 1
spans, _ = load("%s/%s-traces.json" % (d, w))
ls = launch_spans(spans)
sass = [at for _, at in ls if at.get("cuda.launch.window", {}).get("stringValue") == "patched_sass"]


def iv(at, k):
    return int(at.get(k, {}).get("intValue", 0))


exact = 0
for at in sass:
    want = 1
    for a in ("x", "y", "z"):
        want *= iv(at, "cuda.grid." + a) * iv(at, "cuda.block." + a)
    exact += iv(at, "cuda.threads.observed") == want
# The probes' window of each patched launch against the kernel's time as
# CUDA events measured it in the same run (sassbench: one kernel an
# iteration after warm-up, so the median iteration is the main kernel).
exe = {}
for s, at in spans:
    if s["name"] == "cuda.executing":
        exe[s.get("parentSpanId")] = (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) / 1e3
win = sorted(exe[s["spanId"]] for s, at in ls if s["spanId"] in exe and
             at.get("cuda.launch.window", {}).get("stringValue") == "patched_sass")
allrun = json.load(open("%s/%s-all.json" % (d, w)))
# CUPTI's windows of the same kernels, from the run with the route off (a
# process that opted in has no CUPTI: the Sanitizer API holds its one
# subscriber, so the two are compared across processes).
ospans, _ = load("%s/%s-off-traces.json" % (d, w))
oexe = {}
for s, at in ospans:
    if s["name"] == "cuda.executing":
        oexe[s.get("parentSpanId")] = (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) / 1e3
cupti = sorted(oexe[s["spanId"]] for s, at in launch_spans(ospans) if s["spanId"] in oexe and
               at.get("cuda.launch.window", {}).get("stringValue") == "windows")
if win:
    med = win[len(win) // 2]
    cm = cupti[len(cupti) // 2] if cupti else float("nan")
    print("sanitizer %s windows: median patched_sass window %.1f us; CUPTI's window of the same launches with the route off %.1f us (%+.1f us, %d launches); CUDA events %.1f us in the same run"
          % (w, med, cm, med - cm, len(cupti), allrun["median_us"]))
names = {}
for _, at in ls:
    n = (at.get("cuda.kernel.name") or at.get("code.function.name") or {}).get("stringValue", "?")
    names[n[:60]] = names.get(n[:60], 0) + 1
off = {}
for p in load_metrics("%s/%s-metrics.json" % (d, w)):
    n = int(p["point"].get("count", 0))
    if p["name"] == "gpuprobe.receiver.windows.probe_offset" and n:
        k = (p["attrs"].get("gpuprobe.windows.edge"), p["attrs"].get("gpuprobe.windows.direction"))
        off[k] = (n, float(p["point"].get("sum", 0)) / n)  # cumulative: the last point wins
print("sanitizer %s: plain %.1f us; %s; %d launch spans, %d patched_sass, %d with every thread observed; offsets from CUPTI (edge, direction): %s; kernels %s"
      % (w, plain["median_us"], ", ".join(ratios), len(ls), len(sass), exact,
         {"%s/%s" % k: "n=%d mean=%.0f ns" % (v[0], v[1] * 1e9) for k, v in off.items()},
         dict(sorted(names.items(), key=lambda x: -x[1])[:4])))
if not sass or exact != len(sass) or len(sass) < len(ls) * 0.9:
    print("sanitizer %s: FAIL: want every launch patched_sass with every thread observed" % w)
    bad = 1
sys.exit(bad)
