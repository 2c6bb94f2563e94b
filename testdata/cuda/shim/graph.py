"""graph.py - the shim spike's PyTorch CUDA graph sample (scripts/experiments/shim-spike.sh).

    python3 graph.py            captures one step (matmul, relu, scale, add)
                                into a CUDA graph with torch.cuda.graph and
                                replays it REPLAYS times; prints a checksum
    python3 graph.py --count    the same under torch.profiler, and prints
                                "app: launches=K", the kernels CUPTI saw run
                                (run without the shim: the reference count)

Captured launches do not run: with the shim, the launches recorded must be
the eager ones and each replay's kernel nodes, not the captures (a captured
launch writes no launch record). The output without --count depends only on
the computation, so it must be identical with and without the shim.
"""
import cupti_count
import torch

REPLAYS = 10


def work():
    """Everything the plain run launches, checksum included."""
    torch.manual_seed(0)
    a = torch.randn(128, 128, device="cuda")
    b = torch.randn(128, 128, device="cuda") / 16.0
    static_in = torch.zeros_like(a)
    # Warm up on a side stream, as torch.cuda.graph needs for cuBLAS.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.relu(torch.matmul(static_in, b)) * 0.5 + static_in
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = torch.relu(torch.matmul(static_in, b)) * 0.5 + static_in
    acc = torch.zeros_like(a)
    x = a
    for _ in range(REPLAYS):
        static_in.copy_(x)
        g.replay()
        x = static_out
        acc += x
    torch.cuda.synchronize()
    return "graph: replays=%d checksum=%.6e acc[1,2]=%.6f" % (REPLAYS, acc.double().sum().item(), acc[1, 2].item())


if __name__ == "__main__":
    cupti_count.main(work)
