"""probe-offset.py METRICS.json: the offsets of kernel_phases' windows
from the driver's (gpuprobe.receiver.windows.probe_offset), per edge and
direction, from a collector's file exporter (the two must agree
within the clock calibration's bound). The receiver needs
telemetry::in_pipeline: true (a self-metric: the file exporter of the
pipeline gets it only then)."""
import json
import sys

last = {}
for line in open(sys.argv[1]):
    for rm in json.loads(line).get("resourceMetrics", []):
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                if m["name"] != "gpuprobe.receiver.windows.probe_offset":
                    continue
                h = m.get("exponentialHistogram") or m.get("histogram")
                for p in h["dataPoints"]:
                    key = tuple(sorted((a["key"], list(a["value"].values())[0]) for a in p.get("attributes", [])))
                    last[key] = p
for key, p in sorted(last.items()):
    n = int(p.get("count", 0))
    print("probe_offset %s: %d launches, mean %.0f ns, min %.0f ns, max %.0f ns"
          % (dict(key), n, 1e9 * p.get("sum", 0) / max(n, 1), 1e9 * p.get("min", 0), 1e9 * p.get("max", 0)))
if not last:
    print("probe_offset: no data points")
