"""inference_server.py: a small HTTP inference server traced with
OpenTelemetry, whose CUDA kernels gpuprobe puts in each request's trace
(python/gpuprobe_otel's span processor hands every span to the shim).

Usage: python3 inference_server.py --model mlp|driver --port-file PATH
           [--port 0] [--otlp URL] [--warmup N] [--kernel-count PATH]
  --model mlp     a PyTorch MLP (random weights, seed 0) on the GPU
          driver  kernels launched through the CUDA driver API (ctypes) on a
                  fake module: for the MOCK driver of the shim's tests
                  (shim/testdata/mock_libcuda.c), which runs no code
  --port-file     where the bound port is written once the server listens
  --otlp          OTLP/HTTP base URL of the collector (spans go to
                  URL/v1/traces); without it spans are not exported (the
                  plain runs the checks compare against)
  --warmup        forward passes at start, outside any request (default 3)
  --kernel-count  (plain runs) after the warm-up, count the kernels of one
                  forward and of one health check (mlp: with
                  torch.profiler) and write them as JSON
Endpoints:
  POST /infer     {"seed": S, "batch": B}: a forward pass of B inputs drawn
                  with seed S, in a SERVER span "POST /infer"; answers the
                  outputs as JSON, with the span in a `traceresponse` header
                  (00-<trace id>-<span id>-01)
  GET /healthz    launches one kernel, untraced (as health checks are)
  POST /shutdown  stops the server: spans are flushed, a summary printed
"""
import argparse
import ctypes
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "..", "python", "gpuprobe_otel")

# OpenTelemetry: every import of it is here. The real SDK and OTLP/HTTP
# exporter when installed; else the stand-in of the package's tests, which
# has the same names.
try:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    OTEL = "opentelemetry-sdk"
except ImportError:
    sys.path.insert(0, os.path.join(PKG, "tests"))
    from otel_standin import BatchSpanProcessor, OTLPSpanExporter, TracerProvider, trace
    OTEL = "stand-in"
try:
    import gpuprobe_otel
except ImportError:
    sys.path.insert(0, os.path.join(PKG, "src"))
    import gpuprobe_otel

tracer = trace.get_tracer("inference_server")


class MLP:
    """A PyTorch MLP, 512 → 2048 → 2048 → 512, random weights (seed 0)."""

    def __init__(self):
        import torch
        self.torch = torch
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = False
        self.net = torch.nn.Sequential(
            torch.nn.Linear(512, 2048), torch.nn.GELU(),
            torch.nn.Linear(2048, 2048), torch.nn.GELU(),
            torch.nn.Linear(2048, 512)).cuda().eval()

    def forward(self, seed, batch):
        t = self.torch
        g = t.Generator().manual_seed(seed)
        x = t.randn(batch, 512, generator=g)
        with t.inference_mode():
            p = self.net(x.cuda()).softmax(-1)
            top, idx = p.max(-1)
            top, idx = top.cpu(), idx.cpu()
        return {"class": idx.tolist(), "p": ["%.6g" % v for v in top.tolist()]}

    def health(self):
        t = self.torch
        return float(t.ones(1, device="cuda").sum().item()) == 1.0

    def count_kernels(self, path):
        """Writes the kernels of one forward (on a fresh thread, as a
        request's) and of one health check as torch.profiler sees them,
        copies left out."""
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            th = threading.Thread(target=self.forward, args=(12345, 8))
            th.start()
            th.join()
            self.torch.cuda.synchronize()
        names = {}
        for ev in prof.events():
            if ev.device_type == self.torch.autograd.DeviceType.CUDA and not ev.name.startswith(("Memcpy", "Memset")):
                names[ev.name] = names.get(ev.name, 0) + 1
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self.health()
            self.torch.cuda.synchronize()
        health = sum(1 for ev in prof.events() if ev.device_type == self.torch.autograd.DeviceType.CUDA
                     and not ev.name.startswith(("Memcpy", "Memset")))
        with open(path, "w") as f:
            json.dump({"kernels_per_request": sum(names.values()), "kernels": names, "kernels_per_health": health}, f)


