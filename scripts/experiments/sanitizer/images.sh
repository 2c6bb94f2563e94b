#!/bin/bash
# images.sh: which SASS-route patch images run inside cuBLAS's nvjet bf16
# GEMM (a warp-specialized sm_90a kernel), and the collector-killed case
# with the default sampling. From the bundle root, after make gpu-bundle;
# extra images in $IMAGES (paths).
set -u
cd "$(dirname "$0")/../../.."
out=/tmp/images; mkdir -p $out
. scripts/gpu/lib_collector.sh
nvcc -arch=sm_90 --cubin --compile-as-tools-patch shim/patch/sass_phases.cu -o $out/cu13.cubin
nvcc -arch=sm_90 --cubin --compile-as-tools-patch -maxrregcount=40 shim/patch/sass_phases.cu -o $out/cu13r40.cubin
nvcc -arch=sm_90a --cubin --compile-as-tools-patch shim/patch/sass_phases.cu -o $out/cu13a.cubin
python3 scripts/gpu/sassbench.py bf16 20 | sed 's/^/plain /'
for img in builtin $out/cu13.cubin $out/cu13r40.cubin $out/cu13a.cubin ${IMAGES:-}; do
	SASS=true start_collector $out "" traces || exit 1
	e=""; [[ $img != builtin ]] && e="GPUPROBE_SASS_IMAGE=$img"
	env $e GPUPROBE_SASS=1 GPUPROBE_TRACE=$out/t.txt timeout 120 bin/gpuprobe run --socket $out/agent.sock --shim bin/libgpuprobe.so -- \
		python3 scripts/gpu/sassbench.py bf16 20 2>$out/err.txt | sed "s|^|$(basename $img) |"
	grep -h 'illegal' $out/err.txt | head -1
	grep -h 'sass: callbacks\|sass: .*refused\|sass: GPUPROBE' $out/t.txt | sed 's/^gpuprobe\[[0-9]*\]: //'
	kill -TERM $col; wait $col
done
# The experiment's own injector and patch (CUDA 13), warp mode, with its dump.
nvcc -arch=sm_90 --cubin --compile-as-tools-patch scripts/experiments/sanitizer/sp_patch.cu -o $out/sp.cubin
gcc -shared -fPIC -O2 -I/usr/local/cuda/compute-sanitizer/include -I/usr/local/cuda/include scripts/experiments/sanitizer/sp_inject.c -o $out/sp_inject.so -ldl
LD_PRELOAD=$out/sp_inject.so SP_PATCH=$out/sp.cubin SP_SANITIZER=/usr/local/cuda/compute-sanitizer/libsanitizer-public.so python3 scripts/gpu/sassbench.py bf16 20 2>&1 | grep -v magic | tail -6
# The collector killed mid-run, default sampling.
python3 scripts/gpu/sassbench.py add 400 | sed 's/^/plain-add /'
SASS=true start_collector $out "    sampling: {}" traces || exit 1
(sleep 6; kill -KILL $col) &
GPUPROBE_SASS=1 GPUPROBE_TRACE=$out/k.txt timeout 120 bin/gpuprobe run --socket $out/agent.sock --shim bin/libgpuprobe.so -- \
	python3 scripts/gpu/sassbench.py add 400 | sed 's/^/killed-add /'
wait
grep -h 'sass:' $out/k.txt | sed 's/^gpuprobe\[[0-9]*\]: //'
