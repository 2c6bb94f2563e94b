#!/usr/bin/env bash
# e2e.sh: the patch loop end to end on the GPU machine, from
# prebuilt binaries (no Go there):
#
#   bin/gpuprobe        (make bin/gpuprobe)        `run`
#   bin/gpuprobe-harness (make bin/gpuprobe-harness) `agent-dump --patch`
#   bin/libgpuprobe.so  (make bin/libgpuprobe.so)
#
# It builds testdata/cuda/shim/vectoradd.cu with PTX only for sm_90
# (-gencode arch=compute_90,code=compute_90, static cudart), runs it plainly,
# then under `gpuprobe run` against `gpuprobe-harness agent-dump --patch` (which
# answers the shim's PATCH with the kernel_phases probe), and checks:
#   - the output is identical (the patched kernels compute the same thing);
#   - the module was patched, and every launch was recorded;
#   - device windows == launches (one kernel_phases record.Exec per launch of a
#     patched kernel), none dropped;
# then the same with the collector answering too late (fail open: same
# output, nothing patched). Prints a short table last; exit 1 if a check
# failed. Under 2 minutes.
#
# Environment: NVCC (default nvcc), E2E_OUT (logs, default build/gpu-e2e;
# copied to $OUT if set), ITERS (vectorAdd iterations, default 2).
set -uo pipefail
export GPUPROBE_PATCH=1 # patching is opt-in (see shim/README.md)

cd "$(dirname "$0")/../.."
root=$PWD
gp=$root/bin/gpuprobe
harness=$root/bin/gpuprobe-harness
shim=$root/bin/libgpuprobe.so
out=${E2E_OUT:-$root/build/gpu-e2e}
nvcc=${NVCC:-nvcc}
iters=${ITERS:-2}
mkdir -p "$out"
rows=()
failed=0

row() {
	rows+=("$(printf '%-40s %-5s %s' "$1" "$2" "$3")")
	[[ $2 == FAIL ]] && failed=1
}

finish() {
	[[ -n ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
	echo
	printf '%-40s %-5s %s\n' "check" "result" "detail"
	printf '%s\n' "${rows[@]}"
	exit "$failed"
}

for f in "$gp" "$harness" "$shim"; do
	[[ -e $f ]] || { row "prebuilt $(basename "$f")" FAIL "missing: build it here with make and carry bin/"; finish; }
done

app=$out/vectoradd_ptx
if ! "$nvcc" -O3 -gencode arch=compute_90,code=compute_90 -o "$app" testdata/cuda/shim/vectoradd.cu >"$out/nvcc.txt" 2>&1; then
	row "nvcc compute_90 (PTX only)" FAIL "see $out/nvcc.txt"
	finish
fi
row "nvcc compute_90 (PTX only)" ok "$app"

"$app" run "$iters" >"$out/plain.txt" 2>&1 || { row "plain run" FAIL "see $out/plain.txt"; finish; }
row "plain run" ok "$(head -1 "$out/plain.txt")"

# patched NAME TIMEOUT_MS EXTRA_DUMP_ARGS...: the app under gpuprobe run
# against agent-dump --patch; leaves $out/NAME.{dump,run,err}.txt.
patched() {
	local name=$1 ms=$2 sock=$out/$1.sock
	shift 2
	rm -f "$sock"
	"$harness" agent-dump --patch --socket "$sock" --exit-after 1 --slot-size 1024 --slots 65536 --timeout 90s "$@" \
		>"$out/$name.dump.txt" 2>&1 &
	local dpid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	GPUPROBE_TIMEOUT_MS=$ms timeout 90 "$gp" run --socket "$sock" --shim "$shim" --trace "$out/$name.trace.txt" \
		-- "$app" run "$iters" >"$out/$name.run.txt" 2>"$out/$name.err.txt"
	local rc=$?
	wait "$dpid"
	return $rc
}

field() { sed -n "s/.*[ :]$1=\([0-9]*\).*/\1/p" "$2" | head -1; }

if patched patched 20000; then
	if cmp -s "$out/plain.txt" "$out/patched.run.txt"; then
		row "patched run: output identical" ok ""
	else
		row "patched run: output identical" FAIL "diff $out/plain.txt $out/patched.run.txt"
	fi
else
	row "patched run" FAIL "app exit code $?, see $out/patched.err.txt"
fi
d=$out/patched.dump.txt
mods=$(field modules "$d")
exp=$(field expected "$d")
rec=$(field recorded "$d")
drop=$(grep 'patched modules=' "$d" | sed -n 's/.* dropped=\([0-9]*\).*/\1/p')
want_launches=$(sed -n 's/^app: launches=\([0-9]*\)/\1/p' "$out/plain.txt")
launches=$(sed -n 's/^agent-dump: total .* launches=\([0-9]*\) .*/\1/p' "$d")
if [[ ${mods:-0} -ge 1 ]]; then
	row "module patched" ok "modules=$mods"
else
	row "module patched" FAIL "see $d and $out/patched.trace.txt"
fi
if [[ -n $launches && $launches == "$want_launches" ]]; then
	row "launch records" ok "$launches"
else
	row "launch records" FAIL "recorded ${launches:-?}, app launched ${want_launches:-?}"
fi
if [[ -n $exp && $exp -gt 0 && $exp == "$rec" && ${drop:-1} == 0 ]]; then
	row "device windows == launches" ok "$rec"
else
	row "device windows == launches" FAIL "expected ${exp:-?} recorded ${rec:-?} dropped ${drop:-?}"
fi

# Fail open: a collector that answers after the shim gave up (1 ms).
if patched late 1 && cmp -s "$out/plain.txt" "$out/late.run.txt"; then
	row "answer too late: fail open" ok "$(grep -c 'patching failed\|not patched' "$out/late.trace.txt" 2>/dev/null) trace lines"
else
	row "answer too late: fail open" FAIL "see $out/late.run.txt, $out/late.err.txt"
fi
finish
