#!/usr/bin/env python3
"""gputime_check.py MIX TENANTS.jsonl METRICS.json WALL_S [TRACES.json]:
per tenant, truth (launches × solo duration) against gpu.cuda.process.time
(its last point, by process.pid: the collector's shutdown settles every
window), both as shares of wall time, the error in points; the truth sum
against the attributed sum and the GPU's union (gpu.cuda.device.time), and
what the attribution left out (gpuprobe.receiver.gpu_time.cut, .unowned,
windows.dropped). With TRACES.json, the tenants' windows themselves (their
cuda.executing spans): their sum and union, and the overlaps between two
processes' windows at a hand-over (the later one starts before the earlier
ends and ends after it): on a time-sliced GPU a hand-over overlaps by a
slice or more, so many short ones say the processes' clocks disagree;
and per pair of tenants, how far apart their clocks are (half the
difference of the median hand-over gaps each way, a switch costing the
same both ways). NVML's per-process SM time (nvml.json beside METRICS.json,
gputime_nvml.py), when there, as a last column. With GT_FIXTURE=DIR, the windows also go to
DIR/MIX.json.gz, the recorded fixture receiver/internal/gputime's replay
test reads: {"mix", "wall_ns", "tenants": [{"kind", "launches",
"truth_ns"}], "kernels": [name, ...], "windows": [[tenant, kernel,
start_ns, end_ns], ...]}, times from
the first window's start, windows in start order.
Exit 1 when a share is off by more than 2 points or the sum exceeds wall."""
import gzip
import json
import os
import sys

mix, tenants_path, metrics_path, wall = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
traces_path = sys.argv[5] if len(sys.argv) > 5 else None
tenants = [json.loads(l) for l in open(tenants_path) if l.strip()]
got, device, selfm = {}, 0.0, {}


def value(dp):
    return dp.get("asDouble", float(dp.get("asInt", 0) or 0))


for line in open(metrics_path):
    if not line.strip():
        continue
    for rm in json.loads(line).get("resourceMetrics", []):
        pid = None
        for a in rm.get("resource", {}).get("attributes", []):
            if a["key"] == "process.pid":
                pid = int(a["value"].get("intValue", 0))
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                dps = m.get("sum", m.get("gauge", {})).get("dataPoints", [])
                if m["name"] == "gpu.cuda.process.time" and pid is not None:
                    got[pid] = sum(value(dp) for dp in dps)
                elif m["name"] == "gpu.cuda.device.time":
                    device = sum(value(dp) for dp in dps)
                elif m["name"] in ("gpuprobe.receiver.gpu_time.cut", "gpuprobe.receiver.gpu_time.late",
                                   "gpuprobe.receiver.gpu_time.unowned",
                                   "gpuprobe.receiver.windows.dropped", "gpuprobe.receiver.windows.missing"):
                    selfm[m["name"]] = sum(value(dp) for dp in dps)
nvml_path = os.path.join(os.path.dirname(metrics_path), "nvml.json")
nvml = {int(p): v for p, v in json.load(open(nvml_path)).items()} if os.path.exists(nvml_path) else {}
status, total, truth = 0, 0.0, 0.0
print(f"gputime {mix}: tenant kind launches truth% attributed% error(points) nvml%")
for t in tenants:
    a = got.get(t["pid"], 0.0)
    total += a
    truth += t["truth_s"]
    err = 100 * (a - t["truth_s"]) / wall
    flag = "" if abs(err) <= 2 else "  OVER 2 POINTS"
    status |= abs(err) > 2
    print(f"gputime {mix}: {t['pid']} {t['kind']} {t['launches']} {100 * t['truth_s'] / wall:.1f}% {100 * a / wall:.1f}% {err:+.2f} "
          f"{100 * nvml[t['pid']] / wall if t['pid'] in nvml else float('nan'):.1f}%{flag}")
if len(tenants) == 1 and "events_s" in tenants[0]:
    t = tenants[0]
    a = got.get(t["pid"], 0.0)
    r = a / t["events_s"] if t["events_s"] else float("nan")
    print(f"gputime {mix}: alone: attributed {a:.4f} s, its CUDA events {t['events_s']:.4f} s, ratio {r:.4f}"
          f"{'' if abs(r - 1) <= 0.01 else '  OVER 1%'}")
    status |= abs(r - 1) > 0.01
print(f"gputime {mix}: truth sum {truth:.2f} s, attributed sum {total:.2f} s, union {device:.2f} s, wall {wall:.2f} s"
      f"{'' if total <= wall else '  SUM OVER WALL'}")
