"""examples_check: examples.sh's check of one bpftime GPU example's run
under the real collector: what its exported OTLP JSON must show.

  python3 scripts/gpu/examples_check.py EXAMPLE DIR

DIR holds metrics.json, traces.json, logs.json and collector.log (the
collector's file exporters and log) and run.json, what examples.sh ran:
{"n": threads of a vectorAdd launch, "iters": launches, "block": 256,
"gemm_n": the sgemm sample's N, "t0_ns"/"t1_ns": CLOCK_REALTIME around the
app's run, "uid": the user examples.sh ran as}. Prints one line,
"ok|FAIL|skip<TAB>detail", and exits 1 on FAIL. skip: the example needs
host programs (uprobes) and the collector could not load them without
root; the row says so instead of passing. What each example must show is
in EXAMPLES below and in examples.sh's header."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_metrics import attrs, load as load_metrics, latest  # noqa: E402
from lib_traces import load as load_traces  # noqa: E402

MAX_SMS = 256  # smhist.c's MAX_SMS, smhash.c's SM id bound


class Run:
    """What one example's run exported, and the run's parameters."""

    def __init__(self, d):
        self.dir = d
        with open(os.path.join(d, "run.json")) as f:
            p = json.load(f)
        self.n, self.iters, self.block = p["n"], p["iters"], p.get("block", 256)
        self.gemm_n, self.uid = p.get("gemm_n", 256), p.get("uid", -1)
        self.t0, self.t1 = p.get("t0_ns", 0), p.get("t1_ns", 0)
        self.grid = self.n // self.block
        self.points = load_metrics(os.path.join(d, "metrics.json"))
        tp = os.path.join(d, "traces.json")
        self.spans = load_traces(tp)[0] if os.path.exists(tp) else []
        self.log = open(os.path.join(d, "collector.log"), errors="replace").read()

    def array(self, m, field="value"):
        """The newest value per gpuprobe.map.key of map m's field (keys
        whose value is 0 are not exported: absent means 0)."""
        return {p["attrs"].get("gpuprobe.map.key"): p["value"]
                for p in latest(self.points, "gpuprobe.map.%s.%s" % (m, field)) if p["kind"] in ("sum", "gauge")}

    def hist(self, m, key, field="value"):
        """(count, sum, min, max) of the per-thread histogram of map m's
        key, or None."""
        s = [p for p in latest(self.points, "gpuprobe.map.%s.%s" % (m, field))
             if p["attrs"].get("gpuprobe.map.key") == key and p["kind"] == "exponentialHistogram"]
        if len(s) != 1:
            return None
        q = s[0]["point"]
        return int(q.get("count", 0)), float(q.get("sum", 0)), q.get("min"), q.get("max")

    def one(self, name):
        s = latest(self.points, name)
        return s[0]["value"] if len(s) == 1 else None

    def logs(self):
        """Bodies of the exported log records."""
        out, p = [], os.path.join(self.dir, "logs.json")
        if not os.path.exists(p):
            return out
        for line in open(p):
            if not line.strip():
                continue
            for rl in json.loads(line).get("resourceLogs", []):
                for sl in rl.get("scopeLogs", []):
                    for r in sl.get("logRecords", []):
                        out.append(r.get("body", {}).get("stringValue", ""))
        return out

    def ring(self, m):
        """The events of map m's batch spans, as (attribute dict, time)."""
        evs = []
        for s, _ in self.spans:
            if s["name"] == m:
                for e in s.get("events", []):
                    evs.append((attrs(e.get("attributes")), int(e.get("timeUnixNano", 0))))
        return evs

    def host_attached(self, program):
        """Whether the collector attached host program `program`."""
        return re.search(r'host program attached.*"program": "%s"' % re.escape(program), self.log) is not None


def want(got, exp):
    """'' when dict got equals exp (0 for absent keys), else what differs."""
    bad = ["key %s = %s (want %s)" % (k, got.get(k, 0), v) for k, v in sorted(exp.items()) if got.get(k, 0) != v]
    extra = ["key %s = %s (want 0)" % (k, v) for k, v in sorted(got.items(), key=lambda kv: str(kv[0]))
             if k not in exp and v != 0]
    return "; ".join(bad + extra)


def verdict(problems, detail):
    return ("FAIL", "%s: %s" % ("; ".join(problems), detail)) if problems else ("ok", detail)


