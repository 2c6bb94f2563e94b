#!/bin/bash
# Experiment driver (GPU machine): patch-image routes, activation, cost.
# bash scripts/experiments/sanitizer/run.sh  (writes $OUT/sanitizer.log)
set -u
D=$(cd "$(dirname "$0")" && pwd); W=/tmp/sp; mkdir -p $W; cd $W
LOG=${OUT:-/tmp}/sanitizer.log; exec > >(tee $LOG) 2>&1
CUDA=${CUDA_HOME:-/usr/local/cuda}
SAN=$(dirname "$(find $CUDA/ /usr/local/cuda*/ -name 'libsanitizer-public.so' 2>/dev/null | head -1)")
echo "sanitizer: $SAN"; ls $SAN | head -20
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
echo "site: $SP"; ls $SP/nvidia 2>/dev/null; find $SP/nvidia -name '*.so*' | grep -i 'jitlink\|nvrtc\|sanitizer\|ptx' 
JL=$(find $SP/nvidia -name 'libnvJitLink.so*' | head -1); RTC=$(find $SP/nvidia -name 'libnvrtc.so*' | grep -v builtins | head -1)
TPTXAS=$(find $SP/triton -name ptxas -type f | head -1); echo "jitlink=$JL nvrtc=$RTC triton ptxas=$TPTXAS"; $TPTXAS --version | tail -1
nm -D $JL | grep -i create; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch,triton;print(torch.__version__, triton.__version__)'
cp $D/* . 2>/dev/null
set -x
nvcc -arch=sm_90 --cubin --compile-as-tools-patch sp_patch.cu -o ref.cubin
nvcc -arch=sm_90 -ptx --keep-device-functions sp_patch.cu -o sp.ptx
ptxas -arch=sm_90 --compile-as-tools-patch sp.ptx -o ptxas.cubin
$TPTXAS -arch=sm_90 --compile-as-tools-patch sp.ptx -o triton.cubin
gcc -shared -fPIC -O2 -I$SAN/include -I$CUDA/include sp_inject.c -o sp_inject.so -ldl
gcc -O2 -I$CUDA/include sp_jit.c -o sp_jit -ldl
./sp_jit jitlink $JL sp.ptx jl1.cubin -arch=sm_90 -Xptxas=--compile-as-tools-patch
./sp_jit jitlink $JL sp.ptx jl2.cubin -arch=sm_90 -Xptxas=-astoolspatch
./sp_jit nvrtc $RTC sp_patch.cu rtc1.cubin -arch=sm_90 --compile-as-tools-patch
./sp_jit nvrtc $RTC sp_patch.cu rtc2.cubin -arch=sm_90 -Xptxas=--compile-as-tools-patch
./sp_jit nvrtc $RTC sp_patch.cu rtc3.cubin -arch=sm_90 --ptxas-options=--compile-as-tools-patch
set +x
ls -la *.cubin
export SP_SANITIZER=$SAN/libsanitizer-public.so
run() { echo "== $*"; env "$@" 2>&1 | grep -v '^sp: magic' | tail -25; }
run X=plain python3 $D/../../gpu/sassbench.py mm32
run X=plain python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin python3 $D/../../gpu/sassbench.py mm32
run SP_INJECTION=1 CUDA_INJECTION64_PATH=$W/sp_inject.so SP_PATCH=ref.cubin python3 $D/../../gpu/sassbench.py mm32
for img in sp.ptx ptxas.cubin triton.cubin jl1.cubin jl2.cubin rtc1.cubin rtc2.cubin rtc3.cubin aot118.cubin; do
  [ -s $img ] && run LD_PRELOAD=$W/sp_inject.so SP_PATCH=$img python3 $D/../../gpu/sassbench.py mm32 10
done
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin SP_MODE=nop python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin SP_ONE_IN=1000000 python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin SP_ONE_IN=10 SP_TOGGLE=1 python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin SP_MODE=none python3 $D/../../gpu/sassbench.py add
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin SP_MODE=mem python3 $D/../../gpu/sassbench.py add 10
run X=plain python3 $D/../../gpu/sassbench.py bf16
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin python3 $D/../../gpu/sassbench.py bf16
run X=plain python3 $D/../../gpu/sassbench.py triton
run LD_PRELOAD=$W/sp_inject.so SP_PATCH=ref.cubin python3 $D/../../gpu/sassbench.py triton
run X=plain python3 $D/../../gpu/sassbench.py mm32
run X=plain python3 $D/../../gpu/sassbench.py add
