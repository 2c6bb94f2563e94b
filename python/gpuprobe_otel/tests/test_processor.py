"""The span processor against a recording stand-in of the shim."""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

import gpuprobe_otel  # noqa: E402
from gpuprobe_otel import processor  # noqa: E402
from fakes import Span  # noqa: E402


class FakeShim:
    """Records each thread's context as the shim would hold it."""

    def __init__(self, loaded=True):
        self.loaded = loaded
        self.ctx = {}  # thread ident → (trace int, span int, flags) or None
        self.calls = 0

    def shim_loaded(self):
        return self.loaded

    def set_span_context(self, trace, span, flags):
        self.calls += 1
        self.ctx[threading.get_ident()] = (int.from_bytes(trace, "big"), int.from_bytes(span, "big"), flags)
        return True

    def clear_span_context(self):
        self.calls += 1
        self.ctx[threading.get_ident()] = None

    def here(self):
        return self.ctx.get(threading.get_ident())


class ProcessorTest(unittest.TestCase):
    def setUp(self):
        self.shim = FakeShim()
        self.p = processor.GpuprobeSpanProcessor(shim=self.shim)

    def test_nesting(self):
        req, fwd = Span(0xA1, 0xB1, 1), Span(0xA1, 0xB2, 1)
        self.p.on_start(req)
        self.assertEqual(self.shim.here(), (0xA1, 0xB1, 1))
        self.p.on_start(fwd)
        self.assertEqual(self.shim.here(), (0xA1, 0xB2, 1))
        self.p.on_end(fwd)
        self.assertEqual(self.shim.here(), (0xA1, 0xB1, 1))
        self.p.on_end(req)
        self.assertIsNone(self.shim.here())

    def test_end_out_of_order(self):
        a, b = Span(1, 1), Span(1, 2)
        self.p.on_start(a)
        self.p.on_start(b)
        self.p.on_end(a)  # the outer span ends first: the inner stays
        self.assertEqual(self.shim.here(), (1, 2, 1))
        self.p.on_end(b)
        self.assertIsNone(self.shim.here())

    def test_flags(self):
        self.p.on_start(Span(7, 8, 0))
        self.assertEqual(self.shim.here(), (7, 8, 0))

    def test_invalid_span_ignored(self):
        self.p.on_start(Span(0, 5))
        self.assertEqual(self.shim.calls, 0)

    def test_threads_apart(self):
        main = Span(1, 1)
        self.p.on_start(main)
        seen = {}

        def worker():
            seen["before"] = self.shim.here()
            w = Span(2, 2)
            self.p.on_start(w)
            seen["during"] = self.shim.here()
            self.p.on_end(w)
            seen["after"] = self.shim.here()

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.assertEqual(seen, {"before": None, "during": (2, 2, 1), "after": None})
        self.assertEqual(self.shim.here(), (1, 1, 1))

    def test_ended_on_another_thread(self):
        s, inner = Span(3, 3), Span(3, 4)
        self.p.on_start(s)
        t = threading.Thread(target=self.p.on_end, args=(s,))
        t.start()
        t.join()
        # The starting thread's stack lost s: its next start and end say so.
        self.p.on_start(inner)
        self.p.on_end(inner)
        self.assertIsNone(self.shim.here())
        self.assertEqual(self.p._open, {})

    def test_depth_bound(self):
        spans = [Span(9, i + 1) for i in range(processor.MAX_DEPTH + 10)]
        for s in spans:
            self.p.on_start(s)
        self.assertEqual(len(self.p._stack()), processor.MAX_DEPTH)
        self.assertEqual(len(self.p._open), processor.MAX_DEPTH)
        for s in reversed(spans):
            self.p.on_end(s)
        self.assertIsNone(self.shim.here())
        self.assertEqual(self.p._open, {})

    def test_no_shim_no_op(self):
        shim = FakeShim(loaded=False)
        p = processor.GpuprobeSpanProcessor(shim=shim)
        self.assertFalse(p.enabled)
        p.on_start(Span(1, 1))
        p.on_end(Span(1, 1))
        self.assertEqual(shim.calls, 0)
        self.assertTrue(p.force_flush())
        p.shutdown()


class ShimBindingTest(unittest.TestCase):
    """Without libgpuprobe.so preloaded the binding is a no-op."""

    def test_without_shim(self):
        if gpuprobe_otel.shim_loaded():
            self.skipTest("libgpuprobe.so is loaded in this process")
        self.assertFalse(gpuprobe_otel.set_span_context(1, 1))
        gpuprobe_otel.clear_span_context()
        self.assertFalse(gpuprobe_otel.GpuprobeSpanProcessor().enabled)

    def test_install(self):
        class Provider:
            def __init__(self):
                self.added = []

            def add_span_processor(self, p):
                self.added.append(p)

        prov = Provider()
        p = gpuprobe_otel.install(prov)
        self.assertEqual(prov.added, [p])


if __name__ == "__main__":
    unittest.main()
