"""lib_traces: reads the traces the collector's file exporter wrote (one
OTLP/JSON document per line), for the GPU scripts' checks
(sampling.sh, hostwait.sh)."""
import json


def load(path):
    """Returns (spans, children): every span as a (span, attributes by key)
    pair, and per parent span id the names of its children."""
    spans, children = [], {}
    for line in open(path):
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    at = {a["key"]: a["value"] for a in s.get("attributes", [])}
                    spans.append((s, at))
                    children.setdefault(s.get("parentSpanId"), []).append(s["name"])
    return spans, children


def launch_spans(spans):
    """The shim's launch spans: those with a launch id that are not host
    calls."""
    return [(s, at) for s, at in spans if "cuda.launch.id" in at and "cuda.api.category" not in at]
