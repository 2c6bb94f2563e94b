"""sassprof.py: the application's own profiler in a process on the SASS
route (scripts/gpu/sanitizer.sh, part profiler). Runs a+b of 2^20 floats
30 times, then 30 times under torch.profiler (CUDA activity), then 30
times more, with a 1.5 s pause between the phases. Prints one JSON line:
how many CUDA kernel events the profiler recorded, and a hash of the
output."""
import hashlib, json, time, torch
from torch.profiler import ProfilerActivity, profile

g = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(1 << 20, device="cuda", generator=g)
b = torch.randn(1 << 20, device="cuda", generator=g)

def phase():
    for _ in range(30):
        out = a + b
    torch.cuda.synchronize()
    return out

phase()
time.sleep(1.5)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    phase()
time.sleep(1.5)
out = phase()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "elementwise" in e.name]
print(json.dumps({"profiler_kernels": len(kernels), "sha": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16]}), flush=True)
