"""stackstep.py: a small PyTorch training step whose forward ops sit on
known lines (each marked by an "op" comment naming it), for launch stacks.

Usage: python3 stackstep.py STEPS TIMING_FILE
Runs STEPS steps after 5 warm-up steps, prints a checksum of the weights
(identical across runs: seeds fixed) and writes the median step time in
ms (CUDA events) to TIMING_FILE.
"""
import statistics
import sys

import torch

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
x = torch.randn(256, 1024, device=dev)
w = torch.randn(1024, 1024, device=dev, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-4)


def step():
    y = x @ w  # op: matmul
    z = torch.relu(y)  # op: relu
    loss = (z * z).mean()  # op: loss
    opt.zero_grad()
    loss.backward()
    opt.step()


def main():
    steps, timing = int(sys.argv[1]), sys.argv[2]
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    print("checksum %.6e" % w.detach().double().sum().item())
    with open(timing, "w") as f:
        f.write("%.6f\n" % statistics.median(times))


if __name__ == "__main__":
    main()
