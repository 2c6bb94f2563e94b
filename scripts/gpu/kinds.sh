#!/usr/bin/env bash
# kinds.sh: every launch kind gets a device window or a counted reason.
# Our own programs of each kind (testdata/cuda/kinds: dynamic parallelism
# parent/child grids, a cooperative launch with grid syncs, launch
# attributes and thread-block clusters through cudaLaunchKernelExC, a
# graph instantiated for device launch) run under `gpuprobe run` with the
# collector (lib_collector.sh, metrics to metrics.json); one row per kind:
# host launches (the program's own count), windowed (coverage route
# windows or inline_ptx), untimed (windows.untimed: the driver gave no
# timestamps), missing, device-launched windows, unmatched windows. PASS
# when windowed + untimed = host launches and none is missing. Also: the
# CUPTI layout of CDP kernel records against this machine's cupti.h, and
# the shim trace's first record of each CUPTI kind and launch type (what
# the driver reports for each kind). Needs nvcc, bin/otelcol-gpuprobe,
# python3.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${KINDS_OUT:-build/gpu-kinds}
mkdir -p "$out"
CUDA=${CUDA:-/usr/local/cuda}
export PATH=$CUDA/bin:$PATH
arch=${GPU_ARCH:-sm_90}
status=0
rows=()
row() { rows+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")"); [[ $2 == FAIL ]] && status=1; printf '==> %-10s %-5s %s\n' "$1" "$2" "$3"; }

# The CDP kernel record fields the shim reads (shim/src/cupti.c, GP_CDP_*).
inc=$(dirname "$(find "$CUDA"/ -name cupti_activity.h 2>/dev/null | head -1)")
cat >"$out/abi.c" <<'EOC'
#include <stddef.h>
#include <stdio.h>
#include <cupti.h>
#define EQ(a, b) do { if ((long)(a) != (long)(b)) { printf("kinds abi: %s = %ld, the shim reads %ld\n", #a, (long)(a), (long)(b)); bad = 1; } } while (0)
int main(void)
{
	int bad = 0;
	EQ(CUPTI_ACTIVITY_KIND_CDP_KERNEL, 18);
	EQ(offsetof(CUpti_ActivityCdpKernel, start), 8);
	EQ(offsetof(CUpti_ActivityCdpKernel, end), 16);
	EQ(offsetof(CUpti_ActivityCdpKernel, deviceId), 24);
	EQ(offsetof(CUpti_ActivityCdpKernel, correlationId), 76);
	EQ(offsetof(CUpti_ActivityCdpKernel, name), 136);
	printf("kinds abi: %s\n", bad ? "FAIL" : "ok");
	return bad;
}
EOC
if gcc -I"$CUDA/include" -I"$inc" "$out/abi.c" -o "$out/abi" >"$out/abi.log" 2>&1 && "$out/abi" >>"$out/abi.log"; then
	row abi PASS "$(tail -1 "$out/abi.log")"
else
	row abi FAIL "$(tail -1 "$out/abi.log")"
fi

. scripts/gpu/lib_collector.sh
# kind NAME SOURCE NVCC_FLAGS...: build, run under the shim, check.
kind() {
	local name=$1 src=$2 dir=$out/$1
	shift 2
	mkdir -p "$dir"
	if ! nvcc -arch="$arch" "$@" -o "$dir/prog" "$src" >"$dir/build.log" 2>&1; then
		row "$name" FAIL "nvcc: $(grep -m1 -i error "$dir/build.log")"
		return
	fi
	if ! start_collector "$dir" "" metrics; then
		row "$name" FAIL "collector did not start (see $dir/collector.log)"
		return
	fi
	if ! GPUPROBE_TRACE=1 run_with_shim "$dir" "$name" "$dir/prog" >"$dir/run.log"; then
		row "$name" FAIL "$(cat "$dir/run.log") $(tail -1 "$dir/plain.txt")"
		return
	fi
	grep -h "device windows: first record\|has no launch the shim filed\|device windows: .* written" "$dir/shim.err" | sed "s/^/    $name trace: /" | head -12
	local res
	res=$(python3 - "$dir/metrics.json" "$dir/shim.txt" <<'EOP'
import re, sys
sys.path.insert(0, "scripts/gpu")
import lib_metrics as lm
pts = lm.load(sys.argv[1])
m = re.search(r"host_launches=(\d+)", open(sys.argv[2]).read())
host = int(m.group(1)) if m else -1
def total(name, **want):
    return sum(p["value"] for p in lm.latest(pts, name) if all(p["attrs"].get(k) == v for k, v in want.items()))
cov = {r: total("gpuprobe.receiver.coverage.launches", **{"gpuprobe.windows.route": r}) for r in ("inline_ptx", "windows", "none")}
win = cov["inline_ptx"] + cov["windows"]
unt, miss = total("gpuprobe.receiver.windows.untimed"), total("gpuprobe.receiver.windows.missing")
dev, unm = total("gpuprobe.receiver.windows.device_launched"), total("gpuprobe.receiver.windows.unmatched")
ok = host > 0 and win + unt == host and miss == 0
print("%s host=%d windowed=%d untimed=%d missing=%d none=%d device_launched=%d unmatched=%d" %
      ("PASS" if ok else "FAIL", host, win, unt, miss, cov["none"], dev, unm))
EOP
)
	row "$name" "${res%% *}" "${res#* }"
}

kind cdp testdata/cuda/kinds/cdp.cu -rdc=true -lcudadevrt
kind coop testdata/cuda/kinds/coop.cu
kind attrs testdata/cuda/kinds/attrs.cu
kind graphdev testdata/cuda/kinds/graphdev.cu -rdc=true -lcudadevrt

echo
echo "kinds (every launch a window or a counted reason) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
printf '%s\n' "${rows[@]}"
exit $status
