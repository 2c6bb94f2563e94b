"""torchstep.py: PyTorch workloads for device windows (every kernel timed).

Usage: python3 torchstep.py MODE [--steps N] [--warmup N] [--kernels]
  MODE  eager    a training step of a small transformer encoder (4 layers,
                 d_model 512, 8 heads, batch 32 x 256 tokens, AdamW;
                 random weights, no downloads)
        compile  the same step under torch.compile (Triton kernels)
        cublas   a loop of fp32 and bf16 matmuls (cuBLAS)
Prints one JSON line: the mode, the median step time in ms (CUDA events),
a checksum of the outputs (identical across runs of one mode on one GPU:
the seeds are fixed and cuDNN/cuBLAS are made deterministic) and, with
--kernels, the kernel names and launch counts of one step as torch.profiler
(CUPTI) saw them, and when (wall clock, ns) the profiler started.
"""
import argparse
import json
import os
import statistics

import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def build(mode):
    torch.manual_seed(0)
    dev = "cuda"
    if mode == "cublas":
        a = torch.randn(4096, 4096, device=dev)
        b = torch.randn(4096, 4096, device=dev)
        ah, bh = a.bfloat16(), b.bfloat16()

        def step():
            c = a @ b
            d = ah @ bh
            return (c.sum() + d.float().sum()).detach()

        return step
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).to(dev)
    head = torch.nn.Linear(512, 512).to(dev)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(32, 256, 512, device=dev)
    y = torch.randn(32, 256, 512, device=dev)

    def fwd(x):
        return head(model(x))

    f = torch.compile(fwd) if mode == "compile" else fwd

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(f(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["eager", "compile", "cublas"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--kernels", action="store_true")
    a = p.parse_args()
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    step = build(a.mode)
    out = None
    for _ in range(a.warmup):
        out = step()
    torch.cuda.synchronize()
    times = []
    sums = []
    for _ in range(a.steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = step()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
        sums.append(float(out))
    res = {"mode": a.mode, "step_ms": statistics.median(times), "min_ms": min(times),
           "checksum": "%.9g" % sum(sums)}
    if a.kernels:
        import time
        from torch.profiler import profile, ProfilerActivity
        res["profile_start_unix_ns"] = time.time_ns()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        counts = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                counts[ev.name] = counts.get(ev.name, 0) + 1
        res["kernels"] = counts
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