def hist_is(r, m, key, count, total, lo=None, hi=None):
    h = r.hist(m, key)
    if h is None:
        return "no per-thread histogram of %s key %d" % (m, key)
    c, s, mn, mx = h
    bad = c != count or s != float(total) or (lo is not None and mn not in (None, lo)) or \
        (hi is not None and mx not in (None, hi))
    return "%s[%d]: %d threads, sum %.0f, min %s, max %s (want %d, %d, %s, %s)" % (
        m, key, c, s, mn, mx, count, total, lo, hi) if bad else ""


def threadhist(r):
    t, i = r.n, r.iters
    p = [x for x in [hist_is(r, "thread_runs", 0, t, t * i, i, i)] if x]
    blocks = r.array("block_threads")
    d = want(blocks, {b: r.block * i for b in range(min(r.grid, 1024))})
    if d:
        p.append("block_threads: " + d)
    return verdict(p, "thread_runs{key=0}: %s threads ran %d times each (want %d x %d); block_threads: %d blocks x %d"
                   % (t, i, t, i, len(blocks), r.block * i))


def ring_check(r, m, fields, when):
    evs = r.ring(m)
    dropped = r.one("gpuprobe.receiver.records.dropped")
    offered = r.n * r.iters
    p = []
    if not evs or dropped is None or len(evs) + dropped != offered:
        p.append("%d delivered + %s dropped != %d" % (len(evs), dropped, offered))
    bad = [a for a, _ in evs if any(not isinstance(a.get(k), int) or not 0 <= a[k] < lim for k, lim in fields.items())]
    if bad:
        p.append("%d records with ids outside the grid, e.g. %s" % (len(bad), bad[0]))
    # 1 s of clock slack before the run; after it, up to the final drain.
    late = [ts for _, ts in evs if r.t0 and not r.t0 - 10**9 <= ts <= r.t1 + 3 * 10**9]
    if late:
        p.append("%d records timed outside the run (e.g. %d, run %d..%d)" % (len(late), late[0], r.t0, r.t1))
    return verdict(p, "'%s' ring: %d %s records delivered + %s dropped = N x ITERS = %d, ids inside the grid, "
                   "times inside the run" % (m, len(evs), when, dropped, offered))


def kernelretsnoop(r):
    return ring_check(r, "exits", {"block_x": r.grid, "block_y": 1, "block_z": 1, "thread_x": r.block,
                                   "thread_y": 1, "thread_z": 1, "lane_id": 32, "sm_id": 1024}, "exit")


def kernel_trace(r):
    return ring_check(r, "entries", {"block_x": r.grid, "block_y": 1, "block_z": 1, "thread_x": r.block,
                                     "thread_y": 1, "thread_z": 1}, "entry")


def cuda_counter(r):
    i, t = r.iters, r.n
    s = r.array("cc_stats")
    p = []
    d = want({k: v for k, v in s.items() if k != 2}, {0: i, 1: t * i})
    if d:
        p.append("cc_stats: " + d)
    total, wall = s.get(2, 0), max(r.t1 - r.t0, 0)
    if not 0 < total <= wall:
        p.append("cc_stats[2] (witness time) %s ns, want in (0, %d] (the run's wall time)" % (total, wall))
    logs = r.logs()
    ent = sum(1 for b in logs if b.startswith("Entered vectorAdd"))
    ext = [b for b in logs if b.startswith("Exited vectorAdd duration=")]
    if ent != i or len(ext) != i:
        p.append("log records: %d 'Entered', %d 'Exited' (want %d each)" % (ent, len(ext), i))
    return verdict(p, "calls %s, exits %s (want %d, %d), witness time %s ns over %d calls; %d Entered/%d Exited "
                   "log records, e.g. %r" % (s.get(0), s.get(1), i, t * i, total, i, ent, len(ext),
                                             ext[0] if ext else None))


def mem_trace(r):
    t = r.n * r.iters
    pts = latest(r.points, "gpuprobe.map.mem_counters.value")
    pids = sorted({p["attrs"].get("process.pid") for p in pts})
    d = want(r.array("mem_counters"), {0: 2 * t, 1: t, 2: 8 * t, 3: 4 * t})
    p = ["mem_counters: " + d] if d else []
    if not pids or None in pids:
        p.append("series without process.pid: %s" % pids)
    return verdict(p, "per process %s: loads 2 x N x ITERS = %d, stores %d, bytes %d and %d"
                   % (pids, 2 * t, t, 8 * t, 4 * t))