print(f"gputime {mix}: cut {selfm.get('gpuprobe.receiver.gpu_time.cut', 0) / 1e9:.3f} s "
      f"(late {selfm.get('gpuprobe.receiver.gpu_time.late', 0) / 1e9:.3f} s), "
      f"unowned {selfm.get('gpuprobe.receiver.gpu_time.unowned', 0):.0f} windows, "
      f"windows dropped {selfm.get('gpuprobe.receiver.windows.dropped', 0):.0f}, "
      f"missing {selfm.get('gpuprobe.receiver.windows.missing', 0):.0f}")

if traces_path:
    pids = {t["pid"] for t in tenants}
    ws = []
    for line in open(traces_path):
        if not line.strip():
            continue
        for rs in json.loads(line).get("resourceSpans", []):
            pid = None
            for a in rs.get("resource", {}).get("attributes", []):
                if a["key"] == "process.pid":
                    pid = int(a["value"].get("intValue", 0))
            if pid not in pids:
                continue
            for ss in rs.get("scopeSpans", []):
                # The kernel's name is on the launch's root span.
                kname = {s["traceId"]: a["value"].get("stringValue", "")
                         for s in ss.get("spans", []) if not s.get("parentSpanId")
                         for a in s.get("attributes", []) if a["key"] == "cuda.kernel.name"}
                for s in ss.get("spans", []):
                    if s["name"] == "cuda.executing":
                        ws.append((int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]), pid,
                                   kname.get(s["traceId"], "")))
    ws.sort()
    fixture = os.environ.get("GT_FIXTURE")
    if fixture and ws:
        index = {t["pid"]: i for i, t in enumerate(tenants)}
        names = sorted({w[3] for w in ws})
        kidx = {n: i for i, n in enumerate(names)}
        t0 = ws[0][0]
        with gzip.open(os.path.join(fixture, f"{mix}.json.gz"), "wt") as f:
            json.dump({"mix": mix, "wall_ns": int(wall * 1e9),
                       "tenants": [{"kind": t["kind"], "launches": t["launches"], "truth_ns": int(t["truth_s"] * 1e9)}
                                   for t in tenants],
                       "kernels": names,
                       "windows": [[index[p], kidx[k], s - t0, e - t0] for s, e, p, k in ws],
                       "nvml_ns": [int(nvml.get(t["pid"], 0) * 1e9) for t in tenants]}, f, separators=(",", ":"))
    wsum = sum(w[1] - w[0] for w in ws)
    union, cur_s, cur_e = 0, None, None
    for s, e, *_ in ws:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                union += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        union += cur_e - cur_s
    # Hand-overs: the window that ends last so far against the next one
    # of another process.
    short, short_ns, long_, gaps = 0, 0, 0, []
    pair = {}  # (from pid, to pid) → hand-over gaps within ±0.5 ms
    last = None
    for s, e, pid, _ in ws:
        if last is not None and pid != last[2]:
            if abs(s - last[1]) < 500_000 and e > last[1]:
                pair.setdefault((last[2], pid), []).append(s - last[1])
            if s < last[1] < e:
                ov = last[1] - s
                if ov < 200_000:
                    short, short_ns = short + 1, short_ns + ov
                else:
                    long_ += 1
            elif s >= last[1]:
                gaps.append(s - last[1])
        if last is None or e > last[1]:
            last = (s, e, pid)
    gaps.sort()
    med = gaps[len(gaps) // 2] / 1e3 if gaps else float("nan")
    print(f"gputime {mix}: windows {len(ws)}, sum {wsum / 1e9:.2f} s, union {union / 1e9:.2f} s; "
          f"hand-over overlaps under 0.2 ms {short} ({short_ns / 1e6:.1f} ms), longer {long_}; "
          f"median gap at a hand-over {med:.1f} us")
    # A hand-over costs the same switch both ways, so half the difference
    # of the median gaps a→b and b→a is b's clock less a's.
    med_of = lambda g: sorted(g)[len(g) // 2]
    for (a, b), g in sorted(pair.items()):
        back = pair.get((b, a))
        if a < b and back and len(g) >= 20 and len(back) >= 20:
            print(f"gputime {mix}: clock of {b} less {a}: {(med_of(g) - med_of(back)) / 2e3:+.1f} us "
                  f"(hand-overs {len(g)} and {len(back)}, median gaps {med_of(g) / 1e3:+.1f} and {med_of(back) / 1e3:+.1f} us)")
sys.exit(1 if status or total > wall else 0)
