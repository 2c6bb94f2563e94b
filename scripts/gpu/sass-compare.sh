#!/usr/bin/env bash
# sass-compare.sh - compare the SASS that ptxas makes from gpuprobe's PTX with
# the SASS that nvcc makes from the same logic written in CUDA C.
#
# For each testdata/sass/NAME.data (an eBPF program in bpf_conformance text
# form) and its twin testdata/sass/NAME.cu, it builds
#   ours: `gpuprobe ptx NAME.data` (the program wrapped in ptx.TestKernel's
#         test entry) -> ptxas -arch=$ARCH -> cubin
#   nvcc: nvcc -arch=$ARCH -cubin NAME.cu (same test-entry frame, common.cuh)
# counts the SASS instructions of each cubin with cuobjdump -sass (NOPs and
# the trailing self-branch padding excluded), and prints a table. "ours" is
# the default code (every access through a pointer other than r10 checks its
# alignment at run time and has a byte-wise slow path, so that a misaligned
# access cannot fault the application's kernel); "aligned" is
# `gpuprobe ptx -aligned` (ptx.Options.AssumeAligned), which trusts natural
# alignment as the CUDA C code does. Static counts include cold paths.
#
# Usage: scripts/gpu/sass-compare.sh [GPUPROBE_BINARY]
#   GPUPROBE_BINARY defaults to bin/gpuprobe (built with
#   `go build -o bin/gpuprobe ./cmd/gpuprobe` on a machine with Go).
# Environment: ARCH (default sm_90), NVCC, PTXAS, CUOBJDUMP, NVCC_FLAGS,
# KEEP=1 keeps the work directory and prints its path.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
gpuprobe=${1:-$root/bin/gpuprobe}
arch=${ARCH:-sm_90}
nvcc=${NVCC:-nvcc}
ptxas=${PTXAS:-ptxas}
cuobjdump=${CUOBJDUMP:-cuobjdump}
dir=$root/testdata/sass

for tool in "$gpuprobe" "$nvcc" "$ptxas" "$cuobjdump"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "sass-compare: $tool not found" >&2
		exit 2
	fi
done

work=$(mktemp -d)
if [ "${KEEP:-0}" = 1 ]; then
	echo "work directory: $work" >&2
else
	trap 'rm -rf "$work"' EXIT
fi

# nvcc_cubin SRC OUT: nvcc, retrying with clang as the host compiler when
# the installed gcc is too new for this nvcc (Debian's CUDA 11.8 on gcc 12).
nvcc_cubin() {
	local log=$work/nvcc.log
	# shellcheck disable=SC2086
	if "$nvcc" -arch="$arch" -cubin -O3 ${NVCC_FLAGS:-} -o "$2" "$1" >"$log" 2>&1; then
		return 0
	fi
	local cc
	cc=$(grep -o 'clang-[0-9]*' "$log" | head -1 || true)
	if [ -n "$cc" ]; then
		# shellcheck disable=SC2086
		"$nvcc" -ccbin "$cc" -arch="$arch" -cubin -O3 ${NVCC_FLAGS:-} -o "$2" "$1" && return 0
	fi
	cat "$log" >&2
	return 1
}

# count CUBIN: SASS instructions, without NOPs and the final BRA to itself.
count() {
	"$cuobjdump" -sass "$1" |
		grep -E '^\s+/\*[0-9a-f]{4}\*/' |
		grep -vE '\bNOP\b' |
		awk '{
			if (match($0, /\/\*[0-9a-f]+\*\//)) {
				a = substr($0, RSTART + 2, RLENGTH - 4)
				sub(/^0+/, "", a)
				if (index($0, "BRA 0x" a ";") > 0) next
			}
			n++
		} END { print n + 0 }'
}

printf '%-8s %8s %8s %8s %8s %8s\n' program ours aligned nvcc ratio aligned
printf '%-8s %8s %8s %8s %8s %8s\n' "" "(SASS)" "(SASS)" "(SASS)" ours/nv al./nv
status=0
for data in "$dir"/*.data; do
	name=$(basename "$data" .data)
	cu=$dir/$name.cu
	if [ ! -f "$cu" ]; then
		echo "sass-compare: $cu missing" >&2
		status=1
		continue
	fi
	"$gpuprobe" ptx -arch "$arch" "$data" >"$work/$name.ptx"
	"$gpuprobe" ptx -arch "$arch" -aligned "$data" >"$work/$name.aligned.ptx"
	"$ptxas" -arch="$arch" -O3 -o "$work/$name.ours.cubin" "$work/$name.ptx"
	"$ptxas" -arch="$arch" -O3 -o "$work/$name.aligned.cubin" "$work/$name.aligned.ptx"
	nvcc_cubin "$cu" "$work/$name.nvcc.cubin"
	ours=$(count "$work/$name.ours.cubin")
	aligned=$(count "$work/$name.aligned.cubin")
	theirs=$(count "$work/$name.nvcc.cubin")
	r1=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	r2=$(awk -v a="$aligned" -v b="$theirs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	printf '%-8s %8d %8d %8d %8s %8s\n' "$name" "$ours" "$aligned" "$theirs" "$r1" "$r2"
done
exit $status
