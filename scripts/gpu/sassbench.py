"""sassbench.py: workloads whose kernels ship as SASS only (cuBLAS, PyTorch,
Triton), for the SASS route (scripts/gpu/sanitizer.sh). Usage: python3 sassbench.py WORK [ITERS]
(mm32: fp32 4096 GEMM, bf16: bf16 8192 GEMM, add: a+b of 2^24 floats,
triton: a Triton add of 2^24). Prints one JSON line: the median of ITERS
CUDA-event-timed iterations after 20 warm-ups, the launches of one
iteration, and a hash of the output; calls sp_dump() when the experiment's
injector is loaded."""
import ctypes, hashlib, json, sys, torch

def triton_add():
    import triton, triton.language as tl
    @triton.jit
    def add_k(x, y, o, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
    n = 1 << 24
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g); y = torch.randn(n, device="cuda", generator=g); o = torch.empty_like(x)
    def run():
        add_k[(n // 1024,)](x, y, o, n, B=1024)
        return o
    return run

def work(name):
    g = torch.Generator(device="cuda").manual_seed(1)
    if name == "mm32":
        a = torch.randn(4096, 4096, device="cuda", generator=g); b = torch.randn(4096, 4096, device="cuda", generator=g)
        return lambda: a @ b
    if name == "bf16":
        a = torch.randn(8192, 8192, device="cuda", generator=g, dtype=torch.bfloat16); b = torch.randn(8192, 8192, device="cuda", generator=g, dtype=torch.bfloat16)
        return lambda: a @ b
    if name == "add":
        a = torch.randn(1 << 24, device="cuda", generator=g); b = torch.randn(1 << 24, device="cuda", generator=g)
        return lambda: a + b
    if name == "triton":
        return triton_add()
    raise SystemExit("unknown workload " + name)

def main():
    name = sys.argv[1]; iters = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    f = work(name)
    for _ in range(20): out = f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); out = f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    h = hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16]
    print(json.dumps({"work": name, "median_us": round(ts[len(ts) // 2], 1), "sha": h}), flush=True)
    try:
        ctypes.CDLL(None).sp_dump()
    except AttributeError:
        pass
    sys.stdout.flush()

main()
