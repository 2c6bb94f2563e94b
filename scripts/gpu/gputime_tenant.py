#!/usr/bin/env python3
"""gputime_tenant.py: one tenant of the gputime part (scripts/gpu/gputime.sh).

  solo KIND               time KIND's kernel alone with CUDA events, print
                          {"kind", "solo_ms"}
  run KIND DUTY SECONDS SOLO_MS
                          launch KIND's kernel, sync, idle so that alone the
                          GPU would be busy DUTY of the time, for SECONDS;
                          print {"pid", "kind", "launches", "truth_s",
                          "events_s"} (truth: launches × the solo duration;
                          events: the launches' own CUDA-event times, which
                          alone on the GPU are its GPU time)
"""
import json
import os
import sys
import time

import torch

KINDS = {
    # name: (setup, kernel)
    "bf16gemm": lambda: _gemm(8192, torch.bfloat16),
    "fp32gemm": lambda: _gemm(4096, torch.float32),
    "elementwise": lambda: _elementwise(1 << 26),
    # 16384² took 166 ms on an H200; 6144² 9.1 ms, so 7168² about 15.
    "long": lambda: _gemm(7168, torch.float32),
    "mid": lambda: _gemm(6144, torch.float32),
}


def _gemm(n, dt):
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    out = torch.empty(n, n, device="cuda", dtype=dt)
    return lambda: torch.matmul(a, b, out=out)


def _elementwise(n):
    x = torch.randn(n, device="cuda")
    return lambda: x.mul_(1.0000001)


def solo(kind):
    k = KINDS[kind]()
    for _ in range(5):
        k()
    torch.cuda.synchronize()
    ms = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        k()
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    print(json.dumps({"kind": kind, "solo_ms": ms[len(ms) // 2]}), flush=True)


def run(kind, duty, seconds, solo_ms):
    k = KINDS[kind]()
    k()
    torch.cuda.synchronize()
    gap = solo_ms / 1e3 * (1 - duty) / duty
    n = 0
    end = time.monotonic() + seconds
    events = 0.0
    while time.monotonic() < end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        k()
        e.record()
        e.synchronize()
        events += s.elapsed_time(e) / 1e3
        n += 1
        if gap > 0:
            time.sleep(gap)
    print(json.dumps({"pid": os.getpid(), "kind": kind, "launches": n, "truth_s": n * solo_ms / 1e3,
                      "events_s": events}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "solo":
        solo(sys.argv[2])
    else:
        run(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