def host_half(r, programs, check):
    """check(r) when every host program in programs attached; skip (not
    root) or FAIL (root) when one did not."""
    missing = [p for p in programs if not r.host_attached(p)]
    if not missing:
        return check(r)
    why = re.search(r'host programs? (?:not loaded|skipped|partly attached)[^\n]*', r.log)
    msg = "host program(s) %s not attached (%s)" % (missing, why.group(0)[:200] if why else "no log line")
    if r.uid != 0:
        return "skip", msg + "; uprobes need root: run examples.sh as root"
    return "FAIL", msg


def launchlate(r):
    def check(r):
        b = r.array("delay_log2_ns")
        total, want_n = sum(b.values()), r.grid * r.iters
        p = []
        if total != want_n:
            p.append("delay_log2_ns holds %d samples (want one per block per launch, %d)" % (total, want_n))
        if any(k is None or k > 34 for k in b):
            p.append("a bucket over 2^34 ns (17 s): %s" % sorted(b))
        last = r.array("launch_clock").get(1, 0)
        if not 0 < last < 17 * 10**9:
            p.append("launch_clock[1] (last delay) %s ns, want in (0, 17 s)" % last)
        return verdict(p, "launch delay log2 histogram %s, %d samples (blocks x launches); last delay %s ns"
                       % (dict(sorted(b.items())), total, last))
    return host_half(r, ["launch_host"], check)


def kernel_shared(r):
    def check(r):
        d = want(r.array("ks_count"), {0: r.n * r.iters, 1: r.iters})
        return verdict(["ks_count: " + d] if d else [], "ks_count {0: threads x launches %d, 1: launches %d} "
                       "(bpftime's value(0), value(1))" % (r.n * r.iters, r.iters))
    return host_half(r, ["ks_launches"], check)


def counter(m):
    def check(r):
        d = want(r.array(m), {0: r.n * r.iters, 1: r.iters})
        return verdict([m + ": " + d] if d else [], "%s {0: %d (every thread's exit), 1: %d (launches)}"
                       % (m, r.n * r.iters, r.iters))
    return check


