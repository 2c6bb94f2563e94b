#!/usr/bin/env python3
"""gputime_check.py MIX TENANTS.jsonl METRICS.json WALL_S: per tenant, truth
(launches × solo duration) against gpu.cuda.process.time (its latest point,
by process.pid), both as shares of wall time, the error in points, and the
sum of attributed time against wall. Exit 1 when a share is off by more
than 2 points or the sum exceeds wall."""
import json
import sys

mix, tenants_path, metrics_path, wall = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
tenants = [json.loads(l) for l in open(tenants_path) if l.strip()]
got = {}
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
                if m["name"] == "gpu.cuda.process.time" and pid is not None:
                    got[pid] = sum(dp.get("asDouble", 0) for dp in m["sum"]["dataPoints"])
status, total = 0, 0.0
print(f"gputime {mix}: tenant kind launches truth% attributed% error(points)")
for t in tenants:
    a = got.get(t["pid"], 0.0)
    total += a
    err = 100 * (a - t["truth_s"]) / wall
    flag = "" if abs(err) <= 2 else "  OVER 2 POINTS"
    status |= abs(err) > 2
    print(f"gputime {mix}: {t['pid']} {t['kind']} {t['launches']} {100 * t['truth_s'] / wall:.1f}% {100 * a / wall:.1f}% {err:+.2f}{flag}")
print(f"gputime {mix}: attributed sum {total:.2f} s, wall {wall:.2f} s{'' if total <= wall else '  SUM OVER WALL'}")
sys.exit(1 if status or total > wall else 0)
