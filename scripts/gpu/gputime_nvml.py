#!/usr/bin/env python3
"""gputime_nvml.py OUT.json [DEVICE]: NVML's per-process utilisation
samples (nvmlDeviceGetProcessUtilization) of one GPU, polled every 100 ms
until SIGTERM, integrated per pid into seconds of SM time (a sample's
smUtil % of the time since the driver's previous sampling instant), written to
OUT.json as {"pid": seconds, ...}: the gputime part's cross-check, a
measure independent of the windows and of the solo durations. Through
ctypes on libnvidia-ml.so.1, no pynvml."""
import ctypes
import json
import signal
import sys
import time


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def main():
    out, dev = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    if nv.nvmlInit_v2() != 0:
        sys.exit("gputime_nvml: nvmlInit failed")
    h = ctypes.c_void_p()
    if nv.nvmlDeviceGetHandleByIndex_v2(dev, ctypes.byref(h)) != 0:
        sys.exit("gputime_nvml: no device %d" % dev)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    buf = (Sample * 1024)()
    seen = {}  # pid -> {timestamp: smUtil}
    last = 0
    while not stop:
        n = ctypes.c_uint(1024)
        rc = nv.nvmlDeviceGetProcessUtilization(h, buf, ctypes.byref(n), ctypes.c_ulonglong(last))
        if rc == 0:
            for s in buf[:n.value]:
                seen.setdefault(s.pid, {})[s.timeStamp] = s.smUtil
                last = max(last, s.timeStamp)
        time.sleep(0.1)
    # The driver samples every process at the same instants: a sample
    # covers the time since the instant before it, whoever it was of.
    instants = sorted({t for samples in seen.values() for t in samples})
    prev = dict(zip(instants[1:], instants))
    secs = {}
    for pid, samples in seen.items():
        secs[pid] = sum(u / 100 * (t - prev[t]) / 1e6 for t, u in samples.items() if t in prev)
    json.dump({str(p): s for p, s in secs.items()}, open(out, "w"))


if __name__ == "__main__":
    main()
