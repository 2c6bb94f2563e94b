"""cupti_count.py - the reference launch count of the shim spike's PyTorch
samples (matmul.py, graph.py): main(work) runs work() and prints its
result, or with --count runs it under torch.profiler and prints
"app: launches=K", the kernels CUPTI saw run (memory copies and sets are
not launches)."""
import sys


def main(work):
    """Runs work() as the command line asks (see the module doc)."""
    if "--count" not in sys.argv:
        print(work())
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
    kernels = 0
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).endswith("CUDA"):
            if not evt.name.startswith(("Memcpy", "Memset", "[memory]")):
                kernels += 1
    print("app: launches=%d" % kernels)
