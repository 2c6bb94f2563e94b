"""lib_metrics: reads the metrics the collector's file exporter wrote (one
OTLP/JSON document per line), for the GPU scripts' checks
(programs.sh); lib_traces.py reads the traces."""
import json


def value(v):
    """The Python value of an OTLP/JSON AnyValue (ints are strings there)."""
    if "intValue" in v:
        return int(v["intValue"])
    for k in ("doubleValue", "stringValue", "boolValue"):
        if k in v:
            return v[k]
    return v


def attrs(kvs):
    """A key/value list as a dict of Python values."""
    return {a["key"]: value(a.get("value", {})) for a in kvs or []}


def load(path):
    """Every data point as a dict: name, kind (sum, gauge,
    exponentialHistogram, histogram), attrs, resource (attribute dicts),
    time (ns), value (number points: the int or float) and point (the raw
    JSON point)."""
    out = []
    for line in open(path):
        if not line.strip():
            continue
        for rm in json.loads(line).get("resourceMetrics", []):
            res = attrs(rm.get("resource", {}).get("attributes"))
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for kind in ("sum", "gauge", "exponentialHistogram", "histogram"):
                        if kind not in m:
                            continue
                        for p in m[kind].get("dataPoints", []):
                            v = None
                            if "asInt" in p:
                                v = int(p["asInt"])
                            elif "asDouble" in p:
                                v = float(p["asDouble"])
                            out.append({"name": m["name"], "kind": kind, "attrs": attrs(p.get("attributes")),
                                        "resource": res, "time": int(p.get("timeUnixNano", 0)), "value": v,
                                        "point": p})
    return out


def latest(points, name):
    """The newest point of each series (attribute set) of metric name, by
    the attributes as a sorted tuple of items. Cumulative series only grow,
    so the newest point is the final value."""
    last = {}
    for p in points:
        if p["name"] != name:
            continue
        k = tuple(sorted(p["attrs"].items()))
        if k not in last or p["time"] >= last[k]["time"]:
            last[k] = p
    return list(last.values())
