#!/usr/bin/env bash
# launch-cost.sh: the host cost the shim adds to a kernel launch on the
# real driver (budget: <= 100 ns). On the GPU machine, from prebuilt
# bin/gpuprobe and bin/libgpuprobe.so; needs nvcc.
#
# It builds a micro-benchmark (testdata/cuda/bench/launchbench.cu) that
# launches an empty kernel in bursts of BURST launches, timing only the
# launch calls and waiting for the GPU between bursts (not timed), so the
# driver's queue never fills and the figure is the host's enqueue cost, not
# the GPU's throughput (a long unsynchronised loop measures the latter: the
# host waits for queue space). Two ways in:
#   cudart  empty<<<1, 32>>>: cudart's cuLaunchKernel pointer, which the
#           shim hands out through cuGetProcAddress (a dynamic wrapper);
#   driver  cuLaunchKernel called directly (-lcuda: the shim's export).
# Each runs in ROUNDS interleaved rounds (at least 7) of three
# configurations, four when bin/libgpuprobe-selftime.so exists
# (make bin/libgpuprobe-selftime.so):
#   plain      no shim
#   forward    shim loaded, no collector (forwards only)
#   recording  shim recording into `gpuprobe-harness agent-dump`'s ring
#   selftime   as recording, with the self-timing shim: it times its own
#              instructions around the driver call on every launch (rdtscp
#              at entry, before and after the call, and at exit; see
#              shim/src/selftime.c) and prints a "gpuprobe selftime:" line
#              at exit
# pinned to CPU $PIN_CPU with taskset when present (agent-dump to another
# CPU). It prints the median ns per launch of each, its range, and the
# difference to plain, the driver's cuCtxGetDevice cost (what each record
# pays in a process that sees several GPUs; with one GPU the shim does not
# call it), and rdtsc/clock_gettime costs. The selftime row adds the
# medians over rounds of the shim's own ns per launch (and its pre-call
# and post-call parts): a direct figure, free of the driver's jitter that
# the end-to-end difference carries. The last table is the cudart one: its
# "recording" row's third field is the added cost bench.sh checks.
# A last configuration, ab, measures the driver-API path inside one process:
# launchbench's ab mode, recording under the shim, launches in alternating
# bursts through cuLaunchKernel as linked (the shim's wrapper) and through
# libcuda's own entry (found in its symbol table), and prints the
# difference per launch. Both paths share the process, the driver's state
# and the caches, so the difference carries none of the process-to-process
# spread (hundreds of ns) of the end-to-end rows; the table gives its median
# over rounds and range, and the script checks that the collector received
# exactly the launches made through the shim.
# With BASE_SHIM (and BASE_STSHIM) set to another build of the shim (say,
# the last commit's, to measure a change), two more configurations run in
# the same rounds: base-recording and base-selftime, and the table gives
# the change against them.
# Environment: ROUNDS (default 7, at least 7), N (launches per process,
# default 100000), BURST (launches between waits, default 32), PARTS
# (cross: the cross-process tables, ab: the in-process one; default
# cross,ab), PIN_CPU
# (default 2), RING_SLOTS and SLOT_SIZE (agent-dump's launch ring; default
# the collector's, 65536 x 128 bytes), OUT_DIR, BASE_SHIM, BASE_STSHIM.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
gp=$root/bin/gpuprobe
harness=$root/bin/gpuprobe-harness
shim=$root/bin/libgpuprobe.so
stshim=$root/bin/libgpuprobe-selftime.so
out=${OUT_DIR:-$root/build/gpu-launch-cost}
rounds=${ROUNDS:-7}
((rounds < 7)) && rounds=7
n=${N:-100000}
burst=${BURST:-32}
cpu=${PIN_CPU:-2}
# The launch ring: the collector's defaults (buffers::ring_slots 65536,
# buffers::slot_size 128, config/config.go), so the ring's footprint in the
# caches is what production gives.
ring_slots=${RING_SLOTS:-65536}
slot_size=${SLOT_SIZE:-128}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$out"
for f in "$gp" "$harness" "$shim"; do
	[[ -e $f ]] || { echo "gpu-launch-cost: $f missing (make bin/gpuprobe bin/libgpuprobe.so)"; exit 1; }
done


stubs=$(dirname "$nvcc")/../lib64/stubs
"$nvcc" -O2 -arch=native -o "$out/launchbench" testdata/cuda/bench/launchbench.cu -L"$stubs" -lcuda >"$out/build.log" 2>&1 ||
	{ echo "nvcc failed: $(tail -3 "$out/build.log")"; exit 1; }

pin=() pin2=()
if command -v taskset >/dev/null && (($(nproc) > 1)); then
	((cpu < $(nproc))) || cpu=$(($(nproc) - 1))
	pin=(taskset -c "$cpu")
	pin2=(taskset -c "$(((cpu + 1) % $(nproc)))")
