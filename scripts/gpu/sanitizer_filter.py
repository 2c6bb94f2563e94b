"""sanitizer_filter: checks sanitizer.sh's filter part. With
kernels::include the shim probes only the kernels the collector named
(its trace lists each kernel once, probed or not, and the probed ones
match the pattern); with sampling::device_one_in 4 every patched_sass span
is a launch the shim's hash keeps (gp_sample_keep). Step times are
against plain in the same run; checksums must match plain's."""
import json
import re
import sys

sys.path.insert(0, "scripts/gpu")
from lib_traces import load, launch_spans

M64 = (1 << 64) - 1


def keep(i, n):
    """The shim's gp_sample_keep (shim/src/gp.h)."""
    i ^= i >> 30
    i = (i * 0xBF58476D1CE4E5B9) & M64
    i ^= i >> 27
    i = (i * 0x94D049BB133111EB) & M64
    i ^= i >> 31
    return (i >> 32) % n == 0


def main(d, pat):
    plain = json.load(open(d + "/filter-plain.json"))
    bad = 0
    for cfg in ("sass", "include", "onein"):
        r = json.load(open("%s/filter-%s.json" % (d, cfg)))
        spans, _ = load("%s/filter-%s-traces.json" % (d, cfg))
        sass = [at for _, at in launch_spans(spans) if at.get("cuda.launch.window", {}).get("stringValue") == "patched_sass"]
        same = abs(float(r["checksum"]) - float(plain["checksum"])) <= 1e-6 * max(abs(float(plain["checksum"])), 1)
        trace = open("%s/filter-%s-trace.txt" % (d, cfg)).read()
        probed = re.findall(r"sass: kernel (\S+): probed", trace)
        kept_out = re.findall(r"sass: kernel (\S+): not probed", trace)
        note, ok = "", same and len(sass) > 0
        if cfg == "include":
            wrong = [k for k in probed if not re.search(pat, k)] + [k for k in kept_out if re.search(pat, k)]
            asked = probed + kept_out
            ok = ok and probed and kept_out and not wrong and len(asked) == len(set(asked))
            note = "; %d kernels probed, %d kept out, %d against the pattern, %d asked twice" % (
                len(probed), len(kept_out), len(wrong), len(asked) - len(set(asked)))
        elif cfg == "onein":
            ids = [int(at["cuda.launch.id"]["intValue"]) for at in sass]
            off = [i for i in ids if not keep(i, 4)]
            ok = ok and not off
            note = "; %d patched launches, %d the hash does not keep" % (len(ids), len(off))
        print("sanitizer filter %-7s %s: %.3f ms vs plain %.3f (%.3fx); checksum %s; %d patched_sass spans%s"
              % (cfg, "ok" if ok else "FAIL", r["step_ms"], plain["step_ms"], r["step_ms"] / plain["step_ms"],
                 "same" if same else "DIFFERS", len(sass), note))
        bad |= not ok
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
