# stack_loop.py N DEPTH: N launches through the MOCK driver by ctypes,
# each DEPTH Python frames below the module (BenchmarkPythonStack).
import ctypes
import sys

cu = ctypes.CDLL("libcuda.so.1")
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuModuleLoadData(ctypes.byref(mod), b"mock image") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"_Z6vecAddPfS_S_i") == 0
launch = cu.cuLaunchKernel


def nest(d, n):
    if d > 0:
        return nest(d - 1, n)
    for _ in range(n):
        launch(fn, 1, 1, 1, 32, 1, 1, 0, None, None, None)
    return 0


nest(int(sys.argv[2]), int(sys.argv[1]))