fi
ns() { sed -n 's/.*ns_per_launch=//p' "$1"; }
# selfns FILE: "mean pre post" of the selftime line in FILE.
selfns() { sed -n 's|^gpuprobe selftime: launches [0-9]*, shim ns/launch mean \([^ ]*\) (pre \([^,]*\), post \([^)]*\)).*|\1 \2 \3|p' "$1" | head -1; }
selftime=0
[[ -e $stshim ]] && selftime=1
base=${BASE_SHIM:-} stbase=${BASE_STSHIM:-}
[[ -z $base || -e $base ]] || { echo "gpu-launch-cost: BASE_SHIM $base missing"; exit 1; }
[[ -z $stbase || -e $stbase ]] || { echo "gpu-launch-cost: BASE_STSHIM $stbase missing"; exit 1; }
((selftime)) || stbase=
# PARTS: cross (the cross-process tables) and ab; default both.
parts=,${PARTS:-cross,ab},
modes=(driver cudart)
[[ $parts == *,cross,* ]] || modes=()
for m in "${modes[@]}"; do
	for c in plain forward recording selftime self base-recording base-selftime base-self; do : >"$out/$m.$c"; done
done
for c in ab ab-base; do
	: >"$out/$c"
done
# record SHIM MODE OUT DUMP: one launchbench run of MODE under SHIM,
# recording into a fresh agent-dump (its output in DUMP); the run's in OUT.
record() {
	local sock=$out/agent.sock dpid rc
	rm -f "$sock"
	"${pin2[@]}" "$harness" agent-dump --socket "$sock" --exit-after 1 --slot-size "$slot_size" --slots "$ring_slots" --timeout 120s \
		>"$4" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
	"$gp" run --socket "$sock" --shim "$1" -- "${pin[@]}" "$out/launchbench" "$2" "$n" "$burst" >"$3" 2>&1
	rc=$?
	wait "$dpid"
	return $rc
}
# abrun SHIM CONFIG: one ab run under SHIM, recording; "linked driver
# added" appended to $out/CONFIG, or a failure counted when the collector's
# launches are not exactly the ones made through the shim.
abfail=0
abrun() {
	local d=$out/dump.ab.$r.$2.txt got want
	if ! record "$1" ab "$out/ab.txt" "$d"; then
		echo "gpu-launch-cost: ab run under $1 failed: $(tail -2 "$out/ab.txt")" >&2
		abfail=$((abfail + 1))
		return
	fi
	got=$(sed -n 's/.*total clients=[0-9]* launches=\([0-9]*\).*/\1/p' "$d")
	want=$(sed -n 's/.*through the linked entry: \([0-9]*\)).*/\1/p' "$out/ab.txt")
	if [[ -z $got || $got != "$want" ]]; then
		echo "gpu-launch-cost: ab run: the collector got ${got:-no} launch records, the shim's path made ${want:-?}" >&2
		abfail=$((abfail + 1))
		return
	fi
	sed -n 's/.*linked_ns=\([^ ]*\) driver_ns=\([^ ]*\) added_ns=\([^ ]*\).*/\1 \2 \3/p' "$out/ab.txt" >>"$out/$2"
}
for r in $(seq "$rounds"); do
	for m in "${modes[@]}"; do
		"${pin[@]}" "$out/launchbench" "$m" "$n" "$burst" >"$out/p.txt" 2>&1 && ns "$out/p.txt" >>"$out/$m.plain"
		LD_PRELOAD=$shim GPUPROBE_SOCKET=/nonexistent/agent.sock "${pin[@]}" "$out/launchbench" "$m" "$n" "$burst" \
			>"$out/f.txt" 2>&1 && ns "$out/f.txt" >>"$out/$m.forward"
		record "$shim" "$m" "$out/r.txt" "$out/dump.$m.$r.txt" && ns "$out/r.txt" >>"$out/$m.recording"
		if ((selftime)); then
			record "$stshim" "$m" "$out/s.txt" "$out/dump.$m.$r.selftime.txt" && ns "$out/s.txt" >>"$out/$m.selftime"
			selfns "$out/s.txt" >>"$out/$m.self"
		fi
		if [[ -n $base ]]; then
			record "$base" "$m" "$out/b.txt" "$out/dump.$m.$r.base.txt" && ns "$out/b.txt" >>"$out/$m.base-recording"
		fi
		if [[ -n $stbase ]]; then
			record "$stbase" "$m" "$out/bs.txt" "$out/dump.$m.$r.base-selftime.txt" && ns "$out/bs.txt" >>"$out/$m.base-selftime"
			selfns "$out/bs.txt" >>"$out/$m.base-self"
		fi
	done
	if [[ $parts == *,ab,* ]]; then
		abrun "$shim" ab
		[[ -z $base ]] || abrun "$base" ab-base
	fi
