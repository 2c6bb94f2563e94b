"""Launches through the CUDA driver API (ctypes) under the span processor:
run by shim/spanctx_test.go with libgpuprobe.so preloaded and the MOCK
driver (shim/testdata/mock_libcuda.c) as libcuda.so.1.

Launch order (grid.x numbers them), each under the span the test expects:
  1  no span
  2  request (trace 0xa1.., span 0xb1.., sampled)
  3  forward, a child of request (span 0xb2..)
  4  request again, after forward ended
  5  no span: request ended
  6  a second thread's span (trace 0xa2.., span 0xb3.., not sampled)
"""

import ctypes
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

import gpuprobe_otel  # noqa: E402
from fakes import Span  # noqa: E402

TRACE1 = 0xA1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1
TRACE2 = 0xA2A2A2A2A2A2A2A2A2A2A2A2A2A2A2A2

cuda = ctypes.CDLL("libcuda.so.1")
FATBIN = (ctypes.c_uint32 * 4)(0xBA55ED50, 0x00100001, 0, 0)


def check(r, what):
    if r != 0:
        sys.exit("py: %s failed: %d" % (what, r))


check(cuda.cuInit(0), "cuInit")
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
check(cuda.cuModuleLoadData(ctypes.byref(mod), FATBIN), "cuModuleLoadData")
check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"_Z6vecAddPfS_S_i"), "cuModuleGetFunction")
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3


def launch(n):
    check(cuda.cuLaunchKernel(fn, n, 1, 1, 32, 1, 1, 0, None, None, None), "cuLaunchKernel")


p = gpuprobe_otel.GpuprobeSpanProcessor()
if not p.enabled:
    sys.exit("py: the shim is not loaded")
launch(1)
req, fwd = Span(TRACE1, 0xB1B1B1B1B1B1B1B1, 1), Span(TRACE1, 0xB2B2B2B2B2B2B2B2, 1)
p.on_start(req)
launch(2)
p.on_start(fwd)
launch(3)
p.on_end(fwd)
launch(4)
p.on_end(req)
launch(5)


def worker():
    s = Span(TRACE2, 0xB3B3B3B3B3B3B3B3, 0)
    p.on_start(s)
    launch(6)
    p.on_end(s)


t = threading.Thread(target=worker)
t.start()
t.join()
print("py: launches done shim=1")
