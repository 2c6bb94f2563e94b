#!/usr/bin/env bash
# gpu-launch-cost.sh: the host cost the shim adds to a kernel launch on the
# real driver. On the GPU machine, from prebuilt bin/gpuprobe and
# bin/libgpuprobe.so. Builds testdata/cuda/shim/vectoradd.cu with nvcc, then
# runs its `bench N` mode (N launches of an empty kernel, host time per
# launch) in ROUNDS interleaved rounds of three configurations:
#   plain      no shim
#   forward    shim loaded, no collector (forwards only)
#   recording  shim recording into `gpuprobe agent-dump`'s ring
# and prints the median ns/launch of each and the difference to plain.
# Environment: ROUNDS (default 7), N (launches per run, default 100000).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
gp=$root/bin/gpuprobe
shim=$root/bin/libgpuprobe.so
out=${OUT_DIR:-$root/build/gpu-launch-cost}
rounds=${ROUNDS:-7}
n=${N:-100000}
mkdir -p "$out"
nvcc -O2 -arch=native -o "$out/vectoradd" testdata/cuda/shim/vectoradd.cu >"$out/build.log" 2>&1 ||
	{ echo "nvcc failed: $(tail -3 "$out/build.log")"; exit 1; }
ns() { sed -n 's/.*ns_per_launch=//p' "$1"; }
: >"$out/plain" ; : >"$out/forward" ; : >"$out/recording"
for r in $(seq "$rounds"); do
	"$out/vectoradd" bench "$n" >"$out/p.txt" 2>&1 && ns "$out/p.txt" >>"$out/plain"
	LD_PRELOAD=$shim GPUPROBE_SOCKET=/nonexistent/agent.sock "$out/vectoradd" bench "$n" >"$out/f.txt" 2>&1 &&
		ns "$out/f.txt" >>"$out/forward"
	sock=$out/agent.sock
	rm -f "$sock"
	"$gp" agent-dump --socket "$sock" --exit-after 1 --slot-size 1024 --slots 262144 --timeout 60s >"$out/dump.$r.txt" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	"$gp" run --socket "$sock" --shim "$shim" -- "$out/vectoradd" bench "$n" >"$out/r.txt" 2>&1 &&
		ns "$out/r.txt" >>"$out/recording"
	wait "$dpid"
done
med() { sort -g "$1" | awk '{v[NR]=$1} END{if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
spread() { sort -g "$1" | awk 'NR==1{lo=$1} {hi=$1} END{printf "%s..%s", lo, hi}'; }
p=$(med "$out/plain"); f=$(med "$out/forward"); c=$(med "$out/recording")
echo
echo "launch cost on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $rounds interleaved rounds x $n launches, ns per launch (median, range)"
printf '%-10s %10s %12s %20s\n' config median "vs plain" range
printf '%-10s %10.1f %12s %20s\n' plain "$p" "" "$(spread "$out/plain")"
printf '%-10s %10.1f %+11.1f %20s\n' forward "$f" "$(awk -v a="$f" -v b="$p" "BEGIN{print a-b}")" "$(spread "$out/forward")"
printf '%-10s %10.1f %+11.1f %20s\n' recording "$c" "$(awk -v a="$c" -v b="$p" "BEGIN{print a-b}")" "$(spread "$out/recording")"
grep -h "dropped=" "$out"/dump.*.txt | tail -1
