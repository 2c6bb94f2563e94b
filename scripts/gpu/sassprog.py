"""sassprog.py: the SASS route's user-program check workload
(scripts/gpu/sanitizer.sh, part programs). Usage: python3 sassprog.py
add|triton N ITERS. Makes two tensors of N floats, runs the kernel once
(Triton compiles then), synchronises and waits 2 s (the shim binds the
collector's patch module meanwhile: launches before it are not sampled),
then launches the kernel ITERS times: PyTorch's vectorized elementwise
a+b or a Triton add_k with 1024-element programs. Prints one JSON line:
the work, N, ITERS and a hash of the output."""
import hashlib, json, sys, time, torch

def make(name, n):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    if name == "add":
        return lambda: x + y
    import triton, triton.language as tl

    @triton.jit
    def add_k(a, b, o, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        m = i < n
        tl.store(o + i, tl.load(a + i, mask=m) + tl.load(b + i, mask=m), mask=m)
    o = torch.empty_like(x)

    def run():
        add_k[(triton.cdiv(n, 1024),)](x, y, o, n, B=1024)
        return o
    return run

def main():
    name, n, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    f = make(name, n)
    out = f()
    torch.cuda.synchronize()
    time.sleep(2)
    for _ in range(iters):
        out = f()
    torch.cuda.synchronize()
    h = hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16]
    print(json.dumps({"work": name, "n": n, "iters": iters, "sha": h}), flush=True)

main()