class DriverModel:
    """Kernels through the CUDA driver API (ctypes) on a module the MOCK
    driver accepts: a forward is linear, gelu, linear, gelu, linear,
    softmax and a context synchronize; its outputs are computed here."""

    FORWARD = ["linear", "gelu", "linear", "gelu", "linear", "softmax"]
    MANGLED = {"linear": b"_Z6linearPfS_S_i", "gelu": b"_Z4geluPfi", "softmax": b"_Z7softmaxPfi",
               "health": b"_Z6healthPi"}

    def __init__(self):
        cu = self.cu = ctypes.CDLL("libcuda.so.1")
        self._check(cu.cuInit(0), "cuInit")
        mod = ctypes.c_void_p()
        fatbin = (ctypes.c_uint32 * 4)(0xBA55ED50, 0x00100001, 0, 0)
        self._check(cu.cuModuleLoadData(ctypes.byref(mod), fatbin), "cuModuleLoadData")
        self.fn = {}
        for name, mangled in self.MANGLED.items():
            f = ctypes.c_void_p()
            self._check(cu.cuModuleGetFunction(ctypes.byref(f), mod, mangled), "cuModuleGetFunction")
            self.fn[name] = f
        cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    @staticmethod
    def _check(r, what):
        if r != 0:
            raise RuntimeError("%s failed: CUresult %d" % (what, r))

    def _launch(self, name, grid):
        self._check(self.cu.cuLaunchKernel(self.fn[name], grid, 1, 1, 128, 1, 1, 0, None, None, None),
                    "cuLaunchKernel")

    def forward(self, seed, batch):
        for k in self.FORWARD:
            self._launch(k, batch)
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        return {"class": [(seed * 31 + i * 7) % 512 for i in range(batch)]}

    def count_kernels(self, path):
        """Writes the kernels of one forward, as MLP.count_kernels does."""
        names = {}
        for k in self.FORWARD:
            names[k] = names.get(k, 0) + 1
        with open(path, "w") as f:
            json.dump({"kernels_per_request": len(self.FORWARD), "kernels": names, "kernels_per_health": 1}, f)

    def health(self):
        self._launch("health", 1)
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        return True


class Handler(BaseHTTPRequestHandler):
    """The server's endpoints (model and counters on the server)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, code, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path != "/healthz":
            return self._reply(404, {"error": "not found"})
        ok = self.server.model.health()
        self.server.count("health")
        self._reply(200 if ok else 500, {"ok": ok})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/shutdown":
            self._reply(200, {"ok": True})
            threading.Thread(target=self.server.shutdown).start()
            return
        if self.path != "/infer":
            return self._reply(404, {"error": "not found"})
        with tracer.start_as_current_span("POST /infer", kind=trace.SpanKind.SERVER, attributes={
                "http.request.method": "POST", "url.path": "/infer", "http.route": "/infer"}) as span:
            out = self.server.model.forward(int(body["seed"]), int(body.get("batch", 8)))
            span.set_attribute("http.response.status_code", 200)
            sc = span.get_span_context()
            tr = "00-%s-%s-%02x" % (trace.format_trace_id(sc.trace_id), trace.format_span_id(sc.span_id),
                                    int(sc.trace_flags))
        self.server.count("infer")
        self._reply(200, out, [("traceresponse", tr)])


class Server(ThreadingHTTPServer):
    """A thread per request, as http.server serves."""

    daemon_threads = True

    def __init__(self, addr, model):
        super().__init__(addr, Handler)
        self.model = model
        self.counts = {"infer": 0, "health": 0}
        self._mu = threading.Lock()

    def count(self, what):
        with self._mu:
            self.counts[what] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "driver"], required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--otlp")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--kernel-count")
    a = ap.parse_args()

    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    gp = gpuprobe_otel.install(provider)
    if a.otlp:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=a.otlp.rstrip("/") + "/v1/traces")))

    model = MLP() if a.model == "mlp" else DriverModel()
    for i in range(a.warmup):
        model.forward(-1 - i, 8)  # outside any request: traces of their own
    if a.kernel_count:
        model.count_kernels(a.kernel_count)
    srv = Server(("127.0.0.1", a.port), model)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, a.port_file)
    srv.serve_forever(poll_interval=0.05)
    srv.server_close()
    provider.shutdown()
    print("inference_server: model %s, %d requests, %d health checks, %d warm-up passes; OpenTelemetry %s, shim %s"
          % (a.model, srv.counts["infer"], srv.counts["health"], a.warmup, OTEL,
             "loaded" if gp.enabled else "absent"), flush=True)


if __name__ == "__main__":
    main()
