"""inference_check.py: the client and the check of scripts/gpu/inference.sh.

  inference_check.py send URL N HEALTH PREFIX
      N requests POST URL/infer (seeds 0..N-1, batch 8, 4 at a time) with
      HEALTH GET URL/healthz alongside, then POST URL/shutdown. Writes
      PREFIX.outputs (each request's output, by seed: compared between
      the plain run and the one under gpuprobe), PREFIX.spans (seed and
      traceresponse) and PREFIX.ms (the median request time).
  inference_check.py check TRACES KERNELS SPANS WARMUP HEALTH
      From the collector's file export TRACES (lib_traces.load), the
      kernels of one request and of one health check as the plain run
      counted them (KERNELS, inference_server.py --kernel-count) and the
      requests' spans (SPANS): every request span was exported; its trace
      holds exactly that many launch spans, all children of the request
      span, each with its device phases (cuda.queued, cuda.executing) and
      gpuprobe.parent.source thread; every launch outside the requests
      (WARMUP passes, HEALTH checks) that was kept is the root of a trace
      of its own, and at least one was kept.
"""
import collections
import json
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from lib_traces import launch_spans, load  # noqa: E402


def _call(url, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.headers.get("traceresponse"), json.loads(r.read())


def send(url, n, health, prefix):
    seeds = list(range(n))
    outs, spans, ms, errs = {}, {}, [], []
    mu = threading.Lock()

    def worker():
        while True:
            with mu:
                if not seeds:
                    return
                seed = seeds.pop(0)
            t = time.perf_counter()
            try:
                tr, out = _call(url + "/infer", {"seed": seed, "batch": 8})
            except OSError as e:
                with mu:
                    errs.append("request %d: %s" % (seed, e))
                continue
            with mu:
                ms.append((time.perf_counter() - t) * 1e3)
                outs[seed], spans[seed] = out, tr

    def checks():
        for _ in range(health):
            try:
                _call(url + "/healthz")
            except OSError as e:
                with mu:
                    errs.append("health check: %s" % e)

    ts = [threading.Thread(target=worker) for _ in range(4)] + [threading.Thread(target=checks)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _call(url + "/shutdown", {})
    with open(prefix + ".outputs", "w") as f:
        for seed in sorted(outs):
            f.write("%d %s\n" % (seed, json.dumps(outs[seed], sort_keys=True)))
    with open(prefix + ".spans", "w") as f:
        for seed in sorted(spans):
            f.write("%d %s\n" % (seed, spans[seed]))
    with open(prefix + ".ms", "w") as f:
        f.write("%.3f\n" % (statistics.median(ms) if ms else 0))
    for e in errs:
        print("inference client: " + e)
    return 1 if errs or len(outs) != n else 0


def _str(at, key):
    return at.get(key, {}).get("stringValue")


def check(traces, kernels, spans_path, warmup, health):
    spans, children = load(traces)
    kc = json.load(open(kernels))
    want = kc["kernels_per_request"]
    launched_outside = int(warmup) * want + int(health) * kc["kernels_per_health"]
    byid = {s["spanId"]: s for s, _ in spans}
    reqs = []
    for line in open(spans_path):
        seed, tr = line.split()
        _, tid, sid, _ = tr.split("-")
        reqs.append((int(seed), tid, sid))
    fails = []
    launches = launch_spans(spans)
    by_trace = collections.defaultdict(list)
    for s, at in launches:
        by_trace[s["traceId"]].append((s, at))
    req_traces = {tid for _, tid, _ in reqs}
    counts, seqs, reasons, phases = collections.Counter(), collections.Counter(), collections.Counter(), collections.Counter()
    for seed, tid, sid in reqs:
        r = byid.get(sid)
        if r is None or r["name"] != "POST /infer" or r["traceId"] != tid:
            fails.append("request %d: its span %s of trace %s was not exported" % (seed, sid, tid))
            continue
        ls = by_trace.get(tid, [])
        under = [(s, at) for s, at in ls if s.get("parentSpanId") == sid]
        counts[len(under)] += 1
        if len(under) != len(ls):
            fails.append("request %d: %d of its trace's %d launch spans are not children of the request span"
                         % (seed, len(ls) - len(under), len(ls)))
        if len(under) != want:
            fails.append("request %d: %d launch spans under its span, the plain run counted %d kernels"
                         % (seed, len(under), want))
        seqs[tuple(sorted(s["name"] for s, _ in under))] += 1
        for s, at in under:
            reasons[_str(at, "gpuprobe.sampling.reason")] += 1
            kids = children.get(s["spanId"], [])
            for p in ("cuda.launch_call", "cuda.queued", "cuda.executing"):
                phases[p] += p in kids
            if "cuda.executing" not in kids or "cuda.queued" not in kids:
                fails.append("request %d: launch %s has phases %s, no device window" % (seed, s["name"][:80], kids))
            if _str(at, "gpuprobe.parent.source") != "thread":
                fails.append("request %d: launch %s has gpuprobe.parent.source %s"
                             % (seed, s["name"][:80], _str(at, "gpuprobe.parent.source")))
    outside = [(s, at) for s, at in launches if s["traceId"] not in req_traces]
    own, out_reasons = 0, collections.Counter()
    for s, at in outside:
        out_reasons[_str(at, "gpuprobe.sampling.reason")] += 1
        if s.get("parentSpanId") or len(by_trace[s["traceId"]]) != 1 or _str(at, "gpuprobe.parent.source"):
            fails.append("outside launch %s: parent %r, %d launches in its trace"
                         % (s["name"][:80], s.get("parentSpanId"), len(by_trace[s["traceId"]])))
        else:
            own += 1
    if not outside:
        fails.append("no launch outside the requests was kept: the warm-up's and health checks' kernels are missing")
    if len(seqs) > 1:
        fails.append("the requests launched %d different sets of kernels (the model is deterministic)" % len(seqs))
    n = len(reqs)
    print("inference: %d requests, %d kernels each (plain run's count); launch spans per request span %s; "
          "request launches by sampling reason %s; phases %s"
          % (n, want, dict(counts), dict(reasons), dict(phases)))
    if len(outside) > launched_outside:
        fails.append("%d launch spans outside the requests, more than the %d launches there" % (len(outside), launched_outside))
    print("inference: %d of the %d launches outside the requests kept (kernel bound), %d of them roots of traces "
          "of their own; by reason %s" % (len(outside), launched_outside, own, dict(out_reasons)))
    if seqs:
        print("inference: a request's kernels: %s" % ", ".join(sorted(set(next(iter(seqs)))))[:600])
    for f in fails[:20]:
        print("  FAIL " + f)
    print("inference: every request trace holds its kernels under the request span, outside launches apart: %s"
          % ("1 passed, 0 failed" if not fails else "0 passed, 1 failed"))
    return 1 if fails else 0


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "send":
        return send(sys.argv[2].rstrip("/"), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    if len(sys.argv) == 7 and sys.argv[1] == "check":
        return check(*sys.argv[2:7])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