done
"${pin[@]}" "$out/launchbench" facts >"$out/facts.txt" 2>&1

med() { sort -g "$1" | awk '{v[NR]=$1} END{if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
spread() { sort -g "$1" | awk 'NR==1{lo=$1} {hi=$1} END{printf "%s..%s", lo, hi}'; }
echo
echo "launch cost on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
echo "$rounds interleaved rounds x $n launches in bursts of $burst (only launch calls timed), ${pin[*]:-not pinned}, launch ring $ring_slots x $slot_size bytes"
grep -h "facts:" "$out/facts.txt" || echo "facts: failed: $(tail -2 "$out/facts.txt")"
((selftime)) && echo "selftime: the shim's own instructions per launch, timed inside it (median over rounds; pre/post: before/after the driver call)"
echo "records: $(grep -h "total clients" "$out"/dump.*.txt | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^(launches|dropped)=/) {split($i, kv, "="); s[kv[1]] += kv[2]}} END {printf "launches=%d dropped=%d", s["launches"], s["dropped"]}')"
for m in "${modes[@]}"; do
	p=$(med "$out/$m.plain"); f=$(med "$out/$m.forward"); c=$(med "$out/$m.recording")
	# Row names: the cudart table's are plain/forward/recording (what
	# bench.sh reads), the driver table's are prefixed.
	pre=; [[ $m == cudart ]] || pre=$m/
	echo
	echo "$m: ns per launch (median, range); vs plain = added by the shim"
	printf '%-17s %10s %12s %20s\n' config median "vs plain" range
	printf '%-17s %10.1f %12s %20s\n' "${pre}plain" "$p" "" "$(spread "$out/$m.plain")"
	printf '%-17s %10.1f %+11.1f %20s\n' "${pre}forward" "$f" "$(awk -v a="$f" -v b="$p" 'BEGIN{print a-b}')" "$(spread "$out/$m.forward")"
	printf '%-17s %10.1f %+11.1f %20s\n' "${pre}recording" "$c" "$(awk -v a="$c" -v b="$p" 'BEGIN{print a-b}')" "$(spread "$out/$m.recording")"
	if [[ -n $base ]]; then
		b=$(med "$out/$m.base-recording")
		printf '%-17s %10.1f %+11.1f %20s  (recording - this: %+.1f)\n' "${pre}base-recording" "$b" \
			"$(awk -v a="$b" -v b="$p" 'BEGIN{print a-b}')" "$(spread "$out/$m.base-recording")" \
			"$(awk -v a="$c" -v b="$b" 'BEGIN{print a-b}')"
	fi
	# selfrow NAME CONFIG: a selftime row (CONFIG's end-to-end times and
	# the shim's own ns per launch).
	selfrow() {
		local s
		s=$(med "$out/$m.$2")
		awk '{print $1}' "$out/$m.${2%time}" >"$out/$m.$2.mean"
		awk '{print $2}' "$out/$m.${2%time}" >"$out/$m.$2.pre"
		awk '{print $3}' "$out/$m.${2%time}" >"$out/$m.$2.post"
		printf '%-17s %10.1f %+11.1f %20s  self %.1f ns/launch (pre %.1f, post %.1f; %s)\n' "$1" "$s" \
			"$(awk -v a="$s" -v b="$p" 'BEGIN{print a-b}')" "$(spread "$out/$m.$2")" "$(med "$out/$m.$2.mean")" \
			"$(med "$out/$m.$2.pre")" "$(med "$out/$m.$2.post")" "$(spread "$out/$m.$2.mean")"
	}
	if ((selftime)); then selfrow "${pre}selftime" selftime; fi
	if [[ -n $stbase ]]; then selfrow "${pre}base-selftime" base-selftime; fi
done
# abrow NAME CONFIG: the ab table's row.
abrow() {
	[[ -s $out/$2 ]] || return 0
	for i in 1 2 3; do awk -v i="$i" '{print $i}' "$out/$2" >"$out/$2.$i"; done
	printf '%-17s %12.1f %12.1f %10.1f %20s\n' "$1" "$(med "$out/$2.1")" "$(med "$out/$2.2")" "$(med "$out/$2.3")" \
		"$(spread "$out/$2.3")"
}
echo
echo "driver API in one process (ab): alternating bursts through the shim's cuLaunchKernel and libcuda's own; ns per launch (median over rounds)"
printf '%-17s %12s %12s %10s %20s\n' config "via shim" direct added "added range"
abrow ab-recording ab
[[ -z $base ]] || abrow ab-base-recording ab-base
((abfail == 0)) || { echo "gpu-launch-cost: $abfail ab runs failed (above)"; exit 1; }
