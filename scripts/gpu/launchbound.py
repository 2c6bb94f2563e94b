"""launchbound.py: launch-bound framework workloads for the shim's cost.

Usage: python3 launchbound.py MODE [--steps N] [--warmup N]
  MODE  jax       a JAX MLP training step under jax.jit (4 layers of
                  1024 x 1024, batch 512, SGD; random weights)
        torchadd  20,000 x.add_(1) on a 1-element tensor, timed per op
        cupy      a CuPy elementwise kernel and a RawKernel, in a loop
Prints one JSON line: the mode, the median step time in microseconds over
the timed steps (wall clock around a synchronised batch of steps), a
checksum of the outputs (identical between plain and instrumented runs;
for torchadd the number of add_ launches made) and the process's pid.
"""
import argparse
import json
import os
import statistics
import time


def jax_step(steps):
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    keys = jax.random.split(key, 6)
    ws = [jax.random.normal(k, (1024, 1024), jnp.float32) * 0.02 for k in keys[:4]]
    x = jax.random.normal(keys[4], (512, 1024), jnp.float32)
    y = jax.random.normal(keys[5], (512, 1024), jnp.float32)

    def loss(ws, x, y):
        h = x
        for w in ws:
            h = jnp.tanh(h @ w)
        return jnp.mean((h - y) ** 2)

    @jax.jit
    def step(ws, x, y):
        l, g = jax.value_and_grad(loss)(ws, x, y)
        return [w - 1e-3 * gw for w, gw in zip(ws, g)], l

    def run(n):
        nonlocal ws
        l = None
        for _ in range(n):
            ws, l = step(ws, x, y)
        l.block_until_ready()
        return float(l)

    return run


def torch_add(steps):
    import torch

    x = torch.zeros(1, device="cuda")

    def run(n):
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        return float(x.item())

    return run


def cupy_loop(steps):
    import cupy as cp

    add = cp.ElementwiseKernel("float32 a, float32 b", "float32 c", "c = a * 0.5f + b", "gp_axpy")
    raw = cp.RawKernel(r'''
extern "C" __global__ void gp_scale(float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * 0.999f + 1.0f;
}''', "gp_scale")
    a = cp.arange(1 << 16, dtype=cp.float32)
    b = cp.ones(1 << 16, dtype=cp.float32)
    c = cp.empty_like(a)

    def run(n):
        for _ in range(n):
            add(a, b, c)
            raw((256,), (256,), (c, cp.int32(1 << 16)))
        cp.cuda.Device().synchronize()
        return float(c[:16].sum())

    return run


MODES = {"jax": (jax_step, 200), "torchadd": (torch_add, 20000), "cupy": (cupy_loop, 2000)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("--steps", type=int, default=0, help="steps per timed batch")
    p.add_argument("--batches", type=int, default=7)
    args = p.parse_args()
    build, n = MODES[args.mode]
    n = args.steps or n
    run = build(n)
    run(max(10, n // 10))  # warm-up: compilation, allocator, caches
    per = []
    check = 0.0
    for _ in range(args.batches):
        t = time.perf_counter_ns()
        check = run(n)
        per.append((time.perf_counter_ns() - t) / n / 1000.0)
    print(json.dumps({"mode": args.mode, "us_per_step": statistics.median(per),
                      "min": min(per), "max": max(per), "steps": n, "check": round(check, 3), "pid": os.getpid()}))


if __name__ == "__main__":
    main()
