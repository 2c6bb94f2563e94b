"""matmul.py - the shim spike's PyTorch sample (scripts/experiments/shim-spike.sh).

    python3 matmul.py            ITERS 256x256 matmuls; prints a checksum
    python3 matmul.py --count    the same under torch.profiler, and prints
                                 "app: launches=K", the kernels CUPTI saw
                                 (run without the shim: the reference count)

The output without --count depends only on the computation, so it must be
identical with and without the shim.
"""
import cupti_count
import torch

ITERS = 20


def work():
    """Everything the plain run launches: the matmuls and the checksum
    (its cast and sum are two kernels too: profiling only the matmuls
    counted 62 where the shim recorded 64)."""
    torch.manual_seed(0)
    a = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, 256, device="cuda")
    c = a
    for _ in range(ITERS):
        c = torch.matmul(c, b) / 16.0
    torch.cuda.synchronize()
    return "matmul: iters=%d checksum=%.6e c[3,5]=%.6f" % (ITERS, c.double().sum().item(), c[3, 5].item())


if __name__ == "__main__":
    cupti_count.main(work)
