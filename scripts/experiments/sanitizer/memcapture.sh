#!/bin/bash
# memcapture.sh: testdata/bpf/memcount.o (a kprobe/__memcapture program)
# as a Compute Sanitizer patch function (gpuprobe/sanpatch; the cubin
# assembled with CUDA 11.8's ptxas --compile-as-tools-patch
# -maxrregcount=24, carried as $1) inside PyTorch's elementwise kernels,
# through this directory's injector, against ncu's counts of the same run's
# global loads and stores. From the bundle root.
#
# Measured on an H200: memcount counted 184,549,376 loads and
# 125,829,120 stores (2,952,790,016 and 1,610,612,736 bytes) over the 24
# kernels of `sassbench.py add 2`; ncu counted 5,767,168 and 3,932,160
# warp-level global load and store instructions in the same kernels:
# exactly 32 lanes each. Output identical to plain.
set -u
cubin=${1:?usage: memcapture.sh memcount.cubin}
cd "$(dirname "$0")/../../.."
out=/tmp/memcapture; mkdir -p $out
SAN=/usr/local/cuda/compute-sanitizer
gcc -shared -fPIC -O2 -I$SAN/include -I/usr/local/cuda/include scripts/experiments/sanitizer/sp_inject.c -o $out/sp_inject.so -ldl
# The map region of mem_counters: the magic sanpatch gave its global, 4 KiB.
LD_PRELOAD=$out/sp_inject.so SP_SANITIZER=$SAN/libsanitizer-public.so SP_PATCH=$cubin SP_MODE=custom \
	SP_MEM_FN=__gpuprobe_sp_mem SP_BIND=0x4750534700000000:4096 \
	python3 scripts/gpu/sassbench.py add 2 2>&1 | grep -v magic | tail -6
python3 scripts/gpu/sassbench.py add 2
# Warp-level instruction counts (the thread-level metrics are n/a on this
# ncu); every warp of these kernels is full, so lanes = 32 x warps.
ncu --metrics smsp__sass_inst_executed_op_global_ld.sum,smsp__sass_inst_executed_op_global_st.sum \
	--csv --print-units base python3 scripts/gpu/sassbench.py add 2 >$out/ncu.csv 2>$out/ncu.err
python3 - $out/ncu.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
im, iv, ik = head.index("Metric Name"), head.index("Metric Value"), head.index("Kernel Name")
tot, kern = {}, set()
for r in rows:
    try:
        tot[r[im]] = tot.get(r[im], 0) + int(float(r[iv].replace(",", "")))
    except ValueError:  # n/a
        tot[r[im] + " n/a"] = tot.get(r[im] + " n/a", 0) + 1
    kern.add(r[head.index("ID")])
print("ncu: %d kernels; %s" % (len(kern), ", ".join("%s=%d" % (k, v) for k, v in sorted(tot.items()))))
PY
tail -3 $out/ncu.err
