# stack_app.py: launches through the MOCK driver by ctypes from step()
# (the line marked "launch here"), prints "launched" and the code
# object's address, then waits for a line on stdin so that a test can
# read its memory while it lives.
import ctypes
import sys

cu = ctypes.CDLL("libcuda.so.1")
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuModuleLoadData(ctypes.byref(mod), b"mock image") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"_Z6vecAddPfS_S_i") == 0


def step():
    return cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, None, None, None)  # launch here


assert step() == 0
print("launched", id(step.__code__), flush=True)
sys.stdin.readline()
