"""The OpenTelemetry SDK stand-in (otel_standin.py) calls span processors
as the SDK does, and its exporter posts what an OTLP receiver takes."""

import http.server
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import otel_standin as ot  # noqa: E402


class Recorder:
    """A span processor that logs each hook with what it saw."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_start(self, span, parent_context=None):
        cur = ot.trace.get_current_span().get_span_context()
        self.log.append((self.name, "start", span.name, span.get_span_context().span_id, cur.span_id,
                         parent_context, threading.get_ident()))

    def on_end(self, span):
        cur = ot.trace.get_current_span().get_span_context()
        self.log.append((self.name, "end", span.name, span.get_span_context().span_id, cur.span_id,
                         isinstance(span, ot.ReadableSpan), span.end_time is not None))

    def force_flush(self, timeout_millis=30000):
        return True

    def shutdown(self):
        self.log.append((self.name, "shutdown"))


class StandInTest(unittest.TestCase):
    def setUp(self):
        self.log = []
        self.p = ot.TracerProvider()
        self.p.add_span_processor(Recorder("a", self.log))
        self.p.add_span_processor(Recorder("b", self.log))
        ot.trace.set_tracer_provider(self.p)
        self.tracer = ot.trace.get_tracer("t")

    def test_order(self):
        # on_start before the span is current (the parent is), on_end after
        # it left the context, with a read-only ended copy; processors in
        # the order added.
        with self.tracer.start_as_current_span("outer") as outer:
            o = outer.get_span_context()
            with self.tracer.start_as_current_span("inner") as inner:
                i = inner.get_span_context()
                self.assertEqual(ot.trace.get_current_span(), inner)
        me = threading.get_ident()
        self.assertEqual(i.trace_id, o.trace_id)
        self.assertEqual(inner.parent.span_id, o.span_id)
        self.assertEqual([e[:5] for e in self.log], [
            ("a", "start", "outer", o.span_id, 0), ("b", "start", "outer", o.span_id, 0),
            ("a", "start", "inner", i.span_id, o.span_id), ("b", "start", "inner", i.span_id, o.span_id),
            ("a", "end", "inner", i.span_id, o.span_id), ("b", "end", "inner", i.span_id, o.span_id),
            ("a", "end", "outer", o.span_id, 0), ("b", "end", "outer", o.span_id, 0),
        ])
        self.assertIs(self.log[2][5], outer)  # parent_context: the current span
        self.assertTrue(all(e[6] == me for e in self.log if e[1] == "start"))
        self.assertTrue(all(e[5] and e[6] for e in self.log if e[1] == "end"))

    def test_exception(self):
        with self.assertRaises(ValueError):
            with self.tracer.start_as_current_span("fails") as s:
                raise ValueError("boom")
        self.assertEqual(s.status, ot.StatusCode.ERROR)
        self.assertEqual([e[1] for e in self.log], ["start", "start", "end", "end"])

    def test_shutdown_once(self):
        self.p.shutdown()
        self.p.shutdown()
        self.assertEqual(self.log, [("a", "shutdown"), ("b", "shutdown")])


class Sink(http.server.BaseHTTPRequestHandler):
    bodies = []

    def do_POST(self):
        Sink.bodies.append((self.path, self.headers["Content-Type"],
                            json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


class ExportTest(unittest.TestCase):
    def test_batch_export(self):
        srv = http.server.HTTPServer(("127.0.0.1", 0), Sink)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        os.environ["OTEL_SERVICE_NAME"] = "standin-test"
        try:
            p = ot.TracerProvider()
        finally:
            del os.environ["OTEL_SERVICE_NAME"]
        p.add_span_processor(ot.BatchSpanProcessor(
            ot.OTLPSpanExporter(endpoint="http://127.0.0.1:%d/v1/traces" % srv.server_address[1]),
            schedule_delay_millis=60000))
        t = p.get_tracer("scope", "1.2")
        with t.start_as_current_span("req", kind=ot.SpanKind.SERVER, attributes={"n": 3, "ok": True}) as r:
            with t.start_as_current_span("child"):
                pass
        self.assertEqual(Sink.bodies, [])  # nothing before the delay or a flush
        p.shutdown()
        srv.shutdown()
        self.assertEqual(len(Sink.bodies), 1)
        path, ctype, body = Sink.bodies[0]
        self.assertEqual((path, ctype), ("/v1/traces", "application/json"))
        rs = body["resourceSpans"]
        self.assertEqual(len(rs), 1)
        self.assertIn({"key": "service.name", "value": {"stringValue": "standin-test"}}, rs[0]["resource"]["attributes"])
        ss = rs[0]["scopeSpans"][0]
        self.assertEqual(ss["scope"], {"name": "scope", "version": "1.2"})
        spans = {s["name"]: s for s in ss["spans"]}
        sc = r.get_span_context()
        self.assertEqual(spans["req"]["traceId"], "%032x" % sc.trace_id)
        self.assertEqual(spans["req"]["spanId"], "%016x" % sc.span_id)
        self.assertEqual(spans["req"]["kind"], 2)
        self.assertNotIn("parentSpanId", spans["req"])
        self.assertEqual(spans["child"]["parentSpanId"], "%016x" % sc.span_id)
        self.assertEqual(spans["child"]["traceId"], spans["req"]["traceId"])
        self.assertIn({"key": "n", "value": {"intValue": "3"}}, spans["req"]["attributes"])
        self.assertIn({"key": "ok", "value": {"boolValue": True}}, spans["req"]["attributes"])
        self.assertLessEqual(int(spans["req"]["startTimeUnixNano"]), int(spans["child"]["startTimeUnixNano"]))


if __name__ == "__main__":
    unittest.main()