def gpu_shared_map(r):
    t, i = r.n, r.iters
    w = t // 32
    p = []
    cnt = {k: 32 * (w // 32 + (k < w % 32)) * i for k in range(32)}
    for m, exp in (("gh_count", cnt), ("gh_res", {0: 32, 1: t * i - 32, 4: 4 * i, 5: 4 * i, 6: 1}),
                   ("gh_small", {k: 100 + k for k in range(1, 5)})):
        d = want(r.array(m), exp)
        if d:
            p.append(m + ": " + d)
    return verdict(p, "hash gh_count: 32 keys (one per warp slot), %d threads each; one insert per key, %d -EEXIST; "
                   "gh_small 4 keys, %d -E2BIG" % (cnt[0], t * i - 32, 4 * i))


def host_map_test(r):
    t, i, g = r.n, r.iters, r.grid
    p = [x for x in [hist_is(r, "hm_thread", 0, t, t * i, i, i), hist_is(r, "hm_thread", 1, t, t, 1, 1),
                     hist_is(r, "hm_thread", 2, t - 1, t * (t - 1) // 2, 1, t - 1)] if x]
    shared = {k: g * sum(1 for x in range(r.block) if x % 10 == k) * i for k in range(10)}
    shared[10] = 42
    d = want(r.array("hm_shared"), shared)
    if d:
        p.append("hm_shared: " + d)
    return verdict(p, "per thread (1512): call_count %d each, start seen 1, thread id 0..%d; shared (1513) by "
                   "tid.x %% 10: %s, 42 at key 10" % (i, t - 1, [shared[k] for k in range(10)]))


def threadscheduling(r):
    t = r.n * r.iters
    sms, warps, lanes = r.array("sm_threads"), r.array("sm_warps"), r.array("lane_threads")
    p = []
    if sum(sms.values()) != t or sum(warps.values()) != t // 32:
        p.append("threads over SMs %d (want %d), warps %d (want %d)" % (sum(sms.values()), t, sum(warps.values()), t // 32))
    d = want(lanes, {k: t // 32 for k in range(32)})
    if d:
        p.append("lane_threads: " + d)
    if not sms or len(sms) > min(r.grid, MAX_SMS) or any(k is None or k >= MAX_SMS for k in sms):
        p.append("active SMs %s" % sorted(sms))
    return verdict(p, "%d active SMs, %d threads and %d warps over them, %d threads on each of the 32 lanes"
                   % (len(sms), t, t // 32, t // 32))


def dynamic_hook(r):
    t = r.n * r.iters
    keys = r.array("smh_threads")
    p = []
    if sum(keys.values()) != t:
        p.append("(SM, warp) counts sum to %d (want %d)" % (sum(keys.values()), t))
    bad = [k for k in keys if k is None or k >> 8 >= MAX_SMS or k & 0xff >= 64]
    if bad:
        p.append("keys with SM >= %d or warp >= 64: %s" % (MAX_SMS, bad[:5]))
    d = want(r.array("smh_err"), {})
    if d:
        p.append("smh_err: " + d)
    over = r.one("gpuprobe.receiver.map.keys.over_limit")
    if over:
        p.append("%s keys over limits::max_map_keys" % over)
    sms = {k >> 8 for k in keys if k is not None}
    return verdict(p, "hash map: %d (SM, warp) keys on %d SMs, counts sum to N x ITERS = %d, no insert refused"
                   % (len(keys), len(sms), t))


def timing(threads):
    def check(r):
        t = threads(r) * r.iters
        b, tot = r.array("tt_log2_ns"), r.array("tt_total")
        p = []
        if sum(b.values()) != t or tot.get(1, 0) != t:
            p.append("histogram holds %d, tt_total[1] %s (want %d: every thread of every launch)"
                     % (sum(b.values()), tot.get(1), t))
        wall = max(r.t1 - r.t0, 1)
        if any(k is None or 2 ** k > wall for k in b):
            p.append("a bucket longer than the run (%d ns): %s" % (wall, sorted(b)))
        mean = tot.get(0, 0) / t if t else 0
        if not 0 < mean <= wall:
            p.append("mean %s ns" % mean)
        return verdict(p, "per-thread run time log2(ns) histogram %s over %d threads x launches, mean %.0f ns"
                       % (dict(sorted(b.items())), t, mean))
    return check


def cutlass(r):
    g = (r.gemm_n // 16) ** 2
    d = want(r.array("lc_counts"), {0: r.iters, 1: g * r.iters, 2: g * r.iters})
    return verdict(["lc_counts: " + d] if d else [], "sgemm launches %d, blocks run %d = grid %d x launches"
                   % (r.iters, g * r.iters, g))


def atomizer(r):
    g, i = r.grid, r.iters
    p = []
    for m, exp in (("sd_cfg", {0: 1, 1: r.block, 2: 3}), ("sd_acc", {0: 1000 + 3 * g * i, 1: g * i})):
        d = want(r.array(m), exp)
        if d:
            p.append(m + ": " + d)
    return verdict(p, "seeded config {enabled 1, every %d, weight 3} read by every thread: one selected thread "
                   "per block, acc {%d, %d}" % (r.block, 1000 + 3 * g * i, g * i))


EXAMPLES = {
    "threadhist": threadhist,
    "kernelretsnoop": kernelretsnoop,
    "cuda-counter": cuda_counter,
    "cudagraph": cuda_counter,
    "kernel_trace": kernel_trace,
    "mem_trace": mem_trace,
    "launchlate": launchlate,
    "launchlate-kernel-gpu-shared-map": launchlate,
    "threadhist-gpu-kernel-shared-map": kernel_shared,
    "gpu_shard_array": counter("sc_dev"),
    "gpu-plain-array": counter("sc_host"),
    "gpu_shared_map": gpu_shared_map,
    "host_map_test": host_map_test,
    "threadscheduling": threadscheduling,
    "threadscheduling_dynamic_hook": dynamic_hook,
    "per-thread-timing-dist": timing(lambda r: r.gemm_n * r.gemm_n),
    "perthreadRuntimeDist": timing(lambda r: r.n),
    "cutlass": cutlass,
    "atomizer": atomizer,
}


def main(argv):
    if len(argv) != 3 or argv[1] not in EXAMPLES:
        print(__doc__, file=sys.stderr)
        print("examples: %s" % " ".join(EXAMPLES), file=sys.stderr)
        return 2
    d = argv[2]
    miss = [f for f in ("run.json", "metrics.json", "collector.log") if not os.path.exists(os.path.join(d, f))]
    if miss:
        res, detail = "FAIL", "%s missing in %s: the collector exported nothing (see its log)" % (miss, d)
    else:
        res, detail = EXAMPLES[argv[1]](Run(d))
    print("%s\t%s" % (res, detail))
    return 1 if res == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
